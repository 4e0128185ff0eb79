"""The zoo's training and evaluation tools (`specdiff zoo train`, `specdiff zoo eval`).

They sit above the run glue (`specdiff.runs`), which the evaluation uses to run configurations; the
zoo's loading core (`specdiff.zoo`: configs, tokenizer, weights) sits low, below the loader.

- `train`: the training loops of the testbed models (resumable, checkpointed, probed);
- `drafter_objectives`: the block, uniform and DFlash drafters' models and losses;
- `evaluate`: Table 1 in miniature (standalone accuracy, lossless acceptance, step costs).
"""
