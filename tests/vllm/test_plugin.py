"""specdiff's plugin inside vLLM 0.32 on its CPU backend (issue 21, items 1 and 3).

A tiny target over V = 4 tokens with a 1-layer draft model (tiny.pair), B = 2 drafted tokens per
round, prompts of 4 tokens, L = 3 generated tokens. What each request emits is compared with its
exact law, enumerated (chain.chain_law: vLLM's prefill token, then rounds of B drafts verified on
the relaxed target, the bonus from p, the first L tokens kept).

Tolerances, with n requests over the 64 sequences of 3 tokens: an exact sampler's expected total
variation is about 0.4 sqrt(64 / n) (0.021 for n = 6,000); TV_TOLERANCE = 0.05 passes an exact
sampler with a wide margin, and every check also asks a chi-square goodness-of-fit p-value >=
1e-4. `test_the_laws_differ` shows that the laws compared are further apart than that, so a sampler
that ignored the rule would fail. Per-position acceptance over R rounds has a standard error of at
most 0.5 / sqrt(R) (0.004 for R = 15,000); ACCEPTANCE_TOLERANCE = 0.03 is more than five of them.
"""
from __future__ import annotations

import json
import os
import subprocess
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
from specdiff.integrations.vllm.settings import SpecdiffConfigError  # noqa: E402

VOCAB, LENGTH = 4, 3
PROMPTS = [[1, 2, 3, 0], [3, 1, 0, 2]]
N = 6000  # requests per law checked (per prompt)
TV_TOLERANCE = 0.05
CHI2_MIN_PVALUE = 1e-4
ACCEPTANCE_TOLERANCE = 0.03
LAMBDAS = (0.2, 0.5, 1.0)


def _params(rule=None, leniency=None, temperature=1.0, max_tokens=LENGTH, seed=None):
    extra = {"specdiff": {"rule": rule, "leniency": leniency}} if rule is not None else None
    return SamplingParams(temperature=temperature, max_tokens=max_tokens, ignore_eos=True, seed=seed, extra_args=extra)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny.pair(tmp_path_factory.mktemp("pair"), vocab=VOCAB)


@pytest.fixture(scope="module")
def hf(pair):
    from transformers import AutoModelForCausalLM

    return [AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval() for path in pair]


@pytest.fixture(scope="module")
def engine(pair):
    """The plugin with Lossless as the engine's rule; requests choose theirs in extra_args."""
    llm = engines.llm(pair[0], engines.draft_model(pair[1]), {"specdiff": {"rule": "lossless"}})
    yield llm
    del llm


def _law(target, draft, prompt, rule, greedy_draft=True):
    return chain.chain_law(chain.Model(target), chain.Model(draft), prompt, LENGTH, engines.B, rule, greedy_draft)


def _histogram(rows) -> torch.Tensor:
    index = torch.tensor([sum(t * VOCAB ** (LENGTH - 1 - i) for i, t in enumerate(row[:LENGTH])) for row in rows])
    return torch.bincount(index, minlength=VOCAB ** LENGTH).double()


def _assert_law(rows, law, label):
    from exactness import chi_square_pvalue, total_variation_to

    counts = _histogram(rows)
    tv = total_variation_to(counts, law)
    pvalue = chi_square_pvalue(counts, law)
    engines.record(label, tv=round(tv, 4), chi2_pvalue=float(pvalue))
    assert tv <= TV_TOLERANCE and pvalue >= CHI2_MIN_PVALUE, f"{label}: TV {tv:.4f}, chi-square p {pvalue:.2e}"
    return tv


def test_plugin_is_loaded_by_vllm(engine):
    from specdiff.integrations.vllm import hooks, v1
    from vllm.v1.sample import rejection_sampler

    assert hooks.installed() and hooks.active()
    assert rejection_sampler.rejection_sample.__module__ == v1.__name__


