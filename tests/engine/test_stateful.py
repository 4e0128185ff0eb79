"""Rollback of recurrent and convolution state (issue 20; `specdiff.lm.state`): the verifier's rounds and the
AR drafter's drafts on hybrid models equal uncached full forwards row by row, with a different accepted length
per row and rows leaving the batch, and those checks fail when any rollback (convolution window, replay,
checkpoints) is disabled; DFlash's verifier states after a rollback; bfloat16 and float16 models, with the tie
tolerance used in at most one sequence in ten; the statistical check on a tiny hybrid verifier; batch select on
every cache layer type; clear errors for unknown stateful layers."""
from __future__ import annotations

import pytest
import torch
from architectures import HYBRID, build, perturbed
from verifier_rounds import check_rounds_against_full_forwards

import specdiff as sd
from specdiff.lm.masks import left_pad


@pytest.fixture(scope="module", autouse=True)
def tie_cap():
    """As in tests/engine/test_architectures.py: how often a greedy comparison here (half precision, DFlash) used
    the tie tolerance is capped at one sequence in ten (at least one allowed), counting this module's only."""
    from architectures import CHECKED, TIES

    ties, checked = len(TIES), len(CHECKED)
    yield
    mine, compared = TIES[ties:], CHECKED[checked:]
    print(f"\nstateful: {len(mine)} tie-tolerance mismatches in {len(compared)} sequences"
          + "".join(f"\n  {t}" for t in mine))
    assert len(mine) <= max(1, len(compared) // 10), mine


def _full_logits(model, tokens: list[int], last: int) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=torch.tensor([tokens])).logits[0, -last:].float(), -1)


@pytest.mark.parametrize("name", list(HYBRID))
def test_hybrid_verifier_rounds_equal_full_forwards(name):
    """Prompts of different lengths, per-row acceptance (everything, nothing, in between), a row leaving the
    batch: every round's p equals an uncached forward of each row alone over its committed tokens + chunk."""
    stats = _check_verifier_rounds(name)  # in round 3 every row keeps everything: nothing to replay
    assert stats["rewinds"] == 5 and stats["replay_skipped"] >= 1


def _check_ar_drafter_against_uncached_forwards(name):
    model = build(name, seed=5)
    drafter = sd.AutoregressiveDrafter(model, temperature=1.0, top_p=1.0, top_k=0)
    committed = [[1, 4, 2], [3, 5, 6, 7, 8]]
    drafter.start(*left_pad(committed, 0))
    generator = torch.Generator().manual_seed(0)
    for round_index, accepted in enumerate([(2, 4), (0, 4), (4, 1), (4, 4), (1, 0)]):
        ids, key_mask = left_pad(committed, 0)
        draft = drafter.propose(ids, key_mask, 4, generator)
        for row in range(2):
            expected = _full_logits(model, committed[row] + draft.tokens[row].tolist(), 5)[:4].exp()  # [4, V]
            difference = (draft.probs[row] - expected).abs().max()
            assert difference < 5e-5, (name, round_index, row, difference)
        drafter.commit(torch.tensor(accepted))
        for row in range(2):
            committed[row] += draft.tokens[row, : accepted[row]].tolist() + [(accepted[row] * 7 + row) % 90 + 1]
    return drafter


@pytest.mark.parametrize("name", list(HYBRID))
def test_hybrid_ar_drafter_matches_uncached_forwards(name):
    """After rounds of different acceptance per row (all, none, some: ragged pending tokens), every drafted
    token's q equals the drafter's distribution from an uncached forward of the row's committed + drafted tokens."""
    _check_ar_drafter_against_uncached_forwards(name)


def _check_verifier_rounds(name):
    def kept(round_index, row):  # as test_hybrid_verifier_rounds_equal_full_forwards
        return 4 if round_index == 3 else 1 + (round_index + 2 * row) % 4

    verifier, _ = check_rounds_against_full_forwards(build(name, seed=3), [[1, 2, 3, 4, 5, 6], [7, 8], [9, 10, 11, 12]],
                                                     vocab=90, kept=kept, leave_round=1, atol=5e-5, label=name)
    return verifier.rollback_stats


