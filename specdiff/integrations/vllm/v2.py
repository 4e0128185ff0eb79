"""The plugin in vLLM's model runner V2 (`vllm/v1/worker/gpu/`, the default on GPUs with Triton).

`RejectionSampler._verify` (`vllm/v1/worker/gpu/spec_decode/rejection_sampler.py`) calls `rejection_sample`
of `rejection_sampler_utils`, one set of Triton kernels over the processed logits of every row, bonus rows
included, that both accepts (token, or block with `rejection_sample_method="block"`, which exists only
here) and resamples the recovered or bonus token; draft logits arrive pre-temperature as
[max_num_reqs, K, V] indexed by request state, or None.

V2 keeps no SamplingParams beside its batch, only per-state arrays, so each request's rule is recorded by
state index when `Sampler.add_request(req_idx, sampling_params)` admits it, and looked up per
verification chunk from its `idx_mapping_np` by a wrapper of `RejectionSampler._verify`; the wrapped
`rejection_sample` lets vLLM verify, then verifies the lenient rows again (`relax_v2`). vLLM's CPU backend
cannot run V2 (it needs Triton): tests/vllm/test_hooks_v2.py checks this on V2's real Sampler and
RejectionSampler with a torch stand-in for the Triton kernel.
"""
from __future__ import annotations

import logging

import torch

from specdiff.integrations.vllm import state
from specdiff.integrations.vllm.compat import bypassed, expect, patch
from specdiff.integrations.vllm.sampling import relaxed_rejection_sample
from specdiff.integrations.vllm.state import BATCH

log = logging.getLogger("specdiff.integrations.vllm")


def install_v2(applied: list) -> None:
    try:
        from vllm.v1.worker.gpu.sample import sampler as v2_sampler
        from vllm.v1.worker.gpu.spec_decode import rejection_sampler as v2
    except ImportError as error:  # V2 imports Triton kernels; a build without them cannot run V2 either
        log.debug("specdiff: vLLM's model runner V2 is not importable here (%s); hooking V1 only", error)
        return

    # Per-request rules. V2 keeps each request's sampling parameters in arrays indexed by its request
    # state index (SamplingStates: temperature, seeds, ... [max_num_reqs]), filled by
    # Sampler.add_request(req_idx, sampling_params) when the runner admits the request; a batch row r
    # is request state idx_mapping[r]. The plugin keeps its rule beside them: a {req_idx: rule} table
    # on the Sampler, filled by the same call, read back per verification chunk by idx_mapping_np.
    sampler_init = v2_sampler.Sampler.__init__
    init_signature = expect(sampler_init, ("vllm_config",), "vllm.v1.worker.gpu.sample.sampler.Sampler.__init__")

    def __init__(self, *args, **kwargs):
        sampler_init(self, *args, **kwargs)
        self._specdiff_config = init_signature.bind(self, *args, **kwargs).arguments.get("vllm_config")
        self._specdiff_rules = {}

    patch(v2_sampler.Sampler, "__init__", __init__, applied)

    add_request = v2_sampler.Sampler.add_request
    add_signature = expect(add_request, ("req_idx", "sampling_params"), "Sampler.add_request")

    def sampler_add_request(self, *args, **kwargs):
        add_request(self, *args, **kwargs)
        arguments = add_signature.bind(self, *args, **kwargs).arguments
        record_request_rule(self, arguments["req_idx"], arguments["sampling_params"])

    patch(v2_sampler.Sampler, "add_request", sampler_add_request, applied)

    verify = v2.RejectionSampler._verify
    verify_signature = expect(verify, ("idx_mapping_np", "pos", "cu_num_logits"), "RejectionSampler._verify")

    def _verify(self, *args, **kwargs):
        if not state.is_specdiff(sampler_config(self.sampler)):
            return verify(self, *args, **kwargs)
        arguments = verify_signature.bind(self, *args, **kwargs).arguments
        BATCH.rules, BATCH.method = v2_rules(self, arguments["idx_mapping_np"])
        BATCH.seeds = v2_seeds(self.sampler, arguments["idx_mapping_np"], arguments.get("pos"),
                                 arguments.get("cu_num_logits"))
        BATCH.reached = False
        try:
            output = verify(self, *args, **kwargs)
            if not BATCH.reached:
                raise bypassed("RejectionSampler._verify")
            return output
        finally:
            BATCH.rules = BATCH.seeds = None
            BATCH.reached = False

    patch(v2.RejectionSampler, "_verify", _verify, applied)

    original = v2.rejection_sample
    signature = expect(original, ("target_logits", "draft_logits", "draft_sampled", "cu_num_logits", "idx_mapping",
                                   "temperature", "synthetic_conditional_rates"),
                        "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils.rejection_sample")

    def rejection_sample(*args, **kwargs):
        sampled, num_sampled = rejection_sample.__wrapped__(*args, **kwargs)
        rules = getattr(BATCH, "rules", None)
        if rules is None:
            return sampled, num_sampled  # not a specdiff engine's verification: vLLM's own result
        BATCH.reached = True
        arguments = signature.bind(*args, **kwargs).arguments
        if all(rule is None for rule in rules) or arguments.get("synthetic_conditional_rates") is not None:
            return sampled, num_sampled
        return relax_v2(sampled, num_sampled, arguments["target_logits"], arguments["draft_logits"],
                         arguments["draft_sampled"], arguments["cu_num_logits"], arguments["idx_mapping"],
                         arguments["temperature"], rules, BATCH.method, generators=getattr(BATCH, "seeds", None))

    rejection_sample.__wrapped__ = original  # vLLM's (Triton) function, called first
    patch(v2, "rejection_sample", rejection_sample, applied)


