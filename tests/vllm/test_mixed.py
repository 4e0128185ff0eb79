"""Mixed batches and lenient block verification in vLLM on its CPU backend (issue 33, item 4).

The pair and chain of test_plugin.py: a tiny target over V = 4 tokens, a 1-layer greedy draft model,
B = 2 drafted tokens per round, prompts of 4 tokens, L = 3 generated tokens; what a request emits is
compared with its exact law, enumerated (chain.chain_law), with the tolerances of test_plugin.py (TV <=
0.05 and a chi-square p-value >= 1e-4 over n = 6,000 requests; an exact sampler's expected TV is 0.021).

- A seeded Lossless request emits the same tokens alone and in a batch that also holds lenient,
  unseeded and greedy requests at other temperatures and top-p; and an unseeded request's draws from
  torch's global generator are not moved by a lenient batchmate: the plugin's lenient rows draw from
  a generator of their own (`hooks.lenient_generator`), never from torch's global one.
- One batch mixes greedy Lossless and greedy Linear(1) requests (checked token by token), sampled
  Lossless at temperature 0.7 and top-p 0.9, Linear(0.5) at temperature 1.3 and Typical(0.09) at
  temperature 1 and top-p 0.8 (each checked against its own chain at its temperature and top-p).
- rejection_sample_method="block" at Linear(0.5): the law and per-position acceptance of Sun et al.'s
  block verification on the relaxed target, enumerated (chain.block_round). On V1 vLLM hands no q
  under "block", and with a point-mass q block and token verification coincide; test_hooks_v2.py checks
  block against token verification at lam < 1 with a real q.
"""
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
from test_plugin import ACCEPTANCE_TOLERANCE, LENGTH, N, PROMPTS, VOCAB, _assert_law  # noqa: E402
from vllm import SamplingParams  # noqa: E402

import specdiff as sd  # noqa: E402


def _params(rule=None, leniency=None, temperature=1.0, top_p=1.0, seed=None, max_tokens=LENGTH):
    extra = {"specdiff": {"rule": rule, "leniency": leniency}} if rule is not None else None
    return SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_tokens, ignore_eos=True, seed=seed,
                          extra_args=extra)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny.pair(tmp_path_factory.mktemp("pair"), vocab=VOCAB)


@pytest.fixture(scope="module")
def hf(pair):
    from transformers import AutoModelForCausalLM

    return [AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval() for path in pair]


@pytest.fixture(scope="module")
def engine(pair):
    llm = engines.llm(pair[0], engines.draft_model(pair[1]), {"specdiff": {}})
    yield llm
    del llm


def _run(engine, prompts, params):
    outputs = engine.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outputs]


def test_a_seeded_lossless_request_is_unmoved_by_lenient_and_unseeded_batchmates(engine):
    seeded = _params(temperature=0.9, top_p=0.95, seed=11, max_tokens=16)
    alone = _run(engine, [PROMPTS[0]], [seeded])[0]
    again = _run(engine, [PROMPTS[0]], [seeded])[0]
    assert alone == again  # the seed alone decides
    mates = [_params("linear", 0.5, temperature=1.2, max_tokens=16),  # lenient, unseeded
             _params("tv", 0.3, temperature=0.8, top_p=0.9, max_tokens=16),
             _params(temperature=1.0, max_tokens=16),  # Lossless, unseeded
             _params("linear", 1.0, temperature=0, max_tokens=16),  # greedy, lenient
             _params("typical", 0.09, temperature=1.0, max_tokens=16, seed=5)]  # lenient, seeded
    for position in (0, 3, 6):
        params = mates * 2
        params.insert(position, seeded)
        prompts = [PROMPTS[i % 2] for i in range(len(params))]
        prompts[position] = PROMPTS[0]
        mixed = _run(engine, prompts, params)
        assert mixed[position] == alone, (position, mixed[position], alone)


def test_lenient_rows_leave_torchs_global_generator_to_vllm(engine):
    """An unseeded Lossless request draws from torch's global generator (vLLM's unseeded rows do). Beside it,
    one request under Linear(0.5) or under Linear(0) (Lossless: no lenient draw), from the same global state:
    while both run, vLLM draws the same shapes in both batches, so the first request emits the same tokens
    only if the lenient rows draw from a generator of their own. (With drafts and bonus draws from torch's global
    generator, as before issue 33, its tokens moved.)"""
    first = _params(temperature=1.0, max_tokens=10)
    runs = {}
    for leniency in (0.0, 0.5, 0.0):  # the second request outlives the first (26 tokens, at most 3 a step)
        torch.manual_seed(123)
        rows = _run(engine, [PROMPTS[0], PROMPTS[1]], [first, _params("linear", leniency, max_tokens=26)])
        runs.setdefault(leniency, []).append(rows[0])
    assert runs[0.0][0] == runs[0.0][1]  # the same global state: the same tokens
    assert runs[0.5][0] == runs[0.0][0], runs


def _histogram(rows) -> torch.Tensor:
    index = torch.tensor([sum(t * VOCAB ** (LENGTH - 1 - i) for i, t in enumerate(row[:LENGTH])) for row in rows])
    return torch.bincount(index, minlength=VOCAB ** LENGTH).double()


