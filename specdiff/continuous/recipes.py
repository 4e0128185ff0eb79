"""The shipped continuous models' training recipes, as data (`specdiff continuous train` and the
functions of train.py both read them, so the defaults cannot drift apart). No torch import here:
the command line reads these for its --help."""
from __future__ import annotations

# the digits UNet2DModel shipped in weights/digits_unet (velocity prediction on the rectified flow)
DENOISER_RECIPE = dict(steps=6000, batch_size=96, lr=4e-3, ema_decay=0.995, seed=0)
# the digits classifier whose features define the Frechet distance (weights/digits_classifier.safetensors)
CLASSIFIER_RECIPE = dict(epochs=60, seed=0)
