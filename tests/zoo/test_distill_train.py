"""`specdiff distill --kind dflash|ar|masked` (issues 31, 32; `specdiff.training.distill`) on a tiny verifier and a
few stored conversations: the draft vocabulary, a resumed run equal to an uninterrupted one, the saved folder
(trained weights only, float16; the shared ones come from the verifier at load time), loading it as a drafter
of that verifier, and refusing another verifier, naming both."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from specdiff.training import distill as distill_train
from specdiff.zoo_tools import distill_data


def _verifier(path, tok, seed: int, layers: int = 4, embedding_scale: float = 1.0):
    """A tiny Llama verifier saved at path; embedding_scale > 1 gives it opinions (lower-entropy outputs)."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, tie_word_embeddings=True,
                         max_position_embeddings=256)
    model = LlamaForCausalLM(config)
    if embedding_scale != 1.0:
        with torch.no_grad():
            model.get_input_embeddings().weight.mul_(embedding_scale)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from specdiff import zoo

    tok = zoo.tokenizer()
    root = tmp_path_factory.mktemp("distill")
    verifier = _verifier(root / "verifier", tok, seed=0)
    other = _verifier(root / "other", tok, seed=1)
    data = root / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    prompts = [rng.integers(5, 40, size=int(rng.integers(4, 9))).tolist() for _ in range(12)]
    responses = [rng.integers(5, 30, size=int(rng.integers(6, 20))).tolist() + [tok.eos_token_id] for _ in range(12)]
    index = {"verifier": verifier, "shards": [distill_data._write_shard(data, 0, prompts, responses,
                                                                       [str(i) for i in range(12)], 0.0)]}
    distill_data._write_index(data, index)
    return dict(tok=tok, verifier=verifier, other=other, data=str(data), root=root)


def test_the_draft_vocabulary_ranks_response_tokens_and_keeps_eos():
    conversations = [([9, 9, 9], [3, 3, 4]), ([8], [4, 5])]
    d2t = distill_train.draft_vocabulary(conversations, 4, verifier_vocab=12, always=[11])
    assert sorted(d2t.tolist()) == [3, 4, 5, 11]  # 4 (twice), 3 (twice), 5, then EOS forced in over 9
    assert distill_train.draft_vocabulary(conversations, 5, 12, always=[11]).tolist() == [3, 4, 5, 9, 11]


MASKED = dict(batch=2, block=4, hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32, positions=8)


@pytest.mark.parametrize("kind", ["dflash", "ar", "masked"])
def test_a_resumed_run_equals_an_uninterrupted_one_and_loads_as_a_drafter(setup, kind):
    import specdiff as sd
    from specdiff import models

    options = {"dflash": dict(batch=2, anchors=3, block=4, intermediate=48), "ar": dict(batch=2, ar_layers=(0,)),
               "masked": MASKED}[kind]
    whole = setup["root"] / f"{kind}-whole"
    summary = distill_train.train(kind, setup["verifier"], setup["data"], whole, steps=4, draft_size=20,
                                  show_progress=False, save_every_s=0.0, **options)
    assert summary["steps"] == 4 and np.isfinite(summary["final_loss"])
    parts = setup["root"] / f"{kind}-parts"
    distill_train.train(kind, setup["verifier"], setup["data"], parts, steps=4, draft_size=20,
                        show_progress=False, save_every_s=1e9, until_step=2, **options)  # "killed" at step 2
    assert not (parts / "model.safetensors").exists()
    state = torch.load(parts / "checkpoint.pt", weights_only=False)
    assert state["step"] == 2  # the interrupted run's checkpoint
    resumed = distill_train.train(kind, setup["verifier"], setup["data"], parts, steps=4, draft_size=20,
                                  show_progress=False, save_every_s=0.0, **options)
    assert resumed["steps"] == 4
    a, b = torch.load(whole / "checkpoint.pt", weights_only=False), torch.load(parts / "checkpoint.pt",
                                                                              weights_only=False)
    for name, value in a["model"].items():
        torch.testing.assert_close(value, b["model"][name], atol=1e-5, rtol=1e-4)  # same batches and steps

    config = json.loads((whole / "config.json").read_text())
    assert config["specdiff_role"] == f"distilled-{kind}" and config["specdiff_target"] == setup["verifier"]
    from safetensors.torch import load_file

    weights = load_file(str(whole / "model.safetensors"))
    assert all(v.dtype == torch.float16 for v in weights.values())
    assert not any("embed_tokens" in n or "lm_head" in n for n in weights)  # equal to the verifier's: not stored
    verifier = models.load(setup["verifier"], temperature=0.0, dtype="float32")  # float32 on any CPU
    drafter = models.load(str(whole), role="drafter", verifier=verifier)
    if kind in ("dflash", "masked"):
        d2t = json.loads((whole / "draft_vocab.json").read_text())["draft_to_target"]
        assert len(d2t) == 20 and drafter.draft_to_target.tolist() == d2t
    if kind == "masked":  # its own tables: the verifier's embeddings through the trained projection
        assert type(drafter).__name__ == "MaskedDiffusionDrafter" and drafter.shift_logits
        assert set(weights) >= {"specdiff_projection"} and drafter.model.lm_head.weight.shape[0] == 20
    gen = sd.SpeculativeGenerator(drafter, verifier, block_size=3)
    prompt = [[setup["tok"].bos_token_id, 7, 8, 9]]
    out = gen.generate(prompt, max_new_tokens=12)
    from specdiff.engine.baselines import autoregressive_generate

    plain, _ = autoregressive_generate(verifier.model, prompt, 12, [setup["tok"].eos_token_id], 0.0, 1.0, 0,
                                       pad_token_id=0)
    assert out.token_ids == plain  # greedy: token for token the verifier's own decoding


