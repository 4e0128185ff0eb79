"""The plugin's gates: pass-through wrappers at engine start, worker start and request checks (imports
vLLM when installed). The plugin's entry point installs only these (`hooks.install`).

`EngineArgs.create_engine_config` (engine start, in the process that builds the engine) and
`WorkerBase.__init__` (every worker, V1 and V2, CPU and GPU) read the engine's VllmConfig: where it asks for
specdiff (`state.requested`: `additional_config["specdiff"]`, even {}, or specdiff's proposer), they check
its settings against its verification method (`check_engine`) and call `activate` (given by `hooks`: the
version check and the sampling patches), so that a bad `specdiff` entry, an untested vLLM or a failing
patch fails at engine start. `InputProcessor._validate_params` checks each request's override, and refuses
a request that names a rule on an engine without specdiff rather than run it as Lossless (a
SpecdiffRequestError: a ValueError, and to `vllm serve` an HTTP 400). Where nothing asks for specdiff they
change nothing.
"""
from __future__ import annotations

from specdiff.integrations.vllm import state
from specdiff.integrations.vllm.compat import expect, patch
from specdiff.integrations.vllm.settings import KEY, SpecdiffConfigError, check_method, engine_settings, \
    request_override, request_rule


def install_gates(applied: list, activate) -> None:
    """Wrap the three gates; `activate(vllm_config)` runs where an engine asks for specdiff."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.engine.input_processor import InputProcessor
    from vllm.v1.worker.worker_base import WorkerBase

    create = EngineArgs.create_engine_config

    def create_engine_config(self, *args, **kwargs):
        config = create(self, *args, **kwargs)
        if state.requested(config):
            check_engine(config)
            activate(config)
        return config

    patch(EngineArgs, "create_engine_config", create_engine_config, applied)

    worker_init = WorkerBase.__init__
    worker_signature = expect(worker_init, ("vllm_config",), "vllm.v1.worker.worker_base.WorkerBase.__init__")

    def __init__(self, *args, **kwargs):
        worker_init(self, *args, **kwargs)
        config = worker_signature.bind(self, *args, **kwargs).arguments.get("vllm_config")
        if state.requested(config):
            check_engine(config)
            activate(config)

    patch(WorkerBase, "__init__", __init__, applied)

    class SpecdiffRequestError(SpecdiffConfigError, VLLMValidationError):
        """A bad override in a request's extra_args: a ValueError, and to vLLM's server a 400."""

        def __init__(self, message):
            VLLMValidationError.__init__(self, message, parameter="extra_args")

    validate = InputProcessor._validate_params

    def _validate_params(self, params, *args, **kwargs):
        extra_args = getattr(params, "extra_args", None)
        if extra_args:
            try:
                check_request(getattr(self, "vllm_config", None), extra_args)
            except SpecdiffConfigError as error:
                raise SpecdiffRequestError(str(error)) from None
        return validate(self, params, *args, **kwargs)

    patch(InputProcessor, "_validate_params", _validate_params, applied)


def check_engine(vllm_config) -> None:
    """An engine that asks for specdiff: its settings, and its rule against its verification method."""
    engine_settings(vllm_config.additional_config)
    check_method(state.engine_default(vllm_config), state.verification_method(vllm_config),
                 state.probabilistic(vllm_config), where=f"additional_config[{KEY!r}]")


def check_request(vllm_config, extra_args) -> None:
    """A request's override (SpecdiffConfigError if bad), and that its engine takes rules per request."""
    override = request_override(extra_args)
    if not override:
        return
    if not state.requested(vllm_config):
        raise SpecdiffConfigError(
            f"extra_args asks for specdiff's rule {override}, but this engine was started without "
            f"additional_config[{KEY!r}]: start it with additional_config={{{KEY!r}: {{}}}} (vllm "
            f"serve --additional-config '{{\"{KEY}\": {{}}}}') to take rules per request")
    check_method(request_rule(extra_args, state.engine_default(vllm_config)), state.verification_method(vllm_config),
                 state.probabilistic(vllm_config), where=f"extra_args[{KEY!r}]")
