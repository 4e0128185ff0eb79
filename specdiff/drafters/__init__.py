"""Drafters: propose blocks of tokens for the verifier (the contract is in `base`)."""
from specdiff.drafters.base import Draft, Drafter, filter_logits

__all__ = ["Draft", "Drafter", "filter_logits"]
