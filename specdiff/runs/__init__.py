"""Run glue: configurations by name, run on the engine with models loaded once.

Layer 6, above the engine (3), the zoo's loading core (4) and the loader `specdiff.models` (5: `ModelRef`,
`ModelCache`, each model loaded once per process); the commands, the integrations and the zoo's training and
evaluation tools use it.

- `config`: `RunConfig`, rules by name (`RULES`, `make_rule`), a RunConfig from the generation flags;
- `loop`: `build_generator` and `run_config`, the run loop over task problems, and `merge_results`
  (one configuration's results over several chunks of problems, as one);
- `kinds`: the drafter kinds (masked, block, uniform, dflash, ar) and their effort knobs.
- the commands' library (issue 39): `sweep_config` and `sweep` (a sweep's config and its run into a store),
  `call_costs`, `calibrate` (the throughput model against a sweep), `evaluate` (one configuration on a
  task), `routing` and `route_fit` (routers), `streaming` (generate --stream), `rules_demo` and
  `rules_demo_plot` (demo --rules), `demo`.
"""
from specdiff.runs.config import RULES, RunConfig, make_rule
from specdiff.runs.loop import build_generator, merge_results, run_config

__all__ = ["RULES", "RunConfig", "make_rule", "build_generator", "merge_results", "run_config"]