def sampler_config(sampler):
    config = getattr(sampler, "_specdiff_config", None)
    if config is None:  # a Sampler built before the plugin was activated
        from vllm.config import get_current_vllm_config

        config = sampler._specdiff_config = get_current_vllm_config()
    return config


def record_request_rule(sampler, req_idx: int, sampling_params) -> None:
    """Keep the rule of the request admitted at state index req_idx on V2's Sampler (None: Lossless)."""
    config = sampler_config(sampler)
    table = getattr(sampler, "_specdiff_rules", None)
    if table is None:
        table = sampler._specdiff_rules = {}
    if not state.is_specdiff(config):
        table[int(req_idx)] = None
        return
    rules, _ = state.rules_of(config, [getattr(sampling_params, "extra_args", None)])
    table[int(req_idx)] = rules[0]


def v2_rules(rejection_sampler, idx_mapping_np) -> tuple[list, str]:
    """The rule of each row of a V2 verification chunk (rows -> request state indices) and the method."""
    sampler = rejection_sampler.sampler
    table = getattr(sampler, "_specdiff_rules", None)
    method = "block" if getattr(rejection_sampler, "use_block_verification", False) else "token"
    if table is None:  # no request went through Sampler.add_request: the engine's rule for all
        rules, _ = state.rules_of(sampler_config(sampler), [None] * len(idx_mapping_np))
        return rules, method
    return [table.get(int(i)) for i in idx_mapping_np], method


def v2_seeds(sampler, idx_mapping_np, pos, cu_num_logits) -> dict | None:
    """{row: torch.Generator} for the rows whose request set its own seed: seeded by (seed, the position
    of the row's first logits row), so that a seeded lenient request is reproducible as vLLM's are."""
    states = getattr(sampler, "sampling_states", None)
    seeds_set = getattr(states, "seeds_set", None)
    if seeds_set is None or pos is None or cu_num_logits is None or not seeds_set[idx_mapping_np].any():
        return None
    seeds = states.seeds.np
    starts = cu_num_logits[:-1].tolist()
    positions = pos.tolist()
    generators = {}
    for row, idx in enumerate(idx_mapping_np):
        if seeds_set[idx]:
            key = (int(seeds[idx]) * 1_000_003 + int(positions[starts[row]])) % (2 ** 63)
            generators[row] = torch.Generator(pos.device).manual_seed(key)
    return generators


def relax_v2(sampled, num_sampled, target_logits, draft_logits, draft_sampled, cu_num_logits, idx_mapping,
              temperature, rules, method, generators=None):
    """V2's layout -> V1's: request r has logits rows cu[r]..cu[r+1]-1, n_r + 1 of them (the drafted
    positions, then the bonus row); draft_sampled[cu[r] + i + 1] is drafted token i (as V2's
    _rejection_kernel reads it). The target logits arrive processed (temperature, top-k, top-p applied
    by Sampler.apply_sampling_params); the draft logits are [max_num_reqs, K, V'] pre-temperature and
    indexed by request state, so q is softmax(draft logits / T) (zero beyond the draft's vocabulary V'
    where V' < V, as V2's kernels read only min(V, V') entries). A lenient row's bonus token is drawn
    here from the unrelaxed p of its bonus row; `generators` ({row: torch.Generator}) are the seeded
    requests', `lenient_generator` every other lenient row's. vLLM's CPU backend cannot run V2 (it
    needs Triton): tests/vllm/test_hooks_v2.py checks this on V2's real Sampler and RejectionSampler
    with a torch stand-in for the Triton kernel."""
    generators = generators or {}
    default = state.lenient_generator(target_logits.device)
    cu = cu_num_logits.tolist()
    num_reqs = len(cu) - 1
    vocab = target_logits.shape[-1]
    temp = temperature[idx_mapping].float()  # [num_reqs]
    greedy = (temp == 0).cpu()
    counts = [cu[r + 1] - cu[r] - 1 for r in range(num_reqs)]
    draft_rows, target_rows, bonus, q_rows = [], [], [], []
    for r in range(num_reqs):
        n, start = counts[r], cu[r]
        scale = 1.0 if bool(greedy[r]) else float(temp[r])
        rows = target_logits[start : start + n + 1].float()
        target_rows.append(rows[:n])
        draft_rows.append(draft_sampled[start + 1 : start + n + 1])
        if bool(greedy[r]):
            bonus.append(rows[n].argmax())
        else:
            bonus.append(torch.multinomial(rows[n].softmax(-1), 1, generator=generators.get(r, default))[0])
        if draft_logits is not None:
            width = min(vocab, draft_logits.shape[-1])
            q = torch.zeros(n, vocab, dtype=torch.float32, device=target_logits.device)
            q[:, :width] = (draft_logits[idx_mapping[r], :n, :width].float() / scale).softmax(-1)
            q_rows.append(q)
    output = sampled.new_full((num_reqs, sampled.shape[1]), -1)
    for r in range(num_reqs):
        output[r, : int(num_sampled[r])] = sampled[r, : int(num_sampled[r])]
    q = torch.cat(q_rows) if q_rows else None
    relaxed_rejection_sample(output, torch.cat(draft_rows), counts, q, torch.cat(target_rows),
                             torch.stack(bonus), rules[:num_reqs], greedy=greedy, method=method,
                             generators=generators, default_generator=default)
    num_sampled = num_sampled.clone()
    lenient = torch.tensor([rule is not None for rule in rules[:num_reqs]], device=output.device)
    emitted = (output != -1).sum(dim=1).to(num_sampled.dtype)
    num_sampled = torch.where(lenient.to(num_sampled.device), emitted.to(num_sampled.device), num_sampled)
    return output.to(sampled.dtype), num_sampled
