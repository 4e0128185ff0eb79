"""Bridges to other tools. Each module imports its tool at import time, so import only the one you use:

- `specdiff.integrations.lm_eval`: the lm-evaluation-harness backend (`--model specdiff`); needs the
  `lmeval` extra.
"""
