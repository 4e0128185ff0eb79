"""`specdiff bench vllm --arrivals poisson`: how its two servers admit staggered requests.

vLLM's continuous batching (staggered.VllmServer, a real in-process engine with the plugin): two
requests arriving together, of 2 and 24 tokens, share the running batch and the short one returns
first; a third, queued behind them at c = 2, joins as soon as the short one leaves, while the long one
is still running, and returns before it. Those orders are counted in engine steps (the long request needs
at least 8 steps of at most 3 tokens; the others finish within 4), not in seconds, so a faster machine
cannot reorder them. specdiff's static batches
(staggered.StaticServer, its real SpeculativeGenerator): requests that arrive together leave together,
at the longest one's length, and one arriving meanwhile waits for the next batch; at c = 1 one at a time.
Both run the bench's one arrival loop (`staggered.serve_arrivals`), and the bench counts acceptance through
the plugin's observers rather than patching vLLM a second time.
"""
from __future__ import annotations

import sys
from argparse import Namespace
from pathlib import Path

import pytest

pytest.importorskip("vllm.entrypoints.llm", reason="vLLM is not importable here: run tests/vllm in the environment "
                    "that scripts/vllm_env.sh builds")

sys.path.insert(0, str(Path(__file__).parent))
import tiny  # noqa: E402

from specdiff.integrations.vllm import arrivals as staggered  # noqa: E402
from specdiff.integrations.vllm import hooks, state, v1  # noqa: E402

PROMPTS = [[1, 2, 3, 0], [3, 1, 0, 2], [0, 1, 2, 3]]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return tiny.pair(tmp_path_factory.mktemp("bench"), vocab=4)


def _args(**overrides):
    values = dict(block=2, lam=0.5, steps=2, seed=0, tokens=24, concurrency=[1, 2], dtype="float32")
    values.update(overrides)
    return Namespace(**values)


def _assert_patched_once():
    """vLLM's V1 acceptance points are the plugin's wrappers, each around vLLM's own function: the bench's
    acceptance counting adds no patch of its own on top."""
    from vllm.v1.sample import rejection_sampler
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    assert hooks.active()
    function = rejection_sampler.rejection_sample
    assert function.__module__ == v1.__name__, function.__module__
    assert function.__wrapped__.__module__ == "vllm.v1.sample.rejection_sampler", function.__wrapped__.__module__
    assert GPUModelRunner._sample.__module__ == v1.__name__
    assert sum(patched is rejection_sampler for patched, name, _ in state.PLUGIN.patches
               if name == "rejection_sample") == 1


def test_the_observer_does_not_patch_vllm():
    """An AcceptanceObserver is an observer of the plugin (state.OBSERVERS), not a second patch of vLLM's
    rejection_sample (the plugin is activated as an engine that asks for specdiff would)."""
    from vllm.v1.sample import rejection_sampler

    hooks.activate()
    before = rejection_sampler.rejection_sample
    observer = staggered.AcceptanceObserver()
    try:
        assert rejection_sampler.rejection_sample is before
        assert observer in state.OBSERVERS
        _assert_patched_once()
    finally:
        observer.remove()
    assert observer not in state.OBSERVERS and rejection_sampler.rejection_sample is before


def test_one_arrival_loop_admits_at_most_c_in_flight():
    """staggered.serve_arrivals with a stand-in server: requests join in arrival order while fewer than c are in
    flight, and each step returns the ones that finished."""

    class Server:
        def __init__(self):
            self.in_flight, self.admitted, self.most = [], [], 0

        def admit(self, i, prompt, length):
            self.in_flight.append(i)
            self.admitted.append(i)
            self.most = max(self.most, len(self.in_flight))

        def step(self):
            done, self.in_flight = self.in_flight[:1], self.in_flight[1:]  # the oldest finishes each step
            return done

    server = Server()
    finish = staggered.serve_arrivals(server, [[0]] * 5, [0.0, 0.0, 0.0, 0.0, 0.02], [1] * 5, concurrency=2)
    assert server.admitted == [0, 1, 2, 3, 4] and server.most == 2
    assert finish == sorted(finish) and finish[4] >= 0.02


def test_quantile():
    assert staggered.quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert staggered.quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.9) == pytest.approx(4.6)
    assert staggered.quantile([7.0], 0.9) == 7.0


def test_static_batches_leave_together(pair):
    import specdiff as sd
    from specdiff.models import load_model

    draft = load_model(str(pair[1]))[0]
    server = staggered.StaticServer(_args(), pair[0], lambda: sd.AutoregressiveDrafter(draft, temperature=0.0,
                                                                                          top_p=1.0, top_k=0))
    arrivals, lengths = [0.0, 0.0, 0.05], [2, 12, 3]
    finish, acceptance = server.serve(PROMPTS, arrivals, lengths, concurrency=2)
    assert finish[0] == finish[1] < finish[2] and acceptance is not None
    finish, _ = server.serve(PROMPTS, arrivals, lengths, concurrency=1)
    assert finish[0] < finish[1] < finish[2]


def test_continuous_batching_returns_each_request_at_its_own_length(pair):
    speculative = {"method": "draft_model", "model": str(pair[1]), "num_speculative_tokens": 2}
    observer = staggered.AcceptanceObserver()
    server = staggered.VllmServer(_args(), pair[0], speculative, {"specdiff": {"rule": "linear", "leniency": 1.0}},
                                  observer)
    try:
        _assert_patched_once()
        server.serve(PROMPTS, [0.0] * 3, [2] * 3, concurrency=2)  # warm-up
        # all three arrive at once; the third waits for a free slot (c = 2), not for the batch to end
        finish, acceptance = server.serve(PROMPTS, [0.0, 0.0, 0.0], [2, 24, 3], concurrency=2)
        assert finish[0] < finish[2] < finish[1]  # the short ones do not wait for the long one
        assert acceptance == 1.0  # Linear(1), counted after the plugin's hook
        assert observer.read()[1] > 0
        _assert_patched_once()
    finally:
        server.close()
        observer.remove()
    assert observer not in state.OBSERVERS