def test_a_drafter_trained_for_another_verifier_is_refused_naming_both(setup):
    from specdiff import models
    from specdiff.zoo.distilled import WrongVerifier

    out = setup["root"] / "refuse"
    distill_train.train("ar", setup["verifier"], setup["data"], out, steps=1, show_progress=False, batch=2,
                        ar_layers=(0,))
    other = models.load(setup["other"])
    with pytest.raises(WrongVerifier, match=f"trained for the verifier '{setup['verifier']}', not for "
                                            f"'{setup['other']}'"):
        models.load(str(out), role="drafter", verifier=other)
    with pytest.raises(ValueError, match="holds data of verifier"):  # nor is its data used for another
        distill_train.train("ar", setup["other"], setup["data"], setup["root"] / "x", steps=1, show_progress=False)
    with pytest.raises(ValueError, match="is a ar drafter for"):  # nor another run's checkpoint resumed
        distill_train.train("dflash", setup["verifier"], setup["data"], out, steps=1, show_progress=False)


DSPARK = dict(anchor_state=False, read_anchor=True, markov_rank=4, widths=[3, 5], features="inputs")


@pytest.mark.numerics  # kernel-dependent (issue 54): run again under other kernels by scripts/numerics_kernels.sh
@pytest.mark.parametrize("variant", ["dflash", "dspark"])
def test_the_loaded_dflash_drafter_proposes_what_training_predicted(setup, variant):
    """The drafter at inference (engine hidden states, KV cache, anchor state, draft vocabulary) computes what the
    training loss saw: the greedy draft after an anchor equals the argmax of the training forward there. dspark:
    the anchor's slot predicts (`sample_from_anchor`), DSpark's Markov head, two trained widths, layer-input
    features; the Markov head reads the previous token, so the training forward is given the draft itself as the
    conversation's continuation (teacher-forced on its own choices, it must choose them again)."""
    from specdiff import models
    from specdiff.training.objectives.dflash import dflash_logits
    from specdiff.zoo_tools.distill_data import load_shards

    out = setup["root"] / f"teacher-forced-{variant}"
    settings = dict(batch=2, anchors=1, block=5, intermediate=48, gamma=4.0, lr=1e-2,
                    **(DSPARK if variant == "dspark" else {}))
    distill_train.train("dflash", setup["verifier"], setup["data"], out, steps=6, draft_size=24,
                        show_progress=False, dtype="float32", **settings)  # float32 on any CPU: compared exactly
    verifier = models.load(setup["verifier"], temperature=0.0, dtype="float32")
    drafter = models.load(str(out), role="drafter", verifier=verifier)
    if variant == "dspark":
        assert drafter.read_anchor and drafter.markov and not drafter.anchor_state
        assert drafter.trained_widths == [3, 5] and drafter.width(2) == 3 and drafter.width(4) == 5
        assert max(drafter.model.config.target_layer_ids) < verifier.model.config.num_hidden_layers - 1
    else:
        assert drafter.anchor_state and drafter.model.config.specdiff_anchor_state
    prompt, response = load_shards(setup["data"])[0]
    ids = torch.tensor([prompt + response])
    anchor = len(prompt) + 1
    prefix = ids[:, :anchor + 1]
    with torch.no_grad():
        states = verifier.model(input_ids=ids, output_hidden_states=True).hidden_states
        context = torch.cat([states[i] for i in drafter.verifier_hidden_layers], dim=-1)  # [1, L, W]
    keys = torch.ones_like(prefix, dtype=torch.bool)
    drafter.start(prefix, keys, verifier_hidden=context[:, :anchor])
    drafted = drafter.propose(prefix, keys, 4).tokens[0].tolist()
    conversation = (prompt, response)
    if variant == "dspark":
        conversation = (prompt, prefix[0, len(prompt):].tolist() + drafted)
    head = verifier.model.get_output_embeddings().weight[drafter.draft_to_target]
    to_draft = torch.full((verifier.vocab_size,), -100)
    to_draft[drafter.draft_to_target] = torch.arange(len(drafter.draft_to_target))
    with torch.no_grad():
        batch = dict(conversations=[conversation], context=context, head=head, to_draft=to_draft,
                     embeddings=verifier.model.get_input_embeddings().weight, block=settings["block"], anchors=1,
                     gamma=settings["gamma"], anchors_at=[[anchor]])
        logits, _ = dflash_logits(drafter.model, batch)
    trained = drafter.draft_to_target[logits[0, 0].argmax(-1)].tolist()[:4]  # [B]
    assert drafted == trained