def test_lossless_greedy_is_token_identical_to_vllm_without_the_plugin(engine, pair, tmp_path):
    """Lossless, greedy: the same tokens as vLLM's own spec decoding with the plugin not loaded
    (VLLM_PLUGINS=none, in a subprocess). Sampled requests: the plugin's Lossless output follows the
    target's law, as vLLM's plain sampling without the plugin does (same subprocess)."""
    greedy_prompts = [[1, 2, 3, 0], [3, 1, 0, 2], [0, 0, 1], [2, 3, 1, 1, 0, 2]]
    spec = {"target": str(pair[0]), "draft": str(pair[1]), "greedy_prompts": greedy_prompts, "greedy_tokens": 16,
            "sampled_prompts": [PROMPTS[0]] * N, "length": LENGTH}
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "VLLM_PLUGINS": "none"}
    done = subprocess.run([sys.executable, str(Path(__file__).parent / "engines.py"), str(spec_path)], env=env,
                          capture_output=True, text=True, timeout=400)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stderr[-3000:]
    vanilla = json.loads(lines[-1][len("RESULT "):])

    ours, _ = engines.generate(engine, greedy_prompts, _params(temperature=0, max_tokens=16))
    assert ours == vanilla["greedy"]
    lenient_greedy, _ = engines.generate(engine, greedy_prompts, _params("linear", 0.0, temperature=0, max_tokens=16))
    assert lenient_greedy == vanilla["greedy"]  # Linear(0) is Lossless

    from transformers import AutoModelForCausalLM
    target = AutoModelForCausalLM.from_pretrained(pair[0], dtype=torch.float32)
    exact = chain.chain_law(chain.Model(target), chain.Model(target), PROMPTS[0], LENGTH, 1, sd.Lossless(), True)[0]
    sampled, delta = engines.generate(engine, [PROMPTS[0]] * N, _params())
    tv_ours = _assert_law(sampled, exact, "plugin, Lossless")
    tv_vanilla = _assert_law(vanilla["sampled"], exact, "vLLM without the plugin, plain sampling")
    assert abs(_histogram(sampled).sum() - N) == 0 and tv_ours >= 0 and tv_vanilla >= 0


def test_lossless_sampled_acceptance_matches_the_exact_chain(engine, hf):
    target, draft = hf
    law, rounds, accepted = _law(target, draft, PROMPTS[1], sd.Lossless())
    rows, delta = engines.generate(engine, [PROMPTS[1]] * N, _params("lossless", 0.0))
    measured, expected = engines.per_position(delta), (accepted / rounds).tolist()
    engines.record("acceptance Lossless", vllm=measured, chain=expected)
    assert max(abs(m - e) for m, e in zip(measured, expected)) <= ACCEPTANCE_TOLERANCE, (measured, expected)
    _assert_law(rows, law, "Lossless")


@pytest.mark.parametrize("lam", LAMBDAS)
def test_linear_acceptance_matches_closed_form_and_specdiff_engine(engine, hf, lam):
    """Per-position acceptance under Linear(lam) in vLLM = the enumerated chain's (specdiff.theory per
    round) = specdiff's own engine on the same pair and prompts; lam = 1 accepts every draft."""
    target, draft = hf
    rule = sd.Linear(lam)
    law, rounds, accepted = _law(target, draft, PROMPTS[0], rule)
    expected = (accepted / rounds).tolist()
    rows, delta = engines.generate(engine, [PROMPTS[0]] * N, _params("linear", lam))
    measured = engines.per_position(delta)
    ours = _specdiff_engine_acceptance(target, draft, PROMPTS[0], rule)
    engines.record(f"acceptance Linear({lam})", vllm=measured, chain=expected, specdiff_engine=ours)
    assert max(abs(m - e) for m, e in zip(measured, expected)) <= ACCEPTANCE_TOLERANCE, (measured, expected)
    assert max(abs(m - e) for m, e in zip(ours, expected)) <= ACCEPTANCE_TOLERANCE, (ours, expected)
    if lam == 1.0:
        assert delta["accepted"] == delta["draft_tokens"] > 0
    _assert_law(rows, law, f"Linear({lam})")


