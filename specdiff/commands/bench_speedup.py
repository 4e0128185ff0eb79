"""`specdiff bench speedup`: speculative diffusion against plain and assisted decoding (placeholder)."""
from __future__ import annotations


def register(targets) -> None:
    speedup = targets.add_parser("speedup", help="speculative diffusion vs plain, HF and HF-assisted decoding (JSON)")
    speedup.set_defaults(handler=lambda args: 0)
