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

Who is patched, and when (`install`, `activate`):

- the plugin's entry point installs only pass-through gates (engine start, worker start, request
  checks); an engine that does not ask for specdiff (no `additional_config["specdiff"]`, no specdiff
  proposer) runs exactly as vLLM without the plugin, the CPU repair below included, unless
  SPECDIFF_VLLM_CPU_REPAIR=1 asks for the repair everywhere;
- the first engine of a process that asks for specdiff checks vLLM's version (TESTED_VLLM, the
  [vllm] extra's range) and applies every sampling patch, binding vLLM's arguments by name against
  the signatures it checks first; anything missing undoes what was applied and raises
  SpecdiffInstallError, so that a lenient config never runs as Lossless without a word;
- the sampling patches act on specdiff's engines only (per engine, read from its VllmConfig), and a
  specdiff engine's step that does not reach the wrapped `rejection_sample` raises.
"""
from __future__ import annotations

import inspect
import logging
import os
import re
import threading

import torch

from specdiff.integrations.vllm.sampling import relaxed_rejection_sample
from specdiff.integrations.vllm.settings import (KEY, RuleSetting, SpecdiffConfigError, check_method, engine_rule,
                                                 engine_settings, request_override, request_rule)

log = logging.getLogger("specdiff.integrations.vllm")

TESTED_VLLM = ">=0.32,<0.33"  # the vLLM versions the hooks are written for and tested on: the [vllm] extra
_TESTED = ((0, 32), (0, 33))  # [lowest, first untested) as (major, minor)
PROPOSER = "specdiff.integrations.vllm.DiffusionProposer"
CPU_REPAIR_ENV = "SPECDIFF_VLLM_CPU_REPAIR"  # "auto" (default): specdiff's engines only; "1": every engine; "0": none

_batch = threading.local()  # .rules: [b] acceptance rules of the batch being verified (None: not set), .method,
#                             .seeds, .repair (the CPU expand repair applies to this batch), .reached (the wrapped
#                             rejection_sample ran while the rules were set)
_gates = False  # the pass-through gates are in place (register)
_active = False  # the sampling patches are in place (the first engine that asks for specdiff, in this process)
_patches: list = []  # (owner, attribute, vLLM's original) of every patch applied, for a clean undo


class SpecdiffInstallError(RuntimeError):
    """specdiff was asked for, but its hooks cannot be (or were not) applied to this vLLM: an untested
    version, a patch point that moved, or a verification that bypassed the hooks. Raised rather than
    letting lenient requests run as Lossless without a word."""


def install() -> None:
    """The plugin's entry (vLLM loads general plugins in each of its processes): install the gates only.

    The gates are pass-through wrappers that read vLLM's config: `EngineArgs.create_engine_config` (engine
    start, in the process that builds the engine), `WorkerBase.__init__` (every worker, V1 and V2, CPU and
    GPU) and `InputProcessor._validate_params` (each request). Where nothing asks for specdiff (no
    `additional_config["specdiff"]`, no specdiff proposer) they change nothing, but refuse a request that
    names a rule there (rather than run it as Lossless).
    The first engine of a process that asks for specdiff calls `activate`, which checks vLLM's version
    and applies the sampling patches; those act on specdiff's engines only."""
    global _gates
    if _gates:
        return
    applied: list = []
    try:
        _install_gates(applied)
    except Exception as error:  # noqa: BLE001  (vLLM itself must keep working: undo, and say so)
        for owner, name, original in reversed(applied):
            setattr(owner, name, original)
        log.warning("specdiff: its vLLM plugin could not install its gates on vLLM %s (%s: %s): specdiff's "
                    "settings are not read in this process. It is written for and tested on vllm%s (the [vllm] "
                    "extra).", vllm_version(), type(error).__name__, error, TESTED_VLLM)
        return
    _gates = True
    if cpu_repair_mode() == "always":
        activate_cpu_repair()


