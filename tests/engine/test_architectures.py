"""Architecture conformance (issue 20): greedy lossless speculative decoding equals Hugging Face greedy
`generate`, token for token, for tiny random instances of real transformers architectures (tests/architectures.py):
12 attention-only models (sliding-window, MoE, MLA among them) and 9 hybrids whose caches keep recurrent or
convolution state. Batch 1 and batch 4 with mixed prompt lengths, block 4, 40 new tokens; each model is the
verifier with its perturbed copy as the AR drafter, so every hybrid is both verifier and drafter; hybrid
verifiers beside attention drafters and the other way round.

Tie tolerance: a mismatch is allowed only at a position where HF's own top-2 logit gap is below TIE_GAP (the
two computations differ in rounding: chunked against token-by-token kernels, batched against alone). How
often that happened is asserted (at most one sequence in ten) and printed at the end of the module.
"""
from __future__ import annotations

import pytest
import torch
from architectures import ATTENTION, HYBRID, build, perturbed

import specdiff as sd

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17, 18], [19]]
NEW_TOKENS, BLOCK = 40, 4
TIE_GAP = {torch.float32: 1e-3, torch.bfloat16: 0.125}
TIES: list[str] = []
CHECKED: list[str] = []


def hf_greedy(model, prompt: list[int], new_tokens: int = NEW_TOKENS):
    """HF greedy generate of one prompt alone: (tokens, logits [new_tokens, V])."""
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                         pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    return out.sequences[0, len(prompt):].tolist(), torch.cat(out.logits).float()


def assert_greedy_equal(label: str, tokens: list[list[int]], references, dtype=torch.float32) -> None:
    """Each row equals its HF reference, or first differs where HF's top-2 gap is below the tie tolerance."""
    for row, (got, (expected, logits)) in enumerate(zip(tokens, references)):
        CHECKED.append(label)
        if got == expected:
            continue
        first = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
        top = logits[first].topk(2).values
        gap = float(top[0] - top[1])
        assert gap < TIE_GAP[dtype], f"{label}, row {row}: differs at token {first} where HF's top-2 gap is {gap:.4f}"
        TIES.append(f"{label} row {row} at token {first} (gap {gap:.2e})")


@pytest.fixture(scope="module", autouse=True)
def tie_report():
    yield
    print(f"\nconformance: {len(TIES)} tie-tolerance mismatches in {len(CHECKED)} sequences" +
          "".join(f"\n  {t}" for t in TIES))
    assert len(TIES) <= max(1, len(CHECKED) // 10)


def _run(drafter_model, verifier_model, prompts, batch_size):
    gen = sd.SpeculativeGenerator(sd.AutoregressiveDrafter(drafter_model, temperature=0.0),
                                  sd.Verifier(verifier_model, temperature=0.0), block_size=BLOCK, eos_token_id=[],
                                  batch_size=batch_size)
    out = gen.generate(prompts, max_new_tokens=NEW_TOKENS)
    return out, gen.verifier


@pytest.mark.parametrize("name", list(ATTENTION) + list(HYBRID))
def test_greedy_speculative_equals_hf_generate(name):
    model = build(name)
    drafter = perturbed(model)
    references = [hf_greedy(model, p) for p in PROMPTS]
    single, _ = _run(drafter, model, PROMPTS[:2], batch_size=1)
    assert_greedy_equal(f"{name} batch 1", single.token_ids, references[:2])
    batched, verifier = _run(drafter, model, PROMPTS, batch_size=4)
    assert_greedy_equal(f"{name} batch 4", batched.token_ids, references)
    accepted = [a for s in batched.stats for a in s.accepted]
    assert 0 in accepted or min(accepted) < BLOCK  # some rounds rejected: the rollback ran
    if name in HYBRID:
        stats = verifier.rollback_stats
        assert stats["rewinds"] > 0 and (stats["replays"] + stats["checkpoint_rewinds"]) > 0


@pytest.mark.parametrize("verifier_name, drafter_name", [("qwen3_5", "llama"), ("nemotron_h", "qwen3"),
                                                         ("llama", "qwen3_5"), ("qwen3", "falcon_h1"),
                                                         ("lfm2", "jamba")])
def test_hybrid_and_attention_models_pair_either_way(verifier_name, drafter_name):
    verifier = build(verifier_name)
    drafter = build(drafter_name, seed=1)
    references = [hf_greedy(verifier, p) for p in PROMPTS]
    out, _ = _run(drafter, verifier, PROMPTS, batch_size=4)
    assert_greedy_equal(f"{verifier_name} verifier, {drafter_name} drafter", out.token_ids, references)
