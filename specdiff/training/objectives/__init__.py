"""Training objectives, one signature: `loss = OBJECTIVES[name](model, batch, generator)` (flat functions, in the
manner of k-diffusion's). A batch is a dict of tensors and the objective's settings (`training.data` makes them);
each module's docstring names its paper and the batch keys it reads. Recipes add objectives up (the drafters'
auxiliary next-token loss: `masked_diffusion + ar_weight * next_token`). `soft.soft_loss` is no objective but
the distilled drafters' soft targets (KL, CE + TV against the verifier's distribution), which `dflash`,
`next_token` and `masked_diffusion` use when their batch sets `target`.
"""
from __future__ import annotations

from specdiff.training.objectives.dflash import dflash
from specdiff.training.objectives.masked import masked_diffusion
from specdiff.training.objectives.next_token import next_token
from specdiff.training.objectives.uniform import uniform_diffusion

OBJECTIVES = {"next_token": next_token, "masked_diffusion": masked_diffusion,
              "uniform_diffusion": uniform_diffusion, "dflash": dflash}