def vllm_version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def check_version(version: str | None = None) -> None:
    """Raise SpecdiffInstallError unless vLLM's version lies in TESTED_VLLM."""
    version = vllm_version() if version is None else version
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None or not _TESTED[0] <= (int(match[1]), int(match[2])) < _TESTED[1]:
        raise SpecdiffInstallError(
            f"specdiff's vLLM plugin is written for and tested on vllm{TESTED_VLLM} (the [vllm] extra: "
            f"pip install 'specdiff[vllm]'); this is vLLM {version}. specdiff was asked for (additional_config"
            f"[{KEY!r}], its proposer, or a request's rule), so the engine stops here rather than run every "
            f"request as Lossless. Install vllm{TESTED_VLLM}, or drop the specdiff settings.")


def requested(vllm_config) -> bool:
    """Whether an engine asks for specdiff: additional_config["specdiff"] (even {}) or specdiff's proposer."""
    additional = getattr(vllm_config, "additional_config", None)
    if isinstance(additional, dict) and additional.get(KEY) is not None:
        return True
    spec = getattr(vllm_config, "speculative_config", None)
    return spec is not None and getattr(spec, "method", None) == "custom_class" and \
        str(getattr(spec, "model", "")).startswith(PROPOSER)


def cpu_repair_mode() -> str:
    """SPECDIFF_VLLM_CPU_REPAIR: unset or "auto" -> "auto" (specdiff's engines); "1", "on", "always" -> "always"
    (every engine); "0", "off", "never" -> "never"."""
    value = os.environ.get(CPU_REPAIR_ENV, "auto").strip().lower()
    modes = {"auto": "auto", "": "auto", "1": "always", "on": "always", "always": "always", "0": "never",
             "off": "never", "never": "never"}
    if value not in modes:
        raise SpecdiffConfigError(f"{CPU_REPAIR_ENV}={value!r}: expected auto, 1 (every engine) or 0 (none)")
    return modes[value]


def _patch(owner, name: str, replacement, applied: list) -> None:
    applied.append((owner, name, owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name)))
    setattr(owner, name, replacement)


def _expect(function, names: tuple, what: str) -> inspect.Signature:
    """The signature of vLLM's `function`, which must take the parameters `names` (the hooks bind by name)."""
    signature = inspect.signature(function)
    missing = [name for name in names if name not in signature.parameters]
    if missing:
        raise SpecdiffInstallError(f"{what} has no parameter(s) {', '.join(missing)} (its signature: {signature})")
    return signature


def activate(vllm_config=None) -> None:
    """Check vLLM's version and apply the sampling patches, once per process; all or none.

    Raises SpecdiffInstallError (naming TESTED_VLLM) where the version is untested or a patch point is
    missing or changed; the patches applied before the failure are undone."""
    global _active
    check_version()
    if _active:
        return
    applied: list = []
    try:
        _install_v1(applied)
        _install_v2(applied)
        if cpu_repair_mode() != "never":
            _install_cpu_repair(applied)
    except Exception as error:  # noqa: BLE001  (whatever broke, undo and say so)
        for owner, name, original in reversed(applied):
            setattr(owner, name, original)
        if isinstance(error, SpecdiffInstallError):
            detail = str(error)
        else:
            detail = f"{type(error).__name__}: {error}"
        raise SpecdiffInstallError(
            f"specdiff's vLLM plugin could not hook vLLM {vllm_version()} ({detail}); it is written for and tested "
            f"on vllm{TESTED_VLLM} (the [vllm] extra). The engine stops here rather than run every request as "
            f"Lossless.") from error
    _patches.extend(applied)
    _active = True


def deactivate() -> None:
    """Undo the sampling patches (tests)."""
    global _active
    for owner, name, original in reversed(_patches):
        setattr(owner, name, original)
    _patches.clear()
    _active = False


def activate_cpu_repair() -> None:
    """SPECDIFF_VLLM_CPU_REPAIR=1: the CPU expand repair for every engine of this process, specdiff or not."""
    if _active:
        return
    applied: list = []
    _install_cpu_repair(applied)
    _patches.extend(applied)