@pytest.mark.numerics  # kernel-dependent (issue 54): run again under other kernels by scripts/numerics_kernels.sh
def test_the_loaded_masked_drafter_proposes_what_training_predicted(setup):
    """The masked drafter at inference (tables rebuilt from the verifier, Dream's shift, draft vocabulary) computes
    what its training loss saw: its one-step greedy draft of a block equals the argmax of the training forward
    over the same committed tokens and a fully masked block."""
    from specdiff import models
    from specdiff.lm.masks import bidirectional_mask, layer_masks
    from specdiff.zoo_tools.distill_data import load_shards

    out = setup["root"] / "masked-teacher-forced"
    distill_train.train("masked", setup["verifier"], setup["data"], out, steps=6, draft_size=24, show_progress=False,
                        dtype="float32", **{**MASKED, "lr": 1e-2})
    verifier = models.load(setup["verifier"], temperature=0.0, dtype="float32")
    from safetensors.torch import load_file

    drafter = models.load(str(out), role="drafter", verifier=verifier, steps=1)
    projection = load_file(str(out / "model.safetensors"))["specdiff_projection"].float()  # as the drafter has it
    prompt, response = load_shards(setup["data"])[0]
    context = torch.tensor([prompt + response[:3]])  # [1, L]
    block = 4
    noisy = torch.cat([context, torch.full((1, block), drafter.mask_token_id)], dim=1)  # [1, L + B]
    embeddings = verifier.model.get_input_embeddings().weight
    with torch.no_grad():
        states = drafter.model.model(inputs_embeds=embeddings[noisy] @ projection,
                                     attention_mask=layer_masks(drafter.model, bidirectional_mask(torch.ones_like(noisy, dtype=torch.bool))),
                                     is_causal=False).last_hidden_state  # [1, L + B, d]
        head = embeddings[drafter.draft_to_target] @ projection  # [V_d, d]
        trained = drafter.draft_to_target[(states[0, -block - 1:-1] @ head.T).argmax(-1)].tolist()  # shifted
    keys = torch.ones_like(context, dtype=torch.bool)
    assert drafter.propose(context, keys, block).tokens[0].tolist() == trained
