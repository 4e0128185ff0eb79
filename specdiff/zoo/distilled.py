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

DISTILLED_DIR = Path(os.environ.get("SPECDIFF_DISTILLED_DIR", Path(__file__).parent / "distilled"))
ROLES = {"distilled-dflash": "dflash", "distilled-ar": "ar", "distilled-masked": "masked"}


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


def folder(name_or_path: str) -> Path | None:
    """The folder of a shipped name or of a local distilled drafter; None when it is neither."""
    for path in (DISTILLED_DIR / str(name_or_path), Path(name_or_path)):
        config = path / "config.json"
        if config.is_file() and json.loads(config.read_text()).get("specdiff_role") in ROLES:
            return path
    return None


def fingerprint(model) -> str:
    """A verifier's identity: sha256 over its shape and a sample of its embedding rows (float32 bytes)."""
    config = model.config.get_text_config()
    embed = model.get_input_embeddings().weight.detach()
    rows = embed[:: max(1, embed.shape[0] // 64)][:64].float().contiguous()
    digest = hashlib.sha256(f"{config.vocab_size}/{config.hidden_size}/{config.num_hidden_layers}".encode())
    digest.update(rows.numpy().tobytes())
    return digest.hexdigest()[:16]


def build(path: Path, target, target_name: str | None = None):
    """(model, config dict, draft_to_target tensor or None): the drafter in `path` completed with the shared
    weights of `target` (a causal LM). Refuses a target it was not trained for, naming both."""
    import torch
    import transformers
    from safetensors.torch import load_file

    config = json.loads((Path(path) / "config.json").read_text())
    trained_for, expected = config.get("specdiff_target"), config.get("specdiff_target_fingerprint")
    if expected is not None and fingerprint(target) != expected:
        raise WrongVerifier(f"the drafter {Path(path).name} was trained for the verifier {trained_for!r}, not for "
                            f"{target_name or 'this verifier'!r} (its weights differ): distill one for it with "
                            f"`specdiff distill --verifier {target_name or 'VERIFIER'} --kind "
                            f"{ROLES[config['specdiff_role']]} --out DIR`")
    weights = load_file(str(Path(path) / "model.safetensors"))
    kind = ROLES[config["specdiff_role"]]
    settings = {k: v for k, v in config.items() if not k.startswith("specdiff_") and k != "model_type"}
    model_config = transformers.AutoConfig.for_model(config["model_type"], **settings)
    model_config.specdiff_anchor_state = bool(config.get("specdiff_anchor_state", False))  # read by DFlashDrafter
    d2t = None
    if kind in ("dflash", "masked"):
        d2t = torch.tensor(json.loads((Path(path) / "draft_vocab.json").read_text())["draft_to_target"])
    if kind == "dflash":
        model = transformers.MuseGlimmerAssistantModel(model_config)
    elif kind == "masked":  # embed(x) = E[x] P, head = E[d2t] P (training.build)
        model = transformers.Qwen3ForCausalLM(model_config)
        model.lm_head = torch.nn.Linear(model_config.hidden_size, len(d2t), bias=False)
        embeddings = target.get_input_embeddings().weight.detach().float().cpu()
        projection = weights.pop("specdiff_projection").float()
        weights["model.embed_tokens.weight"] = embeddings @ projection  # [V, d]
        weights["lm_head.weight"] = embeddings[d2t] @ projection  # [V_d, d]
    else:
        model = transformers.AutoModelForCausalLM.from_config(model_config)
        weights["model.embed_tokens.weight"] = target.get_input_embeddings().weight.detach()
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in weights.items()}, strict=False)
    missing = [m for m in missing if not (kind == "ar" and m == "lm_head.weight")]  # tied to the embeddings
    if missing or unexpected:
        raise ValueError(f"{path}: the weights do not match the config (missing {missing[:3]}, unexpected "
                         f"{unexpected[:3]})")
    if kind == "ar":
        model.tie_weights()
    return model.float().to(target.device).eval(), config, d2t
