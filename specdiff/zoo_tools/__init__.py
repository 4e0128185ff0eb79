"""The zoo's evaluation tools (`specdiff zoo eval`) and the distillation data (`specdiff distill data`).

They sit above the run glue (`specdiff.runs`), which the evaluation uses to run configurations, and below
the one trainer (`specdiff.training`), whose probe scores with `evaluate` and whose distillation reads
`distill_data`'s shards. The zoo's loading core (`specdiff.zoo`: configs, tokenizer, weights) sits low, below
the loader.

- `evaluate`: Table 1 in miniature (standalone accuracy, lossless acceptance, step costs);
- `distill_data`: conversations a verifier writes and answers itself (Magpie), stored in shards;
- `uniform_diagnosis`: where the uniform drafter goes wrong, teacher-forced.
"""
