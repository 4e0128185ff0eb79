"""One trainer for every model specdiff trains: the testbed (`specdiff zoo train NAME`, `training.zoo`) and a
user's verifier's distilled drafters (`specdiff distill`, `training.distill`).

- `loop.fit`: the one loop (AdamW, the schedule, gradient clipping, atomic checkpoint and resume, progress bar);
- `schedule`: warmup + cosine to a floor, per stage (the floor and where the decay starts are recipe settings);
- `checkpoint`: the checkpoint format (and the two older ones, still resumed);
- `objectives`: `OBJECTIVES[name](model, batch, generator) -> loss`: next_token, masked_diffusion (one loss for
  the testbed's masked and block drafters and the distilled masked drafter), uniform_diffusion, dflash;
- `data`: batches from the testbed's problems and from `specdiff distill data`'s conversations;
- `build`: fresh models of every recipe.

It sits above `zoo_tools` (the evaluation probe and the distillation data's shards) and below `commands`.
"""
