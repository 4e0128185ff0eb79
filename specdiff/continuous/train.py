"""Training scripts for the shipped continuous models (run by `specdiff continuous train`).

- the digits denoiser: diffusers UNet2DModel, velocity prediction on the rectified flow
  x_t = (1 - t) x0 + t z, v = z - x0, t ~ U(0, 1), on scikit-learn's 8x8 digits scaled to [-1, 1];
- the digits classifier whose penultimate features define the Frechet distance (metrics.py).

The data and the classifier's architecture live in digits.py, so that the metric needs no training code.

Both are resumable (a checkpoint every `save_every` steps) and show a progress bar.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from specdiff.continuous.digits import DigitsClassifier, load_digits
from specdiff.continuous.models import digits_unet_config
from specdiff.continuous.recipes import CLASSIFIER_RECIPE, DENOISER_RECIPE

__all__ = ["train_denoiser", "train_classifier", "load_digits", "DigitsClassifier", "RUN_WEIGHTS"]

# where training writes by default: a run directory, never the shipped weights/ (models.WEIGHTS_DIR)
RUN_WEIGHTS = Path("runs") / "continuous" / "weights"


def _save_unet(unet, path: Path) -> None:
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(digits_unet_config(), indent=1))
    save_file({k: v.contiguous() for k, v in unet.state_dict().items()}, str(path / "model.safetensors"))


def train_denoiser(
    out_dir: Path | str = RUN_WEIGHTS / "digits_unet",
    steps: int = DENOISER_RECIPE["steps"],
    batch_size: int = DENOISER_RECIPE["batch_size"],
    lr: float = DENOISER_RECIPE["lr"],
    ema_decay: float = DENOISER_RECIPE["ema_decay"],
    seed: int = DENOISER_RECIPE["seed"],
    save_every: int = 500,
    checkpoint: Path | str | None = None,
) -> Path:
    """Flow-matching training of the digits UNet2DModel; writes EMA weights to out_dir. The defaults
    are the shipped recipe (recipes.DENOISER_RECIPE); out_dir defaults to a run directory."""
    from diffusers import UNet2DModel

    from specdiff.progress import progress

    for name, value in (("steps", steps), ("batch_size", batch_size), ("save_every", save_every)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"train_denoiser: {name} must be an integer >= 1, got {value!r}")

    torch.manual_seed(seed)
    out_dir = Path(out_dir)
    checkpoint = Path(checkpoint) if checkpoint else out_dir.parent / "digits_unet_checkpoint.pt"
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    images, _ = load_digits("all")
    unet = UNet2DModel(**digits_unet_config())
    ema = copy.deepcopy(unet).requires_grad_(False)
    optimizer = torch.optim.AdamW(unet.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps, pct_start=0.05)
    start = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        unet.load_state_dict(state["unet"]), ema.load_state_dict(state["ema"])
        optimizer.load_state_dict(state["optimizer"]), schedule.load_state_dict(state["schedule"])
        torch.set_rng_state(state["rng"])
        start = state["step"]
    bar = progress(range(start, steps), initial=start, total=steps, desc="digits UNet", leave=True, mininterval=30)
    for step in bar:
        x0 = images[torch.randint(0, images.shape[0], (batch_size,))]
        t = torch.rand(batch_size)
        z = torch.randn_like(x0)
        x_t = (1 - t.view(-1, 1, 1, 1)) * x0 + t.view(-1, 1, 1, 1) * z
        loss = F.mse_loss(unet(x_t, 1000.0 * t).sample, z - x0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        with torch.no_grad():
            for p_ema, p in zip(ema.parameters(), unet.parameters()):
                p_ema.lerp_(p, 1 - ema_decay)
        bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
        if (step + 1) % save_every == 0 or step + 1 == steps:
            torch.save(
                dict(unet=unet.state_dict(), ema=ema.state_dict(), optimizer=optimizer.state_dict(),
                     schedule=schedule.state_dict(), rng=torch.get_rng_state(), step=step + 1),
                checkpoint,
            )
            _save_unet(ema, out_dir)
    return out_dir


def train_classifier(
    out_path: Path | str = RUN_WEIGHTS / "digits_classifier.safetensors",
    epochs: int = CLASSIFIER_RECIPE["epochs"],
    seed: int = CLASSIFIER_RECIPE["seed"],
) -> dict:
    """Train on the first 1500 digits (with small noise and shift augmentation); report test accuracy."""
    from safetensors.torch import save_file

    from specdiff.progress import progress

    torch.manual_seed(seed)
    train_x, train_y = load_digits("train")
    test_x, test_y = load_digits("test")
    model = DigitsClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    for _ in progress(range(epochs), desc="digits classifier", leave=True):
        order = torch.randperm(train_x.shape[0])
        for batch in order.split(128):
            x = train_x[batch]
            x = torch.roll(x, shifts=tuple(torch.randint(-1, 2, (2,)).tolist()), dims=(2, 3))
            x = x + 0.1 * torch.randn_like(x)
            loss = F.cross_entropy(model(x), train_y[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(test_x).argmax(-1) == test_y).float().mean().item()
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    save_file(model.state_dict(), str(out_path))
    return {"test_accuracy": accuracy, "path": str(out_path)}
