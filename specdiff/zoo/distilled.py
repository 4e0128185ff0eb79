"""Drafters that specdiff distilled for a real verifier (issue 31): the shipped ones and those a user trains.

A distilled drafter's folder (`specdiff distill --out DIR`, or `DISTILLED_DIR/<verifier>-<kind>`) holds:
- config.json: the model's transformers config plus `specdiff_role` ("distilled-dflash" | "distilled-ar" |
  "distilled-masked"),
  `specdiff_target` (the verifier's name) and `specdiff_target_fingerprint` (`fingerprint`);
- model.safetensors: the trained weights only, float16. Weights equal to the verifier's (its embeddings, and
  for DFlash its LM head) are not stored: `build` takes them from the verifier at load time (the masked
  drafter's tables are the verifier's embeddings times its trained projection, `specdiff_projection`:
  `specdiff.training.build`);
- draft_vocab.json (DFlash, masked): `draft_to_target`, the verifier id of each row of the drafter's head (d2t).

The shipped weights' sha256 are in `DISTILLED_DIR/manifest.json` (`specdiff.manifest`);
`SPECDIFF_DISTILLED_DIR` points `DISTILLED_DIR` at another folder of `<verifier>-<kind>/` drafters.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from specdiff.drafters import registry

DISTILLED_DIR = Path(os.environ.get("SPECDIFF_DISTILLED_DIR", Path(__file__).parent / "distilled"))


def roles() -> dict[str, str]:
    """specdiff_role of a distilled drafter -> its kind name ("distilled-dflash" -> "dflash")."""
    return {spec.distilled_role: spec.name for spec in registry.specs() if spec.distilled_role}


class WrongVerifier(ValueError):
    """A distilled drafter given a verifier it was not trained for."""


def names() -> list[str]:
    """The shipped distilled drafters ("smollm2-135m-instruct-dflash", ...)."""
    if not DISTILLED_DIR.is_dir():
        return []
    return sorted(p.name for p in DISTILLED_DIR.iterdir() if (p / "config.json").is_file())


def shipped_for(verifier: str, kind: str) -> str | None:
    """The shipped drafter of `kind` ("dflash", "ar") for a verifier name, if there is one."""
    name = f"{verifier}-{kind}"
    return name if name in names() else None


def default_for(verifier: str) -> dict | None:
    """A real verifier's recorded default drafter (`DISTILLED_DIR/default_drafters.json`, written by
    tools/default_drafter.py from a `bench tune` run on its validation prompts): drafter, block_size, extra, the
    figures it was chosen by; None when none is recorded."""
    path = DISTILLED_DIR / "default_drafters.json"
    return json.loads(path.read_text()).get(str(verifier)) if path.is_file() else None


def folder(name_or_path: str) -> Path | None:
    """The folder of a shipped name or of a local distilled drafter; None when it is neither."""
    for path in (DISTILLED_DIR / str(name_or_path), Path(name_or_path)):
        config = path / "config.json"
        if config.is_file() and json.loads(config.read_text()).get("specdiff_role") in roles():
            return path
    return None


def fingerprint(model, legacy: bool = False) -> str:
    """A verifier's identity, the same in every dtype it runs in: sha256 over its shape and a sample of its
    embedding rows rounded to bfloat16 (so float32 and bfloat16 copies of one checkpoint agree). legacy: the
    first version's float32 bytes (drafters distilled before issue 41 recorded that; checked in float32 only)."""
    import torch

    config = model.config.get_text_config()
    embed = model.get_input_embeddings().weight.detach()
    rows = embed[:: max(1, embed.shape[0] // 64)][:64].float()
    rows = (rows if legacy else rows.to(torch.bfloat16).float()).contiguous().cpu()
    digest = hashlib.sha256(f"{config.vocab_size}/{config.hidden_size}/{config.num_hidden_layers}".encode())
    digest.update(rows.numpy().tobytes())
    return digest.hexdigest()[:16]


def _fits(target, expected: str) -> bool:
    embed = target.get_input_embeddings().weight
    return fingerprint(target) == expected or (embed.dtype == _float32() and fingerprint(target, legacy=True) == expected)


def _float32():
    import torch

    return torch.float32


def build(path: Path, target, target_name: str | None = None):
    """(model, config dict, draft_to_target tensor or None): the drafter in `path` completed with the shared
    weights of `target` (a causal LM). Refuses a target it was not trained for, naming both."""
    import torch
    import transformers
    from safetensors.torch import load_file

    config = json.loads((Path(path) / "config.json").read_text())
    trained_for, expected = config.get("specdiff_target"), config.get("specdiff_target_fingerprint")
    if expected is not None and not _fits(target, expected):
        given = "a different checkpoint under the same name" if target_name == trained_for else repr(
            target_name or "this verifier")
        raise WrongVerifier(f"the drafter {Path(path).name} was trained for the verifier {trained_for!r}, not for "
                            f"{given} (its weights differ): distill one for it with "
                            f"`specdiff distill --verifier {target_name or 'VERIFIER'} --kind "
                            f"{registry.by_distilled_role(config['specdiff_role']).name} --out DIR`")
    weights = load_file(str(Path(path) / "model.safetensors"))
    spec = registry.by_distilled_role(config["specdiff_role"])
    settings = {k: v for k, v in config.items() if not k.startswith("specdiff_") and k != "model_type"}
    model_config = transformers.AutoConfig.for_model(config["model_type"], **settings)
    model_config.specdiff_anchor_state = bool(config.get("specdiff_anchor_state", False))  # read by DFlashDrafter
    model_config.specdiff_trained_widths = config.get("specdiff_trained_widths")  # None: its block_size alone
    vocab_file = Path(path) / "draft_vocab.json"
    d2t = torch.tensor(json.loads(vocab_file.read_text())["draft_to_target"]) if vocab_file.is_file() else None
    model, shared = spec.distilled_model(model_config, weights, target, d2t)  # the verifier's shared weights set
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in weights.items()}, strict=False)
    missing = [m for m in missing if m not in shared]
    if missing or unexpected:
        raise ValueError(f"{path}: the weights do not match the config (missing {missing[:3]}, unexpected "
                         f"{unexpected[:3]})")
    spec.finish_distilled(model)
    dtype = target.get_input_embeddings().weight.dtype  # drafters follow their verifier's dtype
    return model.to(device=target.device, dtype=dtype).eval(), config, d2t
