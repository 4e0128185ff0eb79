"""`specdiff.models.load` over tiny random checkpoints of every architecture (issue 12, items 4 and 8):
each verifier class the installed transformers provides, each drafter kind, one speculative round for
every pair, and clear errors on bad input. Nothing is downloaded.

Dream, LLaDA and SDAR keep their modeling code outside transformers; their conventions are tested
through stand-ins (docs/drafters.md):
- Dream: a Qwen2ForCausalLM with `logits_shift: 1`, `mask_token_id`, `is_causal: false` (shifted
  logits, its mask id, run bidirectionally); `model_type: Dream` + trust_remote_code is not exercised;
- LLaDA: a BertForMaskedLM (a masked-LM class: bidirectional, no shift, its mask id);
- SDAR: a Qwen3ForCausalLM whose config.json names `SDARForCausalLM` and has `block_size` (recognised
  as block diffusion, no shift, block length from the config).
"""
from __future__ import annotations

import json
import warnings

import pytest
import torch
from tiny_models import tiny_dflash, tiny_diffusion_gemma

import specdiff as sd
from specdiff import models
from specdiff.drafters.vocab import VocabularyMismatch, fit_vocabulary

VOCAB, MASK = 12, 11
SMALL = dict(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=1, head_dim=8, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
             eos_token_id=2)


def _causal(kind: str, seed: int = 0, **extra):
    import transformers

    config_class, model_class = {
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"), "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
        "llama": ("LlamaConfig", "LlamaForCausalLM"), "gemma": ("GemmaConfig", "GemmaForCausalLM"),
        "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"), "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
    }[kind]
    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(**{**SMALL, **extra})
    return getattr(transformers, model_class)(config).eval()


VERIFIERS = ["qwen2", "qwen3", "llama", "gemma", "gemma2", "gemma3"]


def _save(model, path, patch: dict | None = None):
    model.save_pretrained(path)
    if patch:
        config = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**config, **patch}))
    return str(path)


@pytest.fixture(scope="module")
def drafter_dirs(tmp_path_factory):
    import transformers

    root = tmp_path_factory.mktemp("drafters")
    dream = _causal("qwen2", seed=1, logits_shift=1, mask_token_id=MASK, is_causal=False)
    bert = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=64, pad_token_id=0, mask_token_id=MASK)).eval()
    sdar = _causal("qwen3", seed=2, mask_token_id=MASK)
    return {
        "masked (Dream stand-in)": _save(dream, root / "dream"),
        "masked (LLaDA stand-in)": _save(bert, root / "llada", {"mask_token_id": MASK}),
        "block (SDAR stand-in)": _save(sdar, root / "sdar", {"architectures": ["SDARForCausalLM"], "block_size": 4}),
        "uniform (DiffusionGemma)": _save(tiny_diffusion_gemma(VOCAB, seed=3), root / "diffusion_gemma"),
        "autoregressive": _save(_causal("llama", seed=4), root / "ar"),
    }


KINDS = {"masked (Dream stand-in)": "masked", "masked (LLaDA stand-in)": "masked", "block (SDAR stand-in)": "block",
         "uniform (DiffusionGemma)": "uniform", "autoregressive": "ar"}


@pytest.mark.parametrize("verifier_kind", VERIFIERS)
def test_one_round_with_each_drafter_against_each_verifier(tmp_path, drafter_dirs, verifier_kind):
    prompts = [[1, 5, 6], [1, 7]]  # left padding in every architecture, sliding-window ones included
    verifier_model = _causal(verifier_kind, seed=7)
    verifier = models.load(_save(verifier_model, tmp_path / verifier_kind), role="verifier")
    assert isinstance(verifier, sd.Verifier)
    drafters = {label: models.load(path, role="drafter", steps=2) if KINDS[label] in ("masked", "block", "uniform")
                else models.load(path, role="drafter") for label, path in drafter_dirs.items()}
    dflash_path = _save(tiny_dflash(verifier.model, mask_token_id=MASK), tmp_path / "dflash")
    drafters["dflash"] = models.load(dflash_path, role="drafter", verifier=verifier)
    expected = {**{label: KINDS[label] for label in drafter_dirs}, "dflash": "dflash"}
    classes = {"masked": sd.MaskedDiffusionDrafter, "block": sd.BlockDiffusionDrafter,
               "uniform": sd.UniformDiffusionDrafter, "dflash": sd.DFlashDrafter,
               "ar": sd.AutoregressiveDrafter}
    for label, drafter in drafters.items():
        assert type(drafter) is classes[expected[label]], label
        gen = sd.SpeculativeGenerator(drafter, verifier, block_size=3, proposal="point_mass", eos_token_id=[])
        out = gen.generate(prompts, max_new_tokens=4, generator=torch.Generator().manual_seed(0))
        assert [len(row) for row in out.token_ids] == [4] * len(prompts) and out.stats[0].rounds >= 1, label


