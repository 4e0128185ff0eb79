"""The vLLM versions the hooks are written for, and the tools every patch point uses (imports vLLM only
to read its version).

Each patch point (`gates`, `v1`, `v2`, `cpu_repair`) checks the signature it binds against (`expect`) and
records what it replaced (`patch`), so that a failure part-way undoes everything (`undo`) and an engine
that asked for specdiff stops with `SpecdiffInstallError` rather than run every request as Lossless.
"""
from __future__ import annotations

import inspect
import re

from specdiff.integrations.vllm.settings import KEY

TESTED_VLLM = ">=0.32,<0.33"  # the vLLM versions the hooks are written for and tested on: the [vllm] extra
_TESTED = ((0, 32), (0, 33))  # [lowest, first untested) as (major, minor)


class SpecdiffInstallError(RuntimeError):
    """specdiff was asked for, but its hooks cannot be (or were not) applied to this vLLM: an untested
    version, a patch point that moved, or a verification that bypassed the hooks. Raised rather than
    letting lenient requests run as Lossless without a word."""


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


def expect(function, names: tuple, what: str) -> inspect.Signature:
    """The signature of vLLM's `function`, which must take the parameters `names` (the hooks bind by name)."""
    signature = inspect.signature(function)
    missing = [name for name in names if name not in signature.parameters]
    if missing:
        raise SpecdiffInstallError(f"{what} has no parameter(s) {', '.join(missing)} (its signature: {signature})")
    return signature


def patch(owner, name: str, replacement, applied: list) -> None:
    """Set owner.name to replacement, recording (owner, name, vLLM's original) in applied for `undo`."""
    applied.append((owner, name, owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name)))
    setattr(owner, name, replacement)


def undo(applied: list) -> None:
    """Put back, newest first, every original that `patch` recorded in applied, and empty it."""
    for owner, name, original in reversed(applied):
        setattr(owner, name, original)
    applied.clear()


def bypassed(where: str) -> SpecdiffInstallError:
    return SpecdiffInstallError(
        f"{where} ran on an engine that asks for specdiff, but vLLM's rejection sampling did not go through "
        f"specdiff's wrapped rejection_sample: the rules were not applied. specdiff's vLLM plugin is written for "
        f"and tested on vllm{TESTED_VLLM} (the [vllm] extra); this is vLLM {vllm_version()}.")
