"""DiffusionProposer in vLLM on its CPU backend (issue 21, items 2 and 3): specdiff's masked and block
diffusion drafters as a custom_class proposer, verified by vLLM in point-mass mode.

The same tiny target over V = 4 tokens as test_plugin.py, a Dream-style masked drafter (and the
same weights as a block drafter) started from the target's weights, B = 2. Under Lossless, what
vLLM emits must follow the target's own law of its first L = 3 tokens, enumerated: TV <= 0.05 and
a chi-square p-value >= 1e-4 over n = 6,000 requests (an exact sampler's expected TV is about
0.4 sqrt(64 / n) = 0.021)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm.entrypoints.llm", reason="vLLM is not importable here: run tests/vllm in the environment "
                    "that scripts/vllm_env.sh builds")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import chain  # noqa: E402
import engines  # noqa: E402
import tiny  # noqa: E402
from vllm import SamplingParams  # noqa: E402

import specdiff as sd  # noqa: E402

VOCAB, LENGTH, N = 4, 3, 6000
PROMPT = [1, 2, 3, 0]
TV_TOLERANCE, CHI2_MIN_PVALUE = 0.05, 1e-4
PROPOSER = "specdiff.integrations.vllm.DiffusionProposer"


def _spec():
    return {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": engines.B}


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("proposer")
    target, _ = tiny.pair(root, vocab=VOCAB)
    return (target, tiny.masked_drafter(root, target, VOCAB),
            tiny.masked_drafter(root, target, VOCAB, role="block-drafter"))


@pytest.fixture(scope="module")
def target_model(paths):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(paths[0], dtype=torch.float32).eval()


def test_masked_proposer_is_exact_under_lossless(paths, target_model):
    llm = engines.llm(paths[0], _spec(), {"specdiff": {"drafter": str(paths[1]), "steps": 2, "seed": 0}})
    try:
        rows, delta = engines.generate(llm, [PROMPT] * N, SamplingParams(temperature=1.0, max_tokens=LENGTH,
                                                                          ignore_eos=True))
        assert delta["drafts"] > 0 and delta["accepted"] > 0  # the proposer drafted and vLLM accepted some
        exact = chain.chain_law(chain.Model(target_model), chain.Model(target_model), PROMPT, LENGTH, 1,
                                sd.Lossless(), True)[0]
        from exactness import chi_square_pvalue, histogram, total_variation_to

        index = torch.tensor([sum(t * VOCAB ** (LENGTH - 1 - i) for i, t in enumerate(r[:LENGTH])) for r in rows])
        counts = histogram(index, VOCAB ** LENGTH)
        tv, pvalue = total_variation_to(counts, exact), chi_square_pvalue(counts, exact)
        engines.record("DiffusionProposer masked K=2, Lossless", tv=round(tv, 4), chi2_pvalue=float(pvalue),
                       acceptance=delta["accepted"] / delta["draft_tokens"])
        assert tv <= TV_TOLERANCE and pvalue >= CHI2_MIN_PVALUE, (tv, pvalue)
        greedy, _ = engines.generate(llm, [PROMPT], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
        engines.assert_greedy(target_model, PROMPT, greedy[0])
        # a lenient request on the same engine: Linear(1) with point-mass q accepts every draft
        _, delta = engines.generate(llm, [PROMPT] * 32, SamplingParams(
            temperature=1.0, max_tokens=8, ignore_eos=True, extra_args={"specdiff": {"rule": "linear", "leniency": 1.0}}))
        assert delta["accepted"] == delta["draft_tokens"] > 0
    finally:
        del llm


def test_block_proposer_with_a_threshold(paths, target_model):
    llm = engines.llm(paths[0], _spec(), {"specdiff": {"drafter": str(paths[2]), "threshold": 0.6}})
    try:
        prompts = [PROMPT, [3, 1, 0, 2]]
        greedy, delta = engines.generate(llm, prompts, SamplingParams(temperature=0, max_tokens=10, ignore_eos=True))
        for prompt, tokens in zip(prompts, greedy):
            engines.assert_greedy(target_model, prompt, tokens)
        assert delta["drafts"] > 0
    finally:
        del llm


def test_the_proposer_needs_a_drafter(paths):
    with pytest.raises(Exception, match="drafter"):
        engines.llm(paths[0], _spec(), {"specdiff": {"steps": 2}})