def test_conventions_read_from_the_config(drafter_dirs):
    dream = models.load(drafter_dirs["masked (Dream stand-in)"], role="drafter")
    assert dream.shift_logits is True and dream.mask_token_id == MASK
    llada = models.load(drafter_dirs["masked (LLaDA stand-in)"], role="drafter")
    assert llada.shift_logits is False and llada.mask_token_id == MASK
    sdar = models.load(drafter_dirs["block (SDAR stand-in)"], role="drafter", threshold=0.9)
    assert sdar.shift_logits is False and sdar.block_length == 4 and sdar.prefix_cache == "persistent"
    with pytest.raises(ValueError, match="block length"):
        sdar.draft(torch.tensor([[1, 2]]), None, 5)
    assert models.drafter_kind({"model_type": "Dream"}) == "masked"
    assert models.drafter_kind({"model_type": "llada", "architectures": ["LLaDAModelLM"]}) == "masked"
    assert models.drafter_kind({"model_type": "sdar", "architectures": ["SDARForCausalLM"]}) == "block"
    assert models.drafter_kind({"model_type": "diffusion_gemma"}) == "uniform"
    assert models.drafter_kind({"model_type": "muse_glimmer_assistant", "target_layer_ids": [1], "block_size": 16}) \
        == "dflash"
    assert models.drafter_kind({"architectures": ["Gemma3ForCausalLM"]}) == "ar"
    assert set(models.DRAFTER_KINDS) == {"masked", "uniform", "block", "dflash", "ar"}


def test_unrecognised_checkpoint_lists_the_supported_kinds(tmp_path, drafter_dirs):
    with pytest.raises(ValueError, match="masked.*block.*uniform.*dflash.*autoregressive"):
        models.drafter_kind({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]})
    path = tmp_path / "odd"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "whisper", "architectures": ["WhisperModel"]}))
    with pytest.raises(ValueError, match="supports masked"):
        models.load(str(path), role="drafter")
    with pytest.raises(ValueError, match="verifier must be a causal LM"):
        models.load(drafter_dirs["uniform (DiffusionGemma)"], role="verifier")
    with pytest.raises(ValueError, match="verifier"):  # a local DFlash checkpoint needs its verifier
        models.load(_save(tiny_dflash(_causal("qwen3")), tmp_path / "dflash"), role="drafter")


class _Tokenizer:
    def __init__(self, tokens):
        self.tokens = tokens

    def get_vocab(self):
        return {token: i for i, token in enumerate(self.tokens)}

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(self.tokens[i] if i < len(self.tokens) else "?" for i in ids)


def test_vocabulary_is_fitted_or_refused_before_generation():
    """Dream-7B (152,064 rows) with Qwen3-8B (151,936), in miniature: 14 drafter rows, 12 verifier rows."""
    verifier = sd.Verifier(_causal("qwen3", seed=0))
    wide = _causal("qwen2", seed=1, vocab_size=14, logits_shift=1, mask_token_id=9, is_causal=False)
    shared = [f"t{i}" for i in range(9)]
    drafter = sd.MaskedDiffusionDrafter(wide)
    with pytest.raises(ValueError, match="vocabulary"):  # the engine refuses the raw pair
        sd.SpeculativeGenerator(drafter, verifier)
    with pytest.raises(VocabularyMismatch, match="tokenizers"):  # no tokenizers: cannot check
        fit_vocabulary(drafter, verifier)
    with pytest.warns(UserWarning, match="dropping the drafter's output rows 12..13"):
        fit_vocabulary(drafter, verifier, _Tokenizer(shared + ["<mask>"]), _Tokenizer(shared + ["<mask>", "x"]))
    assert drafter.vocab_size == 12
    out = sd.SpeculativeGenerator(drafter, verifier, block_size=3, eos_token_id=[]).generate([[1, 2]], 6)
    assert len(out.token_ids[0]) == 6
    with pytest.raises(VocabularyMismatch, match="mask token id 9.*</tool_response>"):
        fit_vocabulary(drafter, verifier, _Tokenizer(shared + ["<|mask|>"]), _Tokenizer(shared + ["</tool_response>"]))
    with pytest.raises(VocabularyMismatch, match="disagree on 1 shared ids"):
        fit_vocabulary(drafter, verifier, _Tokenizer(["a"] + shared[1:]), _Tokenizer(shared))
    narrow = sd.AutoregressiveDrafter(_causal("qwen3", seed=2, vocab_size=10))
    with pytest.raises(VocabularyMismatch, match="smaller"):
        fit_vocabulary(narrow, verifier)
    with pytest.raises(VocabularyMismatch, match="outside its embedding"):
        fit_vocabulary(sd.MaskedDiffusionDrafter(_causal("qwen3", logits_shift=1), mask_token_id=40), verifier)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit_vocabulary(sd.AutoregressiveDrafter(_causal("llama")), verifier, _Tokenizer(shared), _Tokenizer(shared))


