"""specdiff.eval.timing: the one median timer."""
import pytest

from specdiff.eval import timing


def test_interleaved_median_ms_times_round_robin_after_warm_up(monkeypatch):
    calls = []
    clock = iter(float(i) for i in range(1000))
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    result = timing.interleaved_median_ms({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                                          repeats=3, warmup=2)
    assert calls == ["a", "b"] * 5  # warm-up rounds, then timed rounds, alternating
    assert result == {"a": 1000.0, "b": 1000.0}  # each call spans one tick of the fake clock


def test_median_ms_and_bad_repeats():
    assert timing.median_ms(lambda: None, repeats=3, warmup=0) >= 0.0
    with pytest.raises(ValueError, match="repeats"):
        timing.interleaved_median_ms({"a": lambda: None}, repeats=0)
