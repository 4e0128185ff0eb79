"""Models loaded once per process, wrapped afresh per configuration.

`ModelCache.get(name, role, **options)` returns a `Verifier` or a drafter around a model that is
loaded only on first use (`specdiff.models`), so a sweep over many configurations of the same pair
reads each checkpoint once; wrappers copy nothing. `quiet_transformers` silences transformers'
per-model loading bars between a command's own progress bars.
"""
from __future__ import annotations

import json

from specdiff.zoo import distilled


class ModelCache:
    """Loads each model and tokenizer once per process; wrappers (Verifier, drafters) are rebuilt
    around the loaded model for every set of options, which copies nothing."""

    def __init__(self, device: str | None = None):
        self.models, self.tokenizers, self.device = {}, {}, device

    def get(self, name: str, role: str, **options):
        from specdiff import models

        if role == "drafter":
            if name == models.LOOKUP:  # no model to load; its n-gram knobs are its only options
                from specdiff.runs.kinds import LOOKUP_KEYS

                return models.load(name, role="drafter", **{k: v for k, v in options.items() if k in LOOKUP_KEYS})
            folder = distilled.folder(name)
            if folder is not None:  # distilled for a real verifier: built once around the verifier's shared weights
                verifier = options.pop("verifier")
                if ("distilled", name) not in self.models:
                    self.models[("distilled", name)] = distilled.build(folder, verifier.model,
                                                                       getattr(verifier, "name", None))
                return models.wrap_distilled(self.models[("distilled", name)], verifier, **options)
            name = models.DRAFTER_KINDS.get(name, name)  # "masked", "ar", ...: the zoo model of that kind
        wrapped = models.wrap(*self._loaded(name), self.tokenizer(name), role, **options)
        if role == "verifier":
            wrapped.name = name  # named in a distilled drafter's refusal
        return wrapped

    def kind(self, name: str) -> str:
        """The engine's kind of drafter `name` (masked, block, uniform, dflash, ar), from its config."""
        from specdiff import models
        from specdiff.runs.kinds import KIND_OF_LOADER

        if name == models.LOOKUP:
            return models.LOOKUP
        folder = distilled.folder(name)
        if folder is not None:
            return distilled.ROLES[json.loads((folder / "config.json").read_text())["specdiff_role"]]
        config = self._loaded(models.DRAFTER_KINDS.get(name, name))[1]
        return KIND_OF_LOADER[models.drafter_kind(config)]

    def _loaded(self, name: str):
        """(model, config, sampling defaults) of a zoo name or path, loaded once."""
        from specdiff import models

        if name not in self.models:
            model, *rest = models.load_model(name)
            if self.device is not None:
                model = model.to(self.device)
            self.models[name] = (model, *rest)
        return self.models[name]

    def tokenizer(self, name: str):
        from specdiff import models

        if name == models.LOOKUP or distilled.folder(name) is not None:
            return None  # it drafts the verifier's own ids (a distilled drafter: the verifier's tokenizer)
        name = models.DRAFTER_KINDS.get(name, name)
        if name not in self.tokenizers:
            self.tokenizers[name] = models.load_tokenizer(name)
        return self.tokenizers[name]


def quiet_transformers() -> None:
    """No per-model 'Loading weights' bars between the command's own progress bars."""
    from transformers.utils import logging

    logging.disable_progress_bar()
