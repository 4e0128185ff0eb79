"""The plugin with vLLM's EAGLE, EAGLE-3 and DFlash speculators on its CPU backend (issue 21, item 1).

No trained heads exist offline: tiny.speculator_head builds a randomly initialised one-layer head for
each method in the checkpoint format vLLM 0.32 loads (see its docstring), for the same tiny Qwen3
target as test_plugin.py (V = 4, head_dim 32), B = 2 drafted tokens per round. EAGLE drafts with
draft_sample_method="probabilistic" (vLLM records its q), EAGLE-3 and DFlash greedily (q: point mass).

Per method, on one engine with the plugin (engine rule Lossless, requests choose theirs):
- greedy Lossless requests give the same tokens as vLLM's own engine without the plugin
  (VLLM_PLUGINS=none, a subprocess);
- Linear(1) accepts every draft (vLLM's counters);
- per-position acceptance, Lossless and Linear(0.5), against the closed form given what vLLM
  verified: each call of vLLM's rejection_sample is observed (its drafts, its processed target logits
  p, its draft probabilities q or the point mass), and a round's drafted token j is accepted with
  probability min(1, p~(y_j) / q(y_j)), p~ = (1 - lam) p + lam q (specdiff.theory), so position i
  is reached with probability prod_{j <= i} of those. The measured count of rounds reaching i must
  lie within 5 standard deviations (plus 0.005 of the rounds) of that expectation's sum; the random
  heads here draft with the plain rounds of vLLM's chain, so this checks the rule's acceptance,
  whatever the head drafts.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("vllm.entrypoints.llm", reason="vLLM is not importable here: run tests/vllm in the environment "
                    "that scripts/vllm_env.sh builds")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import engines  # noqa: E402
import tiny  # noqa: E402
from vllm import SamplingParams  # noqa: E402

import specdiff as sd  # noqa: E402
from specdiff import theory  # noqa: E402

VOCAB = 4
METHODS = {"eagle": "probabilistic", "eagle3": "greedy", "dflash": "greedy"}  # method -> draft_sample_method
GREEDY_PROMPTS = [[1, 2, 3, 0], [3, 1, 0, 2], [0, 0, 1], [2, 3, 1, 1, 0, 2]]
PROMPTS = [[1, 2, 3, 0], [3, 1, 0, 2]]
N = 800  # sampled requests per prompt and rule
TOKENS = 8


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("speculators")
    target, _ = tiny.pair(root, vocab=VOCAB)
    return target, {method: tiny.speculator_head(root, target, method) for method in METHODS}


def _spec(method, head):
    return {"method": method, "model": str(head), "num_speculative_tokens": engines.B,
            "draft_sample_method": METHODS[method]}


@pytest.fixture(scope="module")
def without_plugin(models, tmp_path_factory):
    """Greedy tokens of each method in vLLM without the plugin (one subprocess, VLLM_PLUGINS=none)."""
    target, heads = models
    spec = {"target": str(target), "greedy_prompts": GREEDY_PROMPTS, "greedy_tokens": 12,
            "speculative_configs": {method: _spec(method, head) for method, head in heads.items()}}
    path = tmp_path_factory.mktemp("reference") / "spec.json"
    path.write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, str(Path(__file__).parent / "engines.py"), str(path)],
                          env={**os.environ, "VLLM_PLUGINS": "none"}, capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])["greedy"]


@contextmanager
def observed():
    """Every call of vLLM V1's rejection_sample (the plugin's wrapper): its inputs and its output."""
    from vllm.v1.sample import rejection_sampler as v1

    inner = v1.rejection_sample
    calls = []

    def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                         target_logits, bonus_token_ids, sampling_metadata, *args, **kwargs):
        seen = (draft_token_ids.clone(), list(num_draft_tokens),
                None if draft_probs is None else draft_probs.clone().float(), target_logits.clone().float())
        output = inner(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                       target_logits, bonus_token_ids, sampling_metadata, *args, **kwargs)
        calls.append((*seen, output.clone()))
        return output

    v1.rejection_sample = rejection_sample
    try:
        yield calls
    finally:
        v1.rejection_sample = inner


def _acceptance_against_closed_form(calls, lam):
    """(measured, expected, standard deviation) of the number of rounds reaching each drafted position."""
    measured, expected, variance = torch.zeros(engines.B), torch.zeros(engines.B), torch.zeros(engines.B)
    rounds = 0
    for drafts, counts, q_all, logits, output in calls:
        start = 0
        for row, n in enumerate(counts):
            rows = slice(start, start + n)
            start += n
            if n == 0 or bool((drafts[rows] < 0).any()):
                continue  # vLLM's placeholder drafts: rejected by construction, not a verification
            y = drafts[rows].long()
            p = logits[rows].double().softmax(-1)  # [n, V]
            q = (q_all[rows].double() if q_all is not None
                 else torch.nn.functional.one_hot(y, p.shape[-1]).double())
            relaxed = theory.emitted_distribution(sd.Linear(lam), p, q)  # p~ = (1 - lam) p + lam q
            at = torch.arange(n)
            accept = (relaxed[at, y] / q[at, y]).clamp(max=1.0)
            reach = torch.cumprod(accept, 0).float()  # P(position i accepted)
            accepted = int((output[row, :n] == y).cumprod(0).sum())
            measured[:n] += (torch.arange(n) < accepted).float()
            expected[:n] += reach
            variance[:n] += reach * (1 - reach)
            rounds += 1
    return measured, expected, variance.sqrt(), rounds


@pytest.mark.parametrize("method", list(METHODS))
def test_speculator_with_the_plugin(models, without_plugin, method):
    target, heads = models
    llm = engines.llm(target, _spec(method, heads[method]), {"specdiff": {"rule": "lossless"}})
    try:
        greedy, _ = engines.generate(llm, GREEDY_PROMPTS, SamplingParams(temperature=0, max_tokens=12,
                                                                         ignore_eos=True))
        assert greedy == without_plugin[method], f"{method}: Lossless greedy tokens differ from vLLM's own"

        lenient = SamplingParams(temperature=1.0, max_tokens=TOKENS, ignore_eos=True,
                                 extra_args={"specdiff": {"rule": "linear", "leniency": 1.0}})
        _, delta = engines.generate(llm, PROMPTS * 32, lenient)
        assert delta["accepted"] == delta["draft_tokens"] > 0, f"{method}: Linear(1) rejected a draft: {delta}"

        figures = {}
        for lam in (0.0, 0.5):
            params = SamplingParams(temperature=1.0, max_tokens=TOKENS, ignore_eos=True,
                                    extra_args={"specdiff": {"rule": "linear", "leniency": lam}})
            with observed() as calls:
                _, delta = engines.generate(llm, PROMPTS * N, params)
            measured, expected, sd_, rounds = _acceptance_against_closed_form(calls, lam)
            assert rounds > 1000 and delta["drafts"] >= rounds
            figures[lam] = {"measured": (measured / rounds).tolist(), "closed_form": (expected / rounds).tolist(),
                            "rounds": rounds}
            gap = (measured - expected).abs()
            assert bool((gap <= 5 * sd_ + 0.005 * rounds).all()), (method, lam, figures[lam])
        engines.record(f"{method} ({METHODS[method]} drafting) per-position acceptance", **{
            f"linear_{lam}": value for lam, value in figures.items()})
        assert figures[0.5]["measured"][0] > figures[0.0]["measured"][0]  # leniency raised the acceptance
    finally:
        del llm