def _keep_the_newest_window(self, layer, dropped):
    """The convolution rollback disabled: every row keeps the newest K conv inputs, rejected columns included."""
    for state in range(layer.number_of_states):
        if layer.is_conv_states_initialized[state]:
            width = layer.conv_kernel_size[state]
            layer.conv_states[state] = layer.conv_states[state][..., -width:].contiguous()


# each rollback of docs/engine.md ("Hybrid models") disabled, with a model that needs it and the check that uses it
ROLLBACKS = {
    "convolution-window": ("_rewind_conv", _keep_the_newest_window, "lfm2", _check_verifier_rounds),
    "replay-gated-deltanet": ("_replay", lambda self, kept: None, "qwen3_5", _check_verifier_rounds),
    "replay-mamba2": ("_replay", lambda self, kept: None, "nemotron_h", _check_verifier_rounds),
    "checkpoints-ar-drafter": ("_select_checkpoints", lambda self, kept: None, "nemotron_h",
                               _check_ar_drafter_against_uncached_forwards),
    "checkpoints-stepwise-verifier": ("_select_checkpoints", lambda self, kept: None, "jamba", _check_verifier_rounds),
}


@pytest.mark.parametrize("rollback", list(ROLLBACKS))
def test_the_stateful_checks_fail_when_a_rollback_is_disabled(rollback, monkeypatch):
    """Power of the row-by-row checks above (docs/engine.md: they fail when any rollback is disabled): with the
    convolution-window gather, the replay (Gated DeltaNet, Mamba-2) or the checkpoint selection (AR drafter,
    Jamba's stepwise verifier) replaced by a no-op, the same check fails on a model that needs it."""
    from specdiff.lm import state

    method, disabled, name, check = ROLLBACKS[rollback]
    monkeypatch.setattr(state._class(), method, disabled)
    with pytest.raises(AssertionError, match=rf"^\('{name}', \d, \d, tensor") as failure:  # (model, round, row, gap)
        check(name)
    print(f"{rollback} disabled: {name} fails at (model, round, row, largest difference) = {failure.value}")


@pytest.mark.numerics  # kernel-dependent (issue 54): run again under other kernels by scripts/numerics_kernels.sh
@pytest.mark.parametrize("name, dtype", [("qwen3_5", torch.bfloat16), ("nemotron_h", torch.bfloat16),
                                         ("lfm2", torch.bfloat16), ("falcon_h1", torch.float16)])
def test_half_precision_greedy_equals_hf_generate(name, dtype):
    """The engine runs the model in its own dtype (bf16, fp16 weights and states; verification maths in float32):
    greedy speculative output equals HF greedy generate in that dtype, up to the stated tie tolerance, used in at
    most one sequence in ten of this module (tie_cap)."""
    from architectures import PROMPTS, assert_greedy_equal, hf_greedy

    model = build(name, dtype=dtype)
    drafter = perturbed(model)
    assert next(model.parameters()).dtype == dtype
    references = [hf_greedy(model, p, 24) for p in PROMPTS]
    gen = sd.SpeculativeGenerator(sd.AutoregressiveDrafter(drafter, temperature=0.0), sd.Verifier(model, temperature=0.0),
                                  block_size=4, eos_token_id=[], batch_size=4)
    out = gen.generate(PROMPTS, max_new_tokens=24)
    assert next(model.parameters()).dtype == dtype  # never upcast
    assert_greedy_equal(f"{name} {dtype}", out.token_ids, references, dtype=dtype)


