"""Drafters: propose blocks of tokens for the verifier (the contract is in `base`; the kinds in `registry`).

Importing the package registers every built-in kind (each module registers its own `KindSpec`)."""
from specdiff.drafters.base import Draft, Drafter, filter_logits
from specdiff.drafters import autoregressive, block, datastore, dflash, hybrid, lookup, masked, uniform  # noqa: F401

__all__ = ["Draft", "Drafter", "filter_logits"]
