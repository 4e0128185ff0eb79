"""The real pair in vLLM (issue 32, item 4): SmolLM2-135M-Instruct served from its converted checkpoint
(`specdiff models fetch smollm2-135m-instruct`) with the masked diffusion drafter specdiff distilled for it
as `DiffusionProposer`, its draft vocabulary (8,192 rows, `draft_to_target`) applied inside the drafter.

- The proposer, built in this process as vLLM's worker builds it: the distilled drafter is completed from
  the served folder's weights, every drafted token is a verifier id inside the draft vocabulary, and each
  decoding request gets exactly B = num_speculative_tokens of them.
- `LLM` class, greedy: the proposer's output equals vLLM's without speculation token for token on four
  chat conversations (the model's chat template), batched, 48 tokens each.
- `vllm serve` (specdiff's entry point, tests/vllm/served.py) with the proposer answers the `openai`
  client: greedy chat completions equal those of `vllm serve` without speculation, token for token; the
  acceptance of seeded sampled requests (temperature 0.7, top-p 0.9, one at a time) is the `LLM` class's
  on the same conversations, seeds and settings (within 0.05, >= 200 drafted tokens each).
- `specdiff bench vllm --verifier ... --drafter ...`: a row per engine and concurrency, with and without
  speculation, in the tiny bench's JSON shape.

The drafter: `smollm2-135m-instruct-masked` once shipped (`specdiff.zoo.distilled`), or the folder in
$SPECDIFF_VLLM_DRAFTER (a `specdiff distill --kind masked` export). Skipped, with the reason, when the
verifier is not fetched (a failure under CI, as tests/real) or no drafter is found."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm.entrypoints.llm", reason="vLLM is not importable here: run tests/vllm in the environment "
                    "that scripts/vllm_env.sh builds")
pytest.importorskip("openai")

sys.path.insert(0, str(Path(__file__).parent))
import engines  # noqa: E402
import served as serving  # noqa: E402
from vllm import SamplingParams  # noqa: E402

VERIFIER, DRAFTER = "smollm2-135m-instruct", "smollm2-135m-instruct-masked"
PROPOSER = "specdiff.integrations.vllm.DiffusionProposer"
B, STEPS, GREEDY_TOKENS, SAMPLED_TOKENS, REQUESTS = 4, 1, 48, 32, 12
TEMPERATURE, TOP_P = 0.7, 0.9
CONVERSATIONS = [  # chat, code, rewriting, maths (tests/real's)
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}],
    [{"role": "user", "content": "Rewrite this sentence in a formal tone: hey, the meeting got moved to friday, "
                                 "so don't show up tomorrow lol."}],
    [{"role": "user", "content": "A shop sells pencils at 3 for 45 cents. How much do 12 pencils cost?"}],
]


@pytest.fixture(scope="module")
def pair():
    """(the verifier's converted folder, the drafter's name or folder)."""
    from specdiff import checkpoints
    from specdiff.zoo import distilled

    folder = checkpoints.fetched_dir(VERIFIER)
    if folder is None:
        reason = f"{VERIFIER} is not fetched: run `specdiff models fetch {VERIFIER}`"
        if os.environ.get("CI"):
            pytest.fail(f"under CI the real verifier must be present: {reason}")
        pytest.skip(reason)
    drafter = os.environ.get("SPECDIFF_VLLM_DRAFTER") or (DRAFTER if DRAFTER in distilled.names() else None)
    if drafter is None:
        pytest.skip(f"no masked drafter for {VERIFIER}: {DRAFTER} is not shipped and $SPECDIFF_VLLM_DRAFTER is unset")
    return folder, drafter


def _speculative() -> dict:
    return {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": B}


def _additional(drafter) -> dict:
    return {"specdiff": {"drafter": str(drafter), "steps": STEPS}}


def _llm(folder, speculative=None, additional=None):
    return engines.llm(folder, speculative, additional, skip_tokenizer_init=False, max_model_len=512, max_num_seqs=16)


def test_the_proposer_hands_vllm_b_verifier_ids(pair):
    import torch

    from specdiff.integrations.vllm import DiffusionProposer

    folder, drafter = pair
    config = SimpleNamespace(additional_config=_additional(drafter), speculative_config=SimpleNamespace(
        num_speculative_tokens=3), model_config=SimpleNamespace(model=str(folder), max_model_len=512,
                                                                get_vocab_size=lambda: 49152),
        device_config=SimpleNamespace(device="cpu"))
    proposer = DiffusionProposer(config)
    d2t = proposer.drafter.draft_to_target
    assert d2t is not None and d2t.shape == (8192,) and proposer.drafter.vocab_size == 49152
    rows = torch.zeros((3, 512), dtype=torch.int32)  # vLLM's token_ids_cpu [max_num_reqs, max_model_len]
    lengths = [9, 23, 14]
    generator = torch.Generator().manual_seed(0)
    for i, n in enumerate(lengths):
        rows[i, :n] = torch.randint(3, 49152, (n,), generator=generator)
    drafts = proposer.propose([[1], [], [2]], lengths, rows.numpy())  # request 1 is not decoding this step
    assert [len(d) for d in drafts] == [3, 0, 3]
    allowed = set(d2t.tolist())
    assert all(0 <= t < 49152 and t in allowed for d in drafts for t in d), drafts


@pytest.fixture(scope="module")
def plain_greedy(pair):
    """vLLM's greedy tokens without speculation, per conversation."""
    llm = _llm(pair[0])
    try:
        out = llm.chat(CONVERSATIONS, SamplingParams(temperature=0, max_tokens=GREEDY_TOKENS), use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in out]
    finally:
        del llm