@pytest.mark.numerics  # kernel-dependent (issue 54): run again under other kernels by scripts/numerics_kernels.sh
@pytest.mark.parametrize("name, dtype", [("nemotron_h", torch.float32), ("nemotron_h", torch.bfloat16)])
def test_sampled_lossless_generation_reproduces_a_hybrid_verifier(name, dtype):
    """tests/engine/test_exactness.py's check on a tiny hybrid verifier over V = 4 tokens: the enumerated law of
    its first 3 sampled tokens, 40,000 rows of one prompt in one batched call (AR drafter, a hybrid too, marginal
    mode, block 2; Mamba-2 layers, whose chunked scan pads to 8 tokens, not Gated DeltaNet's 64, which makes
    40,000 rows six times slower): TV <= 0.03 and chi-square p >= 1e-4 (tests/tiny_models.py). In bf16 the exact law is that of
    the bf16 model's own (uncached) logits."""
    from tiny_models import LENGTH, PROMPT, ROWS, SAMPLING, assert_matches_exact, exact_continuations

    verifier = build(name, vocab=4, dtype=dtype)
    with torch.no_grad():
        verifier.lm_head.weight.normal_(0.0, 0.2)  # a spread law: 14 sequences above 1 %
    drafter = perturbed(verifier, scale=0.5)
    exact = exact_continuations(verifier, PROMPT, LENGTH, **SAMPLING)
    gen = sd.SpeculativeGenerator(sd.AutoregressiveDrafter(drafter, temperature=1.0, top_p=1.0, top_k=0),
                                  sd.Verifier(verifier, **SAMPLING), block_size=2, eos_token_id=[], batch_size=ROWS)
    out = gen.generate([PROMPT] * ROWS, max_new_tokens=LENGTH, generator=torch.Generator().manual_seed(0))
    assert out.summary.exact and 0 < out.summary.acceptance_rate < 1
    assert_matches_exact(out.token_ids, exact, f"{name} {dtype}")


def test_dflash_reads_the_right_verifier_states_after_a_rollback():
    """DFlash on a hybrid verifier: the hidden states handed to the drafter for each committed token equal those of
    an uncached forward of the committed sequence, after rounds whose rejections rolled the state back; and the
    greedy output equals HF greedy generate."""
    from architectures import PROMPTS, assert_greedy_equal, hf_greedy
    from tiny_models import tiny_dflash

    verifier_model = build("qwen3_5", seed=2)
    dflash = sd.DFlashDrafter(tiny_dflash(verifier_model, block=4, layers=(0, 1)), verifier_model)
    seen = []  # (row's committed ids so far, hidden states handed over) per commit
    commit = dflash.commit

    def recording_commit(num_accepted, verifier_hidden=None):
        seen.append((num_accepted.clone(), verifier_hidden.clone()))
        commit(num_accepted, verifier_hidden)

    dflash.commit = recording_commit
    gen = sd.SpeculativeGenerator(dflash, sd.Verifier(verifier_model, temperature=0.0), block_size=4, eos_token_id=[])
    out = gen.generate([PROMPTS[0]], max_new_tokens=16)
    assert_greedy_equal("qwen3_5 verifier, dflash drafter", out.token_ids, [hf_greedy(verifier_model, PROMPTS[0], 16)])
    assert gen.verifier.rollback_stats["replays"] > 0  # some round rolled the state back
    sequence = PROMPTS[0] + out.token_ids[0]
    with torch.no_grad():
        states = verifier_model(input_ids=torch.tensor([sequence]), output_hidden_states=True).hidden_states
    full = torch.cat([states[i] for i in dflash.verifier_hidden_layers], dim=-1)[0]  # [L, 2H]
    position = len(PROMPTS[0]) - 1  # the first round's input starts at the prompt's last token
    for num_accepted, hidden in seen:
        kept = int(num_accepted[0]) + 1
        assert torch.allclose(hidden[0, :kept], full[position:position + kept], atol=1e-4)
        position += kept


def test_unknown_stateful_layer_is_refused_before_generation(monkeypatch):
    from specdiff.lm import state

    monkeypatch.delitem(state.MIXERS, "NemotronHMamba2Mixer")
    model = build("nemotron_h")
    state._STATEFUL.clear()
    with pytest.raises(state.UnknownStatefulLayer, match="NemotronHMamba2Mixer"):
        sd.Verifier(model)
    with pytest.raises(state.UnknownStatefulLayer, match="NemotronHMamba2Mixer"):
        sd.AutoregressiveDrafter(model)


