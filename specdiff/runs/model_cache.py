"""`ModelCache` lives in `specdiff.models` (one place turns names into models); kept here for old imports.
`quiet_transformers` silences transformers' per-model loading bars between a command's own progress bars."""
from __future__ import annotations

from specdiff.models import ModelCache  # noqa: F401  (re-exported)


def quiet_transformers() -> None:
    """No per-model 'Loading weights' bars between the command's own progress bars."""
    from transformers.utils import logging

    logging.disable_progress_bar()
