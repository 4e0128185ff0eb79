"""Where the plugin enters vLLM 0.32: who is patched, and when (`specdiff.integrations.vllm.register`
calls `install`).

- `install` (the plugin's entry point, in every vLLM process) puts only pass-through gates in place
  (`gates`): an engine that does not ask for specdiff (no `additional_config["specdiff"]`, no specdiff
  proposer) runs exactly as vLLM without the plugin, the CPU repair included, unless
  SPECDIFF_VLLM_CPU_REPAIR=1 asks for the repair everywhere (`cpu_repair`);
- `activate` (the first engine of a process that asks for specdiff) checks vLLM's version (`compat`:
  TESTED_VLLM, the [vllm] extra's range) and applies every sampling patch, V1's (`v1`), V2's (`v2`) and
  the CPU repair, each binding vLLM's arguments by name against the signature it checks first; anything
  missing undoes what was applied and raises SpecdiffInstallError, so that a lenient config never runs as
  Lossless without a word;
- the sampling patches act on specdiff's engines only (per engine, read from its VllmConfig: `state`), and
  a specdiff engine's step that does not reach the wrapped `rejection_sample` raises.

The plugin wraps vLLM's two acceptance points, `rejection_sample` of model runner V1 and of V2 (their
docstrings say why those). Rows whose rule is Lossless are returned exactly as vLLM sampled them; the
other rows are verified again, from the same p, q and drafted tokens, by `specdiff.verify`
(`sampling.relaxed_rejection_sample`), which overwrites their output.
"""
from __future__ import annotations

import logging

from specdiff.integrations.vllm import state
from specdiff.integrations.vllm.compat import TESTED_VLLM, SpecdiffInstallError, check_version, undo, vllm_version
from specdiff.integrations.vllm.cpu_repair import CPU_REPAIR_ENV, cpu_repair_mode, expand_batch_to_tokens, \
    install_cpu_repair
from specdiff.integrations.vllm.gates import check_engine, install_gates
from specdiff.integrations.vllm.state import PLUGIN, PROPOSER, lenient_generator, requested
from specdiff.integrations.vllm.v1 import install_v1
from specdiff.integrations.vllm.v2 import install_v2, record_request_rule, relax_v2, v2_rules

log = logging.getLogger("specdiff.integrations.vllm")


def install() -> None:
    """The plugin's entry (vLLM loads general plugins in each of its processes): install the gates only,
    once per process. Where they cannot be installed, vLLM keeps working as without the plugin, and a
    warning says so."""
    if PLUGIN.gates:
        return
    applied: list = []
    try:
        install_gates(applied, activate)
    except Exception as error:  # noqa: BLE001  (vLLM itself must keep working: undo, and say so)
        undo(applied)
        log.warning("specdiff: its vLLM plugin could not install its gates on vLLM %s (%s: %s): specdiff's "
                    "settings are not read in this process. It is written for and tested on vllm%s (the [vllm] "
                    "extra).", vllm_version(), type(error).__name__, error, TESTED_VLLM)
        return
    PLUGIN.gates = True
    if cpu_repair_mode() == "always":
        activate_cpu_repair()


def activate(vllm_config=None) -> None:
    """Check vLLM's version and apply the sampling patches, once per process; all or none.

    Raises SpecdiffInstallError (naming TESTED_VLLM) where the version is untested or a patch point is
    missing or changed; the patches applied before the failure are undone."""
    check_version()
    if PLUGIN.active:
        return
    applied: list = []
    try:
        install_v1(applied)
        install_v2(applied)
        if cpu_repair_mode() != "never" and not PLUGIN.repaired:
            install_cpu_repair(applied)
    except Exception as error:  # noqa: BLE001  (whatever broke, undo and say so)
        undo(applied)
        detail = str(error) if isinstance(error, SpecdiffInstallError) else f"{type(error).__name__}: {error}"
        raise SpecdiffInstallError(
            f"specdiff's vLLM plugin could not hook vLLM {vllm_version()} ({detail}); it is written for and tested "
            f"on vllm{TESTED_VLLM} (the [vllm] extra). The engine stops here rather than run every request as "
            f"Lossless.") from error
    PLUGIN.patches.extend(applied)
    PLUGIN.active = PLUGIN.repaired = True


def deactivate() -> None:
    """Undo the sampling patches (tests)."""
    undo(PLUGIN.patches)
    PLUGIN.active = PLUGIN.repaired = False


def activate_cpu_repair() -> None:
    """SPECDIFF_VLLM_CPU_REPAIR=1: the CPU expand repair for every engine of this process, specdiff or not."""
    if PLUGIN.repaired:
        return
    applied: list = []
    install_cpu_repair(applied)
    PLUGIN.patches.extend(applied)
    PLUGIN.repaired = True


def installed() -> bool:
    """Whether the gates are in place in this process."""
    return PLUGIN.gates


def active() -> bool:
    """Whether the sampling patches are in place in this process."""
    return PLUGIN.active


__all__ = ["CPU_REPAIR_ENV", "PROPOSER", "TESTED_VLLM", "SpecdiffInstallError", "activate", "activate_cpu_repair",
           "active", "check_engine", "check_version", "cpu_repair_mode", "deactivate", "expand_batch_to_tokens",
           "install", "installed", "lenient_generator", "record_request_rule", "relax_v2", "requested", "state",
           "v2_rules", "vllm_version"]
