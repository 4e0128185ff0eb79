"""A quick look at the new leniency rules on validation problems (issue 22): accuracy and tokens per round
of the masked drafter, K steps (argv[1], default 4), B = 16, 80 arith validation problems, batch 1.

    PYTHONPATH=. python scripts/leniency_probe.py 4

Not the held-out measurement (that is the sweeps under docs/results/leniency/, when they exist)."""
import sys, json, torch
from specdiff.eval import tasks
from specdiff.runs import ModelCache, RunConfig, run_config
from specdiff.runs.model_cache import quiet_transformers
quiet_transformers(); torch.set_num_threads(1)
problems = tasks.arith_problems("validation", 80)
prompts, targets = [p.prompt for p in problems], [p.target for p in problems]
cache = ModelCache()
K = int(sys.argv[1]) if len(sys.argv) > 1 else 4
base = dict(drafter="masked-drafter", steps=K, block_size=16)
configs = [
  RunConfig("lossless", **base),
  RunConfig("linear0.1", **base, rule="linear", leniency=0.1),
  RunConfig("gated linear0.3 top<=0.7", **base, rule="linear", leniency=0.3, gate_top=0.7),
  RunConfig("gated linear1 top<=0.5", **base, rule="linear", leniency=1.0, gate_top=0.5),
  RunConfig("typical0.09", **base, rule="typical", leniency=0.09),
  RunConfig("typical0.3", **base, rule="typical", leniency=0.3),
  RunConfig("lossless untrunc", **base, support="untruncated"),
  RunConfig("cactus2 untrunc", **base, rule="cactus", leniency=2.0, support="untruncated"),
  RunConfig("gated cactus8 untrunc H>=0.5", **base, rule="cactus", leniency=8.0, support="untruncated", gate_entropy=0.5),
  RunConfig("typical0.09 untrunc", **base, rule="typical", leniency=0.09, support="untruncated"),
]
run_config(configs[0], prompts[:2], targets[:2], cache, 96, is_correct=tasks.is_correct)
for c in configs:
    r = run_config(c, prompts, targets, cache, 96, seed=0, is_correct=tasks.is_correct)
    print(json.dumps({k: round(r[k], 3) if isinstance(r[k], float) else r[k] for k in ("config", "accuracy", "tokens_per_round", "acceptance_rate", "tokens_per_s")}), flush=True)