def test_the_engine_fits_a_larger_drafter_when_the_tokenizers_agree():
    """SpeculativeGenerator with both tokenizers: Dream-7B / Qwen3-8B in miniature (14 vs 12 rows)."""
    verifier = sd.Verifier(_causal("qwen3", seed=0))
    shared = [f"t{i}" for i in range(9)]
    wide = _causal("qwen2", seed=1, vocab_size=14, logits_shift=1, mask_token_id=9, is_causal=False)
    drafter = sd.MaskedDiffusionDrafter(wide, steps=2)
    with pytest.warns(UserWarning, match="dropping the drafter's output rows 12..13"):
        gen = sd.SpeculativeGenerator(drafter, verifier, block_size=3, eos_token_id=[],
                                      tokenizer=_Tokenizer(shared + ["<mask>", "x"]),
                                      drafter_tokenizer=_Tokenizer(shared + ["<mask>"]))
    out = gen.generate([[1, 2]], 6, generator=torch.Generator().manual_seed(0))
    assert drafter.vocab_size == 12 and len(out.token_ids[0]) == 6 and max(out.token_ids[0]) < 12


def test_the_engine_refuses_disagreeing_tokenizers_before_generating():
    verifier = sd.Verifier(_causal("qwen3", seed=0))
    shared = [f"t{i}" for i in range(9)]
    drafter = sd.MaskedDiffusionDrafter(_causal("qwen2", seed=1, vocab_size=14, logits_shift=1, mask_token_id=9,
                                                is_causal=False))
    with pytest.raises(VocabularyMismatch, match=r"vocabulary \(14 tokens\) does not fit .*disagree on 1 shared id"):
        sd.SpeculativeGenerator(drafter, verifier, tokenizer=_Tokenizer(shared + ["<mask>"]),
                                drafter_tokenizer=_Tokenizer(["a"] + shared[1:] + ["<mask>"]))
    with pytest.raises(VocabularyMismatch, match="pass both tokenizers"):  # one tokenizer: cannot check
        sd.SpeculativeGenerator(drafter, verifier, tokenizer=_Tokenizer(shared + ["<mask>"]))
    assert drafter.output_vocab is None  # nothing was trimmed


def _save_tokenizer(tokens, path):
    from tokenizers import Tokenizer, models as tokenizer_models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(tokenizer_models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token=tokens[3]))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=tokens[0], bos_token=tokens[1], eos_token=tokens[2],
                            unk_token=tokens[3]).save_pretrained(path)


@pytest.mark.parametrize("agree", [True, False])
def test_build_generator_fits_checkpoints_with_their_tokenizers(tmp_path, agree):
    """The command path (`specdiff generate --drafter PATH --verifier PATH`): each checkpoint's own tokenizer."""
    from specdiff.models import ModelCache
    from specdiff.runs import RunConfig, build_generator

    shared = [f"t{i}" for i in range(9)]
    verifier_dir = _save(_causal("qwen3", seed=0), tmp_path / "verifier")
    drafter_dir = _save(_causal("qwen2", seed=1, vocab_size=14, logits_shift=1, mask_token_id=9, is_causal=False),
                        tmp_path / "drafter")
    _save_tokenizer(shared + ["<mask>", "x"], verifier_dir)
    _save_tokenizer((shared if agree else shared[:5] + ["other"] + shared[6:]) + ["<mask>"], drafter_dir)
    config = RunConfig("fit", drafter=drafter_dir, verifier=verifier_dir, steps=1)
    if not agree:
        with pytest.raises(VocabularyMismatch, match="disagree on 1 shared id.*5: 'other' vs 't5'"):
            build_generator(config, ModelCache())
        return
    with pytest.warns(UserWarning, match="dropping the drafter's output rows 12..13"):
        gen = build_generator(config, ModelCache())
    out = gen.generate(["t4 t5 t6"], 5, generator=torch.Generator().manual_seed(0))
    assert gen.drafter.vocab_size == 12 and 1 <= len(out.token_ids[0]) <= 5 and isinstance(out.texts[0], str)
