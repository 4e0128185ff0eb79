#!/bin/bash
# The default sweep of docs/results/frontier: three stores, the calibration, the frontiers and the reports.
# Resumable: rerun it after a kill and it skips finished rows. Writes each step's seconds to stderr.
#   bash docs/results/frontier/run.sh            (from the repository root, with specdiff installed)
set -euo pipefail
cd "$(dirname "$0")/../../.."
results=docs/results/frontier
for name in masked_linear masked_cactus block_linear dflash_linear; do
  start=$(date +%s)
  specdiff sweep $results/$name.toml --store $results/$name.sqlite --json > $results/$name.sweep.json
  echo "sweep $name: $(( $(date +%s) - start )) s" >&2
done
start=$(date +%s)
specdiff calibrate --store $results/masked_linear.sqlite --costs sweep --json > $results/calibration.json
echo "calibrate: $(( $(date +%s) - start )) s" >&2
for name in masked_linear masked_cactus block_linear dflash_linear; do
  specdiff frontier $results/$name.sqlite --json > $results/$name.frontier.json
  specdiff report $results/$name.sqlite --out $results/$name.report.html
done
