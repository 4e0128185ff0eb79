"""specdiff inside vLLM: its leniency rules in vLLM's rejection sampling, and its diffusion drafters
as a vLLM proposer. See docs/vllm.md.

- `register`: the plugin, the `vllm.general_plugins` entry point `specdiff` (pyproject.toml), which
  vLLM calls in every one of its processes. It runs `hooks.install`, which puts pass-through gates in
  place; the sampling hooks are applied (`hooks.activate`, after a check of vLLM's version) only
  when an engine asks for specdiff: `additional_config={"specdiff": {...}}` (for instance
  `{"rule": "linear", "leniency": 0.2}`) or specdiff's proposer. Requests choose their rule in
  `SamplingParams(extra_args={"specdiff": {...}})` (`settings`). Other engines run as plain vLLM.
- `DiffusionProposer`: a `speculative_config={"method": "custom_class", "model":
  "specdiff.integrations.vllm.DiffusionProposer", ...}` proposer running specdiff's masked and
  block diffusion drafters (`proposer`).

Importing this package imports neither vLLM nor a model. Its modules, bottom up: `settings` and
`sampling` (pure Python and torch, tested without vLLM); `compat` (the tested vLLM versions, the patch
tools, SpecdiffInstallError) and `state` (every piece of the plugin's mutable state, caches keyed by weak
references); the patch points `gates` (engine start, workers, requests), `v1` and `v2` (the two model
runners' rejection sampling) and `cpu_repair` (a vLLM-CPU sampling bug); `hooks` (install and activate
them); `proposer`, `serve` (`python -m specdiff.integrations.vllm.serve`), and `bench_engines`, `arrivals` and
`bench` (`specdiff bench vllm`).
"""
from __future__ import annotations


def register() -> None:
    """vLLM's general-plugin entry point: install the pass-through gates in this process (idempotent); the
    sampling hooks follow when an engine asks for specdiff (`hooks.activate`)."""
    from specdiff.integrations.vllm.hooks import install

    install()


def __getattr__(name):
    if name == "DiffusionProposer":
        from specdiff.integrations.vllm.proposer import DiffusionProposer

        return DiffusionProposer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["register", "DiffusionProposer"]