def _specdiff_engine_acceptance(target, draft, prompt, rule, rows=N):
    """specdiff's engine on vLLM's chain: the first token drawn from p after the prompt (vLLM's prefill),
    then L - 1 tokens by rounds of B point-mass (greedy) drafts. Returns the per-position acceptance."""
    generator = torch.Generator().manual_seed(1)
    first = torch.multinomial(chain.Model(target)(tuple(prompt)).float(), rows, replacement=True, generator=generator)
    prompts = [prompt + [int(x)] for x in first]
    drafter = sd.AutoregressiveDrafter(draft, temperature=0.0, top_p=1.0, top_k=0)
    gen = sd.SpeculativeGenerator(drafter, sd.Verifier(target, temperature=1.0, top_p=1.0, top_k=0),
                                  block_size=engines.B, rule=rule, proposal="point_mass", eos_token_id=[],
                                  batch_size=rows)
    # the verification's own accepted counts per round, as the chain models them: the engine's statistics stop
    # at the token budget (a finishing round counts only what it emitted), so they are read at verify()
    import specdiff.engine.generate as engine_generate

    per_round, original = [], engine_generate.verify

    def recorded(*args, **kwargs):
        result = original(*args, **kwargs)
        per_round.extend(result.num_accepted.tolist())
        return result

    engine_generate.verify = recorded
    try:
        gen.generate(prompts, max_new_tokens=LENGTH - 1, generator=generator)
    finally:
        engine_generate.verify = original
    return [sum(a > i for a in per_round) / len(per_round) for i in range(engines.B)]


def test_the_laws_differ(hf):
    """The check has power: Lossless's and Linear(0.5)'s laws are more than 2 TV_TOLERANCE apart."""
    target, draft = hf
    lossless = _law(target, draft, PROMPTS[0], sd.Lossless())[0]
    linear = _law(target, draft, PROMPTS[0], sd.Linear(0.5))[0]
    assert 0.5 * (lossless - linear).abs().sum() > 2 * TV_TOLERANCE


@pytest.mark.parametrize("rule, leniency", [("tv", 0.3), ("cactus", 0.5)])
def test_tv_budget_and_cactus_follow_their_chain(engine, hf, rule, leniency):
    target, draft = hf
    acceptance_rule = sd.TVBudget(leniency) if rule == "tv" else sd.Cactus(leniency)
    law, rounds, accepted = _law(target, draft, PROMPTS[1], acceptance_rule)
    rows, delta = engines.generate(engine, [PROMPTS[1]] * N, _params(rule, leniency))
    measured, expected = engines.per_position(delta), (accepted / rounds).tolist()
    engines.record(f"acceptance {rule}({leniency})", vllm=measured, chain=expected)
    assert max(abs(m - e) for m, e in zip(measured, expected)) <= ACCEPTANCE_TOLERANCE, (measured, expected)
    _assert_law(rows, law, f"{rule}({leniency})")


def test_greedy_requests_under_linear_one_accept_every_draft(engine):
    _, delta = engines.generate(engine, [PROMPTS[0]] * 64, _params("linear", 1.0, temperature=0, max_tokens=9))
    assert delta["accepted"] == delta["draft_tokens"] > 0


