"""Samples of the continuous half written to disk: an image grid of any pipeline's images
(`save_image_grid`), and samples as the path's suffix says (`save_samples`: a titled .png grid of digits,
.npy, or .npz with key "samples")."""
from __future__ import annotations


def save_image_grid(images, path: str, columns: int = 8, padding: int = 2) -> str:
    """images [n, C, H, W] in [-1, 1] (C = 1 or 3; else the first channel) as one PNG, a pixel per pixel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    images = (images.detach().float().cpu() / 2 + 0.5).clamp(0, 1)
    if images.shape[1] not in (1, 3):
        images = images[:, :1]
    n, channels, height, width = images.shape
    cols = min(columns, n)
    rows = -(-n // cols)
    grid = torch.ones(channels, rows * (height + padding) + padding, cols * (width + padding) + padding)
    for i, image in enumerate(images):
        top, left = padding + (i // cols) * (height + padding), padding + (i % cols) * (width + padding)
        grid[:, top:top + height, left:left + width] = image
    array = grid.permute(1, 2, 0).numpy()
    plt.imsave(path, array[..., 0] if channels == 1 else array, cmap="gray" if channels == 1 else None, vmin=0, vmax=1)
    return path


def save_samples(samples, path, model, title: str | None = None) -> str:
    """Writes samples [n, d] to `path` as the suffix says (.png grid titled `title`, .npy array, .npz
    with key "samples"); returns the path written, which is `path` itself (numpy appends nothing)."""
    import numpy as np

    if path.lower().endswith(".png") and model == "digits":
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        images = samples.reshape(-1, 8, 8).clamp(-1, 1).numpy()
        cols = min(8, images.shape[0])
        rows = -(-images.shape[0] // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(max(cols, 4), rows + 0.6), squeeze=False)
        for ax in axes.flat:
            ax.axis("off")
        for ax, image in zip(axes.flat, images):
            ax.imshow(image, cmap="gray_r", vmin=-1, vmax=1)
        if title:
            fig.suptitle(title, fontsize=8)
        fig.savefig(path, dpi=80)
        plt.close(fig)
    elif path.lower().endswith(".npy"):
        np.save(path, samples.numpy())
    elif path.lower().endswith(".npz"):
        np.savez(path, samples=samples.numpy())
    else:
        raise ValueError(f"cannot write samples to {path!r}: use .npz, .npy or .png")
    return path
