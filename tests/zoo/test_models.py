"""The shipped testbed: tokenizer round trip, every model loads and runs, attention patterns."""
import pytest
import torch

from specdiff import zoo
from specdiff.drafters.masked import MaskedDiffusionDrafter, masked_logits
from specdiff.eval import tasks


@pytest.fixture(scope="module")
def tok():
    return zoo.tokenizer()


def test_tokenizer_round_trip(tok):
    for problem in tasks.arith_problems("test", 100):
        text = problem.prompt + problem.answer
        ids = tok(text).input_ids
        assert ids[0] == tok.bos_token_id
        assert tok.unk_token_id not in ids
        assert tok.decode(ids, skip_special_tokens=True) == text


def test_tokenizer_special_tokens_and_digits(tok):
    assert len({tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.mask_token_id}) == 4
    ids = tok("Mia has 2024 shells.", add_special_tokens=False).input_ids
    pieces = tok.convert_ids_to_tokens(ids)
    assert pieces == ["Mia", "\u2581has", "\u25812", "0", "2", "4", "\u2581shells", "."]
    assert tok.decode(ids) == "Mia has 2024 shells."


def test_tokenizer_lengths(tok):
    problems = tasks.arith_problems("test", 200)
    answer = sum(len(tok(p.answer, add_special_tokens=False).input_ids) for p in problems) / len(problems)
    prompt = sum(len(tok(p.prompt).input_ids) for p in problems) / len(problems)
    assert answer >= 50 and prompt <= 60


@pytest.mark.parametrize("name", zoo.MODEL_NAMES)
def test_model_loads_and_runs(name, tok):
    """Every shipped model: its class, its vocabulary, and one forward (causal LMs) or one speculative
    round against the verifier (the block, uniform and DFlash drafters, once shipped)."""
    from specdiff import models
    from specdiff.zoo import configs

    model = zoo.load(name)
    assert type(model).__name__ == configs.MODEL_CLASSES.get(name, "Qwen3ForCausalLM")
    prompt = tasks.arith_problems("test", 1)[0].prompt
    if name in ("block-drafter", "uniform-drafter", "dflash-drafter"):
        import specdiff as sd

        verifier = models.load("verifier")
        drafter = models.load(name, role="drafter", verifier=verifier)
        assert drafter.vocab_size == len(tok)
        out = sd.SpeculativeGenerator(drafter, verifier, block_size=configs.BLOCK_TOKENS, tokenizer=tok).generate(
            [prompt], max_new_tokens=8, generator=torch.Generator().manual_seed(0))
        assert 1 <= len(out.token_ids[0]) <= 8
        return
    assert model.config.vocab_size == len(tok)
    ids = tok([prompt], return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok))
    assert torch.isfinite(logits).all()


def test_weights_are_small():
    total = sum((zoo.model_dir(n) / "model.safetensors").stat().st_size for n in zoo.MODEL_NAMES)
    assert total <= 40e6


def test_verifier_is_causal(tok):
    model = zoo.load("verifier")
    ids = tok(["Mia has 4 * 6 = 24 shells."], return_tensors="pt").input_ids
    changed = ids.clone()
    changed[0, -2] = tok.convert_tokens_to_ids("\u25817")
    with torch.no_grad():
        a, b = model(input_ids=ids).logits, model(input_ids=changed).logits
    assert torch.allclose(a[:, :-2], b[:, :-2], atol=1e-5)


def test_masked_drafter_is_bidirectional_and_shifted(tok):
    model = zoo.load("masked-drafter")
    assert model.config.is_causal is False
    ids = tok(["Mia has 4 * 6 = 24 shells."], return_tensors="pt").input_ids
    changed = ids.clone()
    changed[0, -2] = tok.convert_tokens_to_ids("\u25817")
    key_mask = torch.ones_like(ids, dtype=torch.bool)
    with torch.no_grad():
        a, b = masked_logits(model, ids, key_mask), masked_logits(model, changed, key_mask)
        raw = model(input_ids=ids, attention_mask=key_mask[:, None, None, :].expand(1, 1, ids.shape[1], ids.shape[1])).logits
    assert not torch.allclose(a[:, 1:-2], b[:, 1:-2], atol=1e-4)  # a later token changes earlier positions
    assert torch.allclose(a[:, 1:], raw[:, :-1])  # row j holds the model's output at j-1 (Dream's shift)


def test_masked_drafter_draft_and_generate(tok):
    model = zoo.load("masked-drafter")
    prompts = [p.prompt for p in tasks.arith_problems("test", 2)]
    rows = [tok(p).input_ids for p in prompts]
    length = max(map(len, rows))
    ids = torch.tensor([[tok.pad_token_id] * (length - len(r)) + r for r in rows])
    mask = ids != tok.pad_token_id
    drafter = MaskedDiffusionDrafter(model, steps=4, tokenizer=tok)
    draft = drafter.draft(ids, mask, 8, generator=torch.Generator().manual_seed(0))
    assert draft.tokens.shape == (2, 8) and draft.probs.shape == (2, 8, len(tok))
    assert (draft.tokens != tok.mask_token_id).all()
    assert torch.allclose(draft.probs.sum(-1), torch.ones(2, 8), atol=1e-4)
    picked = draft.probs.gather(-1, draft.tokens[..., None]).squeeze(-1)
    assert (picked > 0).all()  # every token was drawn from its recorded distribution
    again = drafter.draft(ids, mask, 8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(draft.tokens, again.tokens)
    canvas = drafter.generate(ids, mask, 12, steps=12, generator=torch.Generator().manual_seed(0))
    assert canvas.shape == (2, 12)


def test_autoregressive_drafter_matches_model(tok):
    from specdiff.drafters.autoregressive import AutoregressiveDrafter

    model = zoo.load("ar-drafter")
    ids = tok([tasks.arith_problems("test", 1)[0].prompt], return_tensors="pt").input_ids
    drafter = AutoregressiveDrafter(model, temperature=0.0)
    draft = drafter.draft(ids, None, 6)
    with torch.no_grad():
        greedy = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                                min_new_tokens=6, pad_token_id=tok.pad_token_id)
    assert torch.equal(draft.tokens, greedy[:, ids.shape[1]:])
    assert drafter.point_mass and draft.probs is None  # greedy: a point mass, verified with q = onehot(y)
    sampler = AutoregressiveDrafter(model, temperature=1.0)
    sampled = sampler.draft(ids, None, 6, generator=torch.Generator().manual_seed(0))
    assert not sampler.point_mass and sampled.probs.shape == (1, 6, len(tok))
    assert torch.allclose(sampled.probs.sum(-1), torch.ones(1, 6), atol=1e-4)
