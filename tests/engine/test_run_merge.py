"""`specdiff.runs.merge_results`: one configuration run over chunks of problems (the demo's interleaved
timing) gives the figures of all of them together: the sums of the chunks' counts and seconds, and
per-round figures weighted by each chunk's rounds."""
import pytest

from specdiff.eval import tasks
from specdiff.models import ModelCache
from specdiff.runs import RunConfig, merge_results, run_config


@pytest.fixture(scope="module")
def parts():
    problems = tasks.arith_problems("test", 4)
    cache = ModelCache()
    out = {}
    for name, config in (("spec", RunConfig("masked K=2 B=8", drafter="masked-drafter", steps=2, block_size=8)),
                         ("plain", RunConfig("plain", drafter=None))):
        out[name] = [run_config(config, [p.prompt for p in chunk], [p.target for p in chunk], cache, 24, seed=seed,
                                is_correct=tasks.is_correct)
                     for seed, chunk in enumerate((problems[:1], problems[1:]))]
    return out


def test_speculative_chunks_merge_into_one_run(parts):
    a, b = parts["spec"]
    merged = merge_results([a, b])
    assert "records" not in merged and merged["problems"] == 4
    assert merged["new_tokens"] == a["new_tokens"] + b["new_tokens"] and merged["rounds"] == a["rounds"] + b["rounds"]
    assert merged["wall_s"] == pytest.approx(a["wall_s"] + b["wall_s"])
    assert merged["tokens_per_s"] == pytest.approx(merged["new_tokens"] / merged["wall_s"])
    records = a["records"] + b["records"]
    assert merged["mean_accepted"] == pytest.approx(sum(sum(r["accepted"]) for r in records) / merged["rounds"])
    assert merged["acceptance_rate"] == pytest.approx(sum(sum(r["accepted"]) for r in records)
                                                      / sum(sum(r["drafted"]) for r in records))
    for key in ("draft_ms", "verify_ms", "accept_ms", "overhead_ms"):
        assert merged[key] == pytest.approx((a[key] * a["rounds"] + b[key] * b["rounds"]) / merged["rounds"]), key
    assert merged["accuracy"] == pytest.approx(sum(r["correct"] for r in records) / 4)
    assert merged["latency_s"] == pytest.approx(sum(r["wall_s"] for r in records) / 4)
    assert merged["exact"] == (a["exact"] and b["exact"])


def test_plain_decoding_chunks_merge_without_per_round_figures(parts):
    merged = merge_results(parts["plain"])
    assert "rounds" not in merged and "draft_ms" not in merged and merged["exact"] is True
    assert merged["new_tokens"] == sum(p["new_tokens"] for p in parts["plain"])
    assert merged["accuracy"] == pytest.approx(sum(r["correct"] for p in parts["plain"] for r in p["records"]) / 4)