def test_llm_greedy_is_vllm_without_speculation(pair, plain_greedy):
    folder, drafter = pair
    llm = _llm(folder, _speculative(), _additional(drafter))
    try:
        before = engines.counters(llm)
        out = llm.chat(CONVERSATIONS, SamplingParams(temperature=0, max_tokens=GREEDY_TOKENS), use_tqdm=False)
        after = engines.counters(llm)
    finally:
        del llm
    tokens = [list(o.outputs[0].token_ids) for o in out]
    drafted, accepted = after["draft_tokens"] - before["draft_tokens"], after["accepted"] - before["accepted"]
    engines.record("real pair, LLM greedy", drafter=str(drafter), identical=tokens == plain_greedy,
                   drafted=drafted, accepted=accepted)
    assert drafted > 0
    assert tokens == plain_greedy


def _served_greedy(base) -> list[list[int]]:
    client = serving.client(base, timeout=300)
    out = []
    for messages in CONVERSATIONS:
        reply = client.chat.completions.create(model=VERIFIER, messages=messages, temperature=0,
                                               max_tokens=GREEDY_TOKENS, extra_body={"return_token_ids": True})
        out.append(list(reply.choices[0].model_extra["token_ids"]))
    return out


def _served_sampled(base) -> tuple[float, float]:
    """(accepted, drafted) over REQUESTS seeded chat completions, one at a time."""
    client = serving.client(base, timeout=300)
    before = serving.counters(base)
    for seed in range(REQUESTS):
        reply = client.chat.completions.create(
            model=VERIFIER, messages=CONVERSATIONS[seed % len(CONVERSATIONS)], temperature=TEMPERATURE, top_p=TOP_P,
            max_tokens=SAMPLED_TOKENS, seed=seed, extra_body={"ignore_eos": True})
        assert reply.usage.completion_tokens == SAMPLED_TOKENS
    after = serving.counters(base)
    return after[0] - before[0], after[1] - before[1]


def _llm_sampled(pair) -> tuple[float, float]:
    folder, drafter = pair
    llm = _llm(folder, _speculative(), _additional(drafter))
    try:
        before = engines.counters(llm)
        for seed in range(REQUESTS):  # one at a time, as the server gets them
            llm.chat([CONVERSATIONS[seed % len(CONVERSATIONS)]], SamplingParams(
                temperature=TEMPERATURE, top_p=TOP_P, max_tokens=SAMPLED_TOKENS, seed=seed, ignore_eos=True),
                use_tqdm=False)
        after = engines.counters(llm)
    finally:
        del llm
    return after["accepted"] - before["accepted"], after["draft_tokens"] - before["draft_tokens"]


def test_served_greedy_and_acceptance(pair, tmp_path):
    folder, drafter = pair
    options = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "512", "--max-num-seqs", "16"]
    with serving.server(VERIFIER, options, tmp_path / "plain.log") as base:  # the fetched name: its folder
        plain = _served_greedy(base)
    speculative = ["--speculative-config", json.dumps(_speculative()),
                   "--additional-config", json.dumps(_additional(drafter))]
    with serving.server(VERIFIER, options + speculative, tmp_path / "spec.log") as base:
        greedy = _served_greedy(base)
        served = _served_sampled(base)
    local = _llm_sampled(pair)
    rates = served[0] / served[1], local[0] / local[1]
    engines.record("real pair, served vs LLM", drafter=str(drafter), greedy_identical=greedy == plain,
                   served=served, llm=local, rates=rates, temperature=TEMPERATURE, top_p=TOP_P)
    assert greedy == plain
    assert served[1] >= 200 and local[1] >= 200, (served, local)
    assert abs(rates[0] - rates[1]) <= 0.05, (served, local)


def test_bench_vllm_on_the_real_pair(pair, capsys):
    from specdiff.cli import main

    folder, drafter = pair
    assert main(["bench", "vllm", "--verifier", str(folder), "--drafter", str(drafter), "--concurrency", "1", "2",
                 "--tokens", "6", "--repeats", "1", "--threads", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(report) == {"settings", "results", "ratios"}
    rows = {(r["engine"], r["concurrency"]): r for r in report["results"]}
    assert set(rows) == {(engine, c) for engine in ("vllm no speculation", "vllm DiffusionProposer lossless")
                         for c in (1, 2)}
    assert all(r["tokens_per_s"] > 0 for r in rows.values())
    assert rows[("vllm no speculation", 1)]["acceptance"] is None
    assert rows[("vllm DiffusionProposer lossless", 2)]["acceptance"] is not None
    assert set(report["ratios"]) == {"vllm_speculative_over_plain_c1", "vllm_speculative_over_plain_c2"}