def test_flat_extra_args_and_a_bad_request(engine):
    """The OpenAI API's vllm_xargs are flat: specdiff_rule / specdiff_leniency. A bad override is refused."""
    flat = SamplingParams(temperature=1.0, max_tokens=6, ignore_eos=True,
                          extra_args={"specdiff_rule": "linear", "specdiff_leniency": 1.0})
    before = engines.counters(engine)
    engine.generate([{"prompt_token_ids": PROMPTS[0]}] * 16, flat, use_tqdm=False)
    after = engines.counters(engine)
    assert after["accepted"] - before["accepted"] == after["draft_tokens"] - before["draft_tokens"] > 0
    for bad in ({"specdiff": {"rule": "linear", "leniency": 1.5}}, {"specdiff_rule": "nope"}):
        with pytest.raises(SpecdiffConfigError):
            engine.generate([{"prompt_token_ids": PROMPTS[0]}],
                            SamplingParams(max_tokens=2, extra_args=bad), use_tqdm=False)


@pytest.mark.parametrize("settings, message", [({"rule": "bogus"}, "unknown rule"),
                                               ({"rule": "linear", "leniency": 2.0}, "lam must lie in"),
                                               ({"rule": "cactus", "leniency": "x"}, "must be a number"),
                                               ({"rule": "linear", "lenency": 0.1}, "unknown key")])
def test_a_bad_engine_setting_fails_at_engine_start(pair, settings, message):
    with pytest.raises(SpecdiffConfigError, match=message):
        engines.llm(pair[0], engines.draft_model(pair[1]), {"specdiff": settings})


@pytest.fixture(scope="module")
def probabilistic(pair):
    """draft_model with draft_sample_method="probabilistic": q is vLLM's recorded draft distribution."""
    llm = engines.llm(pair[0], engines.draft_model(pair[1], "probabilistic"), {"specdiff": {"rule": "linear",
                                                                                           "leniency": 0.5}})
    yield llm
    del llm


@pytest.mark.parametrize("lam", (0.5, 1.0))
def test_probabilistic_drafts_relax_towards_q(probabilistic, hf, lam):
    """The engine's rule is Linear(0.5); lam = 1 comes from the request. With q the draft's
    distribution, lam = 1 accepts every draft (p~ = q)."""
    target, draft = hf
    law, rounds, accepted = _law(target, draft, PROMPTS[0], sd.Linear(lam), greedy_draft=False)
    params = _params() if lam == 0.5 else _params("linear", lam)
    rows, delta = engines.generate(probabilistic, [PROMPTS[0]] * N, params)
    measured, expected = engines.per_position(delta), (accepted / rounds).tolist()
    engines.record(f"acceptance probabilistic Linear({lam})", vllm=measured, chain=expected)
    assert max(abs(m - e) for m, e in zip(measured, expected)) <= ACCEPTANCE_TOLERANCE, (measured, expected)
    if lam == 1.0:
        assert delta["accepted"] == delta["draft_tokens"] > 0
    _assert_law(rows, law, f"probabilistic Linear({lam})")


@pytest.mark.parametrize("method", ["ngram", "block"])
def test_other_methods(pair, hf, method):
    """ngram drafting (no draft probabilities: point mass) and rejection_sample_method="block" (vLLM's V1
    runner has no block kernel and verifies token by token; lenient requests are verified by specdiff's
    block rule): Lossless greedy tokens are the target's argmax, and Linear(1) accepts every draft."""
    if method == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": engines.B, "prompt_lookup_max": 2, "prompt_lookup_min": 1}
    else:
        spec = {**engines.draft_model(pair[1]), "rejection_sample_method": "block"}
    llm = engines.llm(pair[0], spec, {"specdiff": {"rule": "lossless"}})
    try:
        prompts = [[1, 2, 3, 1, 2, 3, 1, 2], [3, 1, 0, 2, 3, 1, 0]]
        greedy, _ = engines.generate(llm, prompts, _params(temperature=0, max_tokens=10))
        _, delta = engines.generate(llm, prompts * 16, _params("linear", 1.0, max_tokens=10))
        assert delta["draft_tokens"] > 0 and delta["accepted"] == delta["draft_tokens"]
    finally:
        del llm
    for prompt, tokens in zip(prompts, greedy):
        engines.assert_greedy(hf[0], prompt, tokens)
