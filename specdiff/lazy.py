"""Module-level __getattr__ that imports a package's public names on first use (PEP 562)."""
from __future__ import annotations

import importlib


def lazy_exports(namespace: dict, public: dict[str, str]):
    """A __getattr__ for a package whose names live in submodules: name -> module path.

    The first access imports the submodule and caches the name in the package's namespace,
    so importing the package (and `specdiff --help`) does not import torch.
    """

    def __getattr__(name: str):
        if name not in public:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(public[name]), name)
        namespace[name] = value
        return value

    return __getattr__