# ------------------------------------------------------------------------------------------------
# the gates: engine start, workers, request checks (pass-through unless specdiff is asked for)
# ------------------------------------------------------------------------------------------------


def _install_gates(applied: list) -> None:
    """A bad `specdiff` entry, an untested vLLM or a failing patch fails at engine start
    (EngineArgs.create_engine_config, in the process that builds the engine, and WorkerBase.__init__ in
    each worker); a bad request override, or a rule asked of an engine without specdiff, fails when the
    request is added (HTTP 400 under `vllm serve`)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.input_processor import InputProcessor
    from vllm.v1.worker.worker_base import WorkerBase

    create = EngineArgs.create_engine_config

    def create_engine_config(self, *args, **kwargs):
        config = create(self, *args, **kwargs)
        if requested(config):
            check_engine(config)
            activate(config)
        return config

    _patch(EngineArgs, "create_engine_config", create_engine_config, applied)

    worker_init = WorkerBase.__init__
    worker_signature = _expect(worker_init, ("vllm_config",), "vllm.v1.worker.worker_base.WorkerBase.__init__")

    def __init__(self, *args, **kwargs):
        worker_init(self, *args, **kwargs)
        config = worker_signature.bind(self, *args, **kwargs).arguments.get("vllm_config")
        if requested(config):
            check_engine(config)
            activate(config)

    _patch(WorkerBase, "__init__", __init__, applied)

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
                override = request_override(extra_args)
                if override:
                    config = getattr(self, "vllm_config", None)
                    if not requested(config):
                        raise SpecdiffConfigError(
                            f"extra_args asks for specdiff's rule {override}, but this engine was started without "
                            f"additional_config[{KEY!r}]: start it with additional_config={{{KEY!r}: {{}}}} (vllm "
                            f"serve --additional-config '{{\"{KEY}\": {{}}}}') to take rules per request")
                    spec = config.speculative_config
                    method = "block" if spec is not None and spec.rejection_sample_method == "block" else "token"
                    check_method(request_rule(extra_args, _engine_default(config)), method, _probabilistic(config),
                                 where=f"extra_args[{KEY!r}]")
            except SpecdiffConfigError as error:
                raise SpecdiffRequestError(str(error)) from None
        return validate(self, params, *args, **kwargs)

    _patch(InputProcessor, "_validate_params", _validate_params, applied)


def check_engine(vllm_config) -> None:
    """An engine that asks for specdiff: its settings, and its rule against its verification method."""
    engine_settings(vllm_config.additional_config)
    spec = vllm_config.speculative_config
    method = "block" if spec is not None and spec.rejection_sample_method == "block" else "token"
    check_method(_engine_default(vllm_config), method, _probabilistic(vllm_config), where=f"additional_config[{KEY!r}]")


def _probabilistic(vllm_config) -> bool:
    """Whether the drafter records its draft distribution q (draft_model / EAGLE's probabilistic sampling)."""
    spec = getattr(vllm_config, "speculative_config", None)
    return spec is not None and getattr(spec, "draft_sample_method", None) == "probabilistic"


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


_defaults: dict = {}  # id(vllm_config) -> (vllm_config, its engine rule); the config is kept so its id is not reused
_requested: dict = {}  # id(vllm_config) -> (vllm_config, requested(vllm_config))
_rule_cache: dict = {}


def _engine_default(vllm_config) -> RuleSetting:
    key = id(vllm_config)
    if key not in _defaults:
        _defaults[key] = (vllm_config, engine_rule(getattr(vllm_config, "additional_config", None)))
    return _defaults[key][1]


def _is_specdiff(vllm_config) -> bool:
    key = id(vllm_config)
    if key not in _requested:
        _requested[key] = (vllm_config, requested(vllm_config))
    return _requested[key][1]


def _rule(setting: RuleSetting):
    if setting not in _rule_cache:
        _rule_cache[setting] = setting.acceptance_rule()
    return _rule_cache[setting]


def _install_cpu_repair(applied: list) -> None:
    """vLLM-CPU 0.32's stand-in for the Triton `expand_kernel` (`vllm/utils/cpu_triton_utils.py`,
    `_expand_kernel_impl`) casts its float output and input to int64 copies and never copies the
    result back: `expand_batch_to_tokens` returns uninitialised memory for the per-token temperature,
    top-p and top-k of the drafted rows, so every sampled (temperature > 0) spec-decode request on
    the CPU backend is verified against a garbage target (logits divided by ~1e-12 or 0). Where the
    CPU overrides are in force (no Triton), the plugin wraps `expand_batch_to_tokens` with the same
    expansion in torch, applied to the batches of specdiff's engines (set per batch by the V1 `_sample`
    wrapper), or to every engine's with SPECDIFF_VLLM_CPU_REPAIR=1; other engines keep vLLM's function,
    bug included (SPECDIFF_VLLM_CPU_REPAIR=0: none). On GPUs, and wherever Triton runs, vLLM's kernel is
    left alone."""
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON or not current_platform.is_cpu():
        return
    from vllm.v1.sample import rejection_sampler as v1

    original = v1.expand_batch_to_tokens
    _expect(original, ("x", "cu_num_tokens", "num_tokens", "replace_from", "replace_to"),
            "vllm.v1.sample.rejection_sampler.expand_batch_to_tokens")
    always = cpu_repair_mode() == "always"

    def repaired(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
        if always or getattr(_batch, "repair", False):
            return expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from, replace_to)
        return original(x, cu_num_tokens, num_tokens, replace_from, replace_to)

    repaired.__wrapped__ = original
    _patch(v1, "expand_batch_to_tokens", repaired, applied)


def expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
    """x [b] -> [num_tokens]: x[r] repeated for request r's tokens (cu_num_tokens [b], cumulative),
    with replace_from replaced by replace_to (vLLM's expand_batch_to_tokens, in torch)."""
    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
    expanded = torch.repeat_interleave(x, counts.to(x.device), output_size=num_tokens)
    return torch.where(expanded == replace_from, torch.full_like(expanded, replace_to), expanded)


_lenient_generators: dict = {}  # device -> torch.Generator


def lenient_generator(device) -> torch.Generator:
    """The generator of the lenient rows that have no seed of their own, one per device, seeded once from
    torch's initial seed (vLLM's engine seed): specdiff's draws never move torch's global generator, so
    that vLLM's own draws for other requests are where they would be without lenient requests."""
    device = torch.device(device)
    key = str(device)
    if key not in _lenient_generators:
        _lenient_generators[key] = torch.Generator(device).manual_seed((torch.initial_seed() + 0x5EED) % 2 ** 63)
    return _lenient_generators[key]


def _bypassed(where: str) -> SpecdiffInstallError:
    return SpecdiffInstallError(
        f"{where} ran on an engine that asks for specdiff, but vLLM's rejection sampling did not go through "
        f"specdiff's wrapped rejection_sample: the rules were not applied. specdiff's vLLM plugin is written for "
        f"and tested on vllm{TESTED_VLLM} (the [vllm] extra); this is vLLM {vllm_version()}.")


# ------------------------------------------------------------------------------------------------
# model runner V1 (CPU, and GPUs without Triton or with VLLM_USE_V2_MODEL_RUNNER=0)
# ------------------------------------------------------------------------------------------------


def _install_v1(applied: list) -> None:
    """The rules of a batch travel from `GPUModelRunner._sample` (which sees the request states) to the
    module function `rejection_sample` (which RejectionSampler.forward calls) in the thread-local
    `_batch`. `_sample` of a specdiff engine requires that the wrapped `rejection_sample` ran while they
    were set (`_batch.reached`): a vLLM that verifies another way raises SpecdiffInstallError. Calls
    outside `_sample` (vLLM's warm-up with dummy data) and every engine that does not ask for specdiff
    get vLLM's result untouched."""
    from vllm.v1.sample import rejection_sampler as v1
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    sample = GPUModelRunner._sample
    sample_signature = _expect(sample, ("logits", "spec_decode_metadata"), "GPUModelRunner._sample")

    def _sample(self, *args, **kwargs):
        spec_decode_metadata = sample_signature.bind(self, *args, **kwargs).arguments.get("spec_decode_metadata")
        if spec_decode_metadata is None or not _is_specdiff(self.vllm_config):
            return sample(self, *args, **kwargs)
        rows = []
        for req_id in self.input_batch.req_ids:
            state = self.requests.get(req_id)
            params = getattr(state, "sampling_params", None)
            rows.append(getattr(params, "extra_args", None))
        _batch.rules, _batch.method = _rules_of(self.vllm_config, rows)
        _batch.repair, _batch.reached = True, False
        try:
            output = sample(self, *args, **kwargs)
            if not _batch.reached:
                raise _bypassed("GPUModelRunner._sample")
            return output
        finally:
            _batch.rules = None
            _batch.repair = _batch.reached = False

    _patch(GPUModelRunner, "_sample", _sample, applied)

    original = v1.rejection_sample
    signature = _expect(original, ("draft_token_ids", "num_draft_tokens", "draft_probs", "target_logits",
                                   "bonus_token_ids", "sampling_metadata", "synthetic_mode"),
                        "vllm.v1.sample.rejection_sampler.rejection_sample")

    def rejection_sample(*args, **kwargs):
        output = original(*args, **kwargs)
        rules = getattr(_batch, "rules", None)
        if rules is None:
            return output  # not a specdiff engine's step (or vLLM's warm-up): vLLM's own result
        _batch.reached = True
        arguments = signature.bind(*args, **kwargs).arguments
        if all(rule is None for rule in rules) or arguments.get("synthetic_mode"):
            return output  # Lossless everywhere: vLLM's own result, untouched
        num_draft_tokens = list(arguments["num_draft_tokens"])
        sampling_metadata = arguments["sampling_metadata"]
        if sampling_metadata.all_greedy:
            greedy = torch.ones(len(num_draft_tokens), dtype=torch.bool)
        elif sampling_metadata.all_random:
            greedy = None
        else:
            greedy = (sampling_metadata.temperature == 0).cpu()
        return relaxed_rejection_sample(output, arguments["draft_token_ids"], num_draft_tokens,
                                        arguments.get("draft_probs"), arguments["target_logits"],
                                        arguments["bonus_token_ids"], rules[: len(num_draft_tokens)], greedy=greedy,
                                        method=_batch.method, generators=sampling_metadata.generators,
                                        default_generator=lenient_generator(arguments["target_logits"].device))

    rejection_sample.__wrapped__ = original
    _patch(v1, "rejection_sample", rejection_sample, applied)


# ------------------------------------------------------------------------------------------------
# model runner V2 (GPUs with Triton: vLLM's default there)
# ------------------------------------------------------------------------------------------------


def _install_v2(applied: list) -> None:
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
    init_signature = _expect(sampler_init, ("vllm_config",), "vllm.v1.worker.gpu.sample.sampler.Sampler.__init__")

    def __init__(self, *args, **kwargs):
        sampler_init(self, *args, **kwargs)
        self._specdiff_config = init_signature.bind(self, *args, **kwargs).arguments.get("vllm_config")
        self._specdiff_rules = {}

    _patch(v2_sampler.Sampler, "__init__", __init__, applied)

    add_request = v2_sampler.Sampler.add_request
    add_signature = _expect(add_request, ("req_idx", "sampling_params"), "Sampler.add_request")

    def sampler_add_request(self, *args, **kwargs):
        add_request(self, *args, **kwargs)
        arguments = add_signature.bind(self, *args, **kwargs).arguments
        record_request_rule(self, arguments["req_idx"], arguments["sampling_params"])

    _patch(v2_sampler.Sampler, "add_request", sampler_add_request, applied)

    verify = v2.RejectionSampler._verify
    verify_signature = _expect(verify, ("idx_mapping_np", "pos", "cu_num_logits"), "RejectionSampler._verify")

    def _verify(self, *args, **kwargs):
        if not _is_specdiff(_sampler_config(self.sampler)):
            return verify(self, *args, **kwargs)
        arguments = verify_signature.bind(self, *args, **kwargs).arguments
        _batch.rules, _batch.method = v2_rules(self, arguments["idx_mapping_np"])
        _batch.seeds = _v2_seeds(self.sampler, arguments["idx_mapping_np"], arguments.get("pos"),
                                 arguments.get("cu_num_logits"))
        _batch.reached = False
        try:
            output = verify(self, *args, **kwargs)
            if not _batch.reached:
                raise _bypassed("RejectionSampler._verify")
            return output
        finally:
            _batch.rules = _batch.seeds = None
            _batch.reached = False

    _patch(v2.RejectionSampler, "_verify", _verify, applied)

    original = v2.rejection_sample
    signature = _expect(original, ("target_logits", "draft_logits", "draft_sampled", "cu_num_logits", "idx_mapping",
                                   "temperature", "synthetic_conditional_rates"),
                        "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils.rejection_sample")

    def rejection_sample(*args, **kwargs):
        sampled, num_sampled = rejection_sample.__wrapped__(*args, **kwargs)
        rules = getattr(_batch, "rules", None)
        if rules is None:
            return sampled, num_sampled  # not a specdiff engine's verification: vLLM's own result
        _batch.reached = True
        arguments = signature.bind(*args, **kwargs).arguments
        if all(rule is None for rule in rules) or arguments.get("synthetic_conditional_rates") is not None:
            return sampled, num_sampled
        return _relax_v2(sampled, num_sampled, arguments["target_logits"], arguments["draft_logits"],
                         arguments["draft_sampled"], arguments["cu_num_logits"], arguments["idx_mapping"],
                         arguments["temperature"], rules, _batch.method, generators=getattr(_batch, "seeds", None))

    rejection_sample.__wrapped__ = original  # vLLM's (Triton) function, called first
    _patch(v2, "rejection_sample", rejection_sample, applied)


def _sampler_config(sampler):
    config = getattr(sampler, "_specdiff_config", None)
    if config is None:  # a Sampler built before the plugin was activated
        from vllm.config import get_current_vllm_config

        config = sampler._specdiff_config = get_current_vllm_config()
    return config


def record_request_rule(sampler, req_idx: int, sampling_params) -> None:
    """Keep the rule of the request admitted at state index req_idx on V2's Sampler (None: Lossless)."""
    config = _sampler_config(sampler)
    table = getattr(sampler, "_specdiff_rules", None)
    if table is None:
        table = sampler._specdiff_rules = {}
    if not _is_specdiff(config):
        table[int(req_idx)] = None
        return
    rules, _ = _rules_of(config, [getattr(sampling_params, "extra_args", None)])
    table[int(req_idx)] = rules[0]


def v2_rules(rejection_sampler, idx_mapping_np) -> tuple[list, str]:
    """The rule of each row of a V2 verification chunk (rows -> request state indices) and the method."""
    sampler = rejection_sampler.sampler
    table = getattr(sampler, "_specdiff_rules", None)
    method = "block" if getattr(rejection_sampler, "use_block_verification", False) else "token"
    if table is None:  # no request went through Sampler.add_request: the engine's rule for all
        rules, _ = _rules_of(_sampler_config(sampler), [None] * len(idx_mapping_np))
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
    requests', `lenient_generator` every other lenient row's. vLLM's CPU backend cannot run V2 (it
    needs Triton): tests/vllm/test_hooks_v2.py checks this on V2's real Sampler and RejectionSampler
    with a torch stand-in for the Triton kernel."""
    generators = generators or {}
    default = lenient_generator(target_logits.device)
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