def test_a_transformers_newer_than_the_rollback_knows_is_refused_by_name(monkeypatch):
    import transformers
    from specdiff.lm import state

    model = build("qwen3_5")
    monkeypatch.setattr(transformers, "__version__", "5.25.0")
    with pytest.raises(state.UnknownStatefulLayer, match=r"transformers < 5.25; this is 5.25.0"):
        sd.Verifier(model)
    monkeypatch.setattr(transformers, "__version__", "5.24.0")
    sd.Verifier(model)  # the version it knows builds


# the cache layer types each model's StatefulCache holds (transformers 5.24): together all three
SELECT_LAYER_TYPES = {"falcon_h1": {"LinearAttentionAndFullAttentionLayer"},
                      "lfm2": {"LinearAttentionLayer", "DynamicLayer"},
                      "zamba2": {"LinearAttentionLayer", "LinearAttentionAndFullAttentionLayer"},
                      "qwen3_5": {"LinearAttentionLayer", "DynamicLayer"}}


def _cache_tensors(cache) -> dict:
    """{(layer, kind, index): a copy of every tensor the cache holds}: keys, values, conv and recurrent states."""
    found = {}
    for number, layer in enumerate(cache.layers):
        for kind in ("keys", "values"):
            if torch.is_tensor(getattr(layer, kind, None)) and getattr(layer, kind).numel():
                found[(number, kind, 0)] = getattr(layer, kind).clone()
        for kind in ("conv_states", "recurrent_states"):
            for index, tensor in dict(getattr(layer, kind, None) or {}).items():
                if torch.is_tensor(tensor):
                    found[(number, kind, index)] = tensor.clone()
    return found


@pytest.mark.parametrize("name", list(SELECT_LAYER_TYPES))
def test_batch_select_works_on_every_cache_layer_type(name):
    """Selecting rows of a StatefulCache keeps those rows' keys, values, conv windows and recurrent states, every
    tensor of the cache compared (the kinds each layer type holds are asserted, so the comparison is never empty),
    and the next forward on the selected cache equals an uncached forward of the selected rows' sequences."""
    from specdiff.lm.cache import cache_kwargs, new_cache, select_rows

    model = build(name)
    cache = new_cache(model)
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])
    with torch.no_grad():
        model(input_ids=ids, **cache_kwargs(model, cache))
    assert {type(layer).__name__ for layer in cache.layers} == SELECT_LAYER_TYPES[name]
    before = _cache_tensors(cache)
    kinds = {kind for _, kind, _ in before}
    assert {"keys", "values", "conv_states"} <= kinds  # every one of these models has attention and convolutions
    assert ("recurrent_states" in kinds) == (name != "lfm2")  # LFM2's short convolutions keep no recurrent state
    assert all(tensor.shape[0] == 3 for tensor in before.values())
    select_rows(cache, torch.tensor([2, 0]))
    after = _cache_tensors(cache)
    assert after.keys() == before.keys()
    for key, tensor in before.items():
        assert torch.equal(after[key], tensor[[2, 0]]), key
    following = torch.tensor([[13], [14]])
    with torch.no_grad():
        cached = model(input_ids=following, **cache_kwargs(model, cache)).logits[:, -1]
        alone = model(input_ids=torch.cat([ids[[2, 0]], following], dim=1)).logits[:, -1]
    assert torch.allclose(cached, alone, atol=5e-5), (cached - alone).abs().max()


def test_summary_says_how_states_were_rolled_back():
    model = build("jamba")
    gen = sd.SpeculativeGenerator(sd.AutoregressiveDrafter(perturbed(build("qwen3_5")), temperature=0.0),
                                  sd.Verifier(model, temperature=0.0), block_size=3, eos_token_id=[])
    summary = gen.generate([[1, 2, 3], [4, 5]], max_new_tokens=8).summary
    assert summary.state_rollback["verifier"]["stepwise_forwards"] > 0  # Jamba: fed one token per forward
    assert summary.state_rollback["drafter"]["rewinds"] > 0
    attention = sd.SpeculativeGenerator(sd.AutoregressiveDrafter(build("llama", seed=1)), sd.Verifier(build("llama")))
    assert attention.generate([[1, 2]], max_new_tokens=4).summary.state_rollback is None