def _greedy_path(target, draft, prompt, rule_accepts_drafts: bool) -> list:
    """The first L tokens of a greedy request: the prefill's argmax, then rounds of B greedy drafts, all
    kept under Linear(1) (then the target's argmax as the bonus), or the target's argmax chain under Lossless."""
    t, d = chain.Model(target, temperature=1.0), chain.Model(draft, temperature=1.0)
    tokens = [int(t(tuple(prompt)).argmax())]
    while len(tokens) < LENGTH:
        prefix = tuple(prompt) + tuple(tokens)
        if not rule_accepts_drafts:
            tokens.append(int(t(prefix).argmax()))
            continue
        for _ in range(engines.B):
            y = int(d(prefix).argmax())
            tokens.append(y)
            prefix = prefix + (y,)
        tokens.append(int(t(prefix).argmax()))
    return tokens[:LENGTH]


def test_one_batch_mixing_greedy_sampled_and_lenient_requests(engine, hf):
    target, draft = hf
    groups = {  # name: (params, count, rule, temperature, top_p)
        "greedy Lossless": (_params(temperature=0), 64, None, 0, 1.0),
        "greedy Linear(1)": (_params("linear", 1.0, temperature=0), 64, None, 0, 1.0),
        "Lossless T=0.7 top-p 0.9": (_params(temperature=0.7, top_p=0.9), N, sd.Lossless(), 0.7, 0.9),
        "Linear(0.5) T=1.3": (_params("linear", 0.5, temperature=1.3), N, sd.Linear(0.5), 1.3, 1.0),
        "Typical(0.09) top-p 0.8": (_params("typical", 0.09, temperature=1.0, top_p=0.8), N, sd.Typical(0.09), 1.0,
                                    0.8),
    }
    params, names = [], []
    for name, (param, count, *_rest) in groups.items():
        params += [param] * count
        names += [name] * count
    order = torch.randperm(len(params), generator=torch.Generator().manual_seed(0)).tolist()  # interleaved
    rows = _run(engine, [PROMPTS[0]] * len(order), [params[i] for i in order])
    by_group = {name: [] for name in groups}
    for i, row in zip(order, rows):
        by_group[names[i]].append(row)
    assert all(row == _greedy_path(target, draft, PROMPTS[0], False) for row in by_group["greedy Lossless"])
    assert all(row == _greedy_path(target, draft, PROMPTS[0], True) for row in by_group["greedy Linear(1)"])
    for name, (_param, _count, rule, temperature, top_p) in groups.items():
        if rule is None:
            continue
        law = chain.chain_law(chain.Model(target, temperature, top_p), chain.Model(draft, temperature), PROMPTS[0],
                              LENGTH, engines.B, rule, True)[0]
        _assert_law(by_group[name], law, f"mixed batch: {name}")


@pytest.fixture(scope="module")
def block_engine(pair):
    llm = engines.llm(pair[0], {**engines.draft_model(pair[1]), "rejection_sample_method": "block"}, {"specdiff": {}})
    yield llm
    del llm


def test_lenient_block_verification_follows_the_block_chain(block_engine, hf):
    """Linear(0.5) per request, rejection_sample_method="block" on V1 (greedy drafts): vLLM's per-position
    acceptance and law are the enumerated block chain's (chain.block_round at every round). vLLM 0.32 records
    no draft distribution under "block" (its proposers keep q for "standard" only), so q is a point mass
    here, and with a point-mass q block and token verification coincide (the two chains agree to 1e-6,
    checked): on V1 this pins the block path at lam < 1, while test_hooks_v2.py tells block from token
    verification with a real q (V2's draft logits)."""
    target, draft = hf
    rule = sd.Linear(0.5)
    block_law, rounds, accepted = chain.chain_law(chain.Model(target), chain.Model(draft), PROMPTS[1], LENGTH,
                                                  engines.B, rule, True, method="block")
    token_law, token_rounds, token_accepted = chain.chain_law(chain.Model(target), chain.Model(draft), PROMPTS[1],
                                                              LENGTH, engines.B, rule, True)
    expected = (accepted / rounds).tolist()
    assert torch.allclose(accepted / rounds, token_accepted / token_rounds, atol=1e-6)
    assert 0.5 * (block_law - token_law).abs().sum() <= 1e-6
    params = _params("linear", 0.5)
    before = engines.counters(block_engine)
    rows = _run(block_engine, [PROMPTS[1]] * N, [params] * N)
    after = engines.counters(block_engine)
    delta = {key: (after[key] - before[key]) if key != "per_pos" else [a - b for a, b in zip(after[key], before[key])]
             for key in after}
    measured = engines.per_position(delta)
    engines.record("acceptance block Linear(0.5)", vllm=measured, block_chain=expected)
    assert max(abs(m - e) for m, e in zip(measured, expected)) <= ACCEPTANCE_TOLERANCE, (measured, expected)
    _assert_law(rows, block_law, "block Linear(0.5)")
