"""Counts the imports that climb the layers of docs/architecture.md (Layout) in a specdiff source tree.

    python tools/import_climbs.py [--root DIR] [--list]

A climb is an import (at module level or inside a function; TYPE_CHECKING-only imports excluded) from
a module in a lower layer of a module in a higher one. Layers, bottom up, by top-level name:
1 the discrete core and lm, 2 drafters, 3 engine, 4 zoo (loading core), 5 models, 6 runs,
7 zoo_tools, 8 commands and integrations. A module is placed by where it lives in that tree, so in
an old tree `zoo/train.py` counts as the zoo and `engine/runs.py` as the engine. Also counted: imports
across the two halves (continuous <-> discrete) and from eval/ into any feature package. Prints JSON.
Run it on an old commit with `git worktree add /tmp/old COMMIT && python tools/import_climbs.py --root /tmp/old`.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

RANK = {"acceptance": 1, "distributions": 1, "verify": 1, "theory": 1, "lm": 1, "drafters": 2, "engine": 3,
        "zoo": 4, "models": 5, "runs": 6, "zoo_tools": 7, "commands": 8, "integrations": 8}
DISCRETE = set(RANK) - {"commands"}  # the commands sit above both halves
FEATURES = DISCRETE | {"continuous"}

_GRAPH = """
import json, grimp
graph = grimp.build_graph("specdiff", include_external_packages=False, exclude_type_checking_imports=True)
edges = sorted({(m, i) for m in graph.modules for i in graph.find_modules_directly_imported_by(m)})
print(json.dumps(edges))
"""


def climbs(root: str) -> dict:
    """The climbing and crossing imports of the specdiff package under `root`."""
    out = subprocess.run([sys.executable, "-c", _GRAPH], cwd=root, capture_output=True, text=True, check=True)
    edges = json.loads(out.stdout)

    def top(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else ""

    up = [(a, b) for a, b in edges if top(a) in RANK and top(b) in RANK and RANK[top(a)] < RANK[top(b)]]
    across = [(a, b) for a, b in edges if (top(a) == "continuous" and top(b) in DISCRETE)
              or (top(a) in DISCRETE and top(b) == "continuous")]
    from_eval = [(a, b) for a, b in edges if top(a) == "eval" and top(b) in FEATURES]
    return {"root": root, "imports": len(edges), "climbs": len(up), "across_halves": len(across),
            "eval_into_features": len(from_eval), "climb_list": up, "across_list": across, "eval_list": from_eval}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=".", help="a specdiff checkout (default: here)")
    parser.add_argument("--list", action="store_true", help="also list the imports")
    args = parser.parse_args()
    result = climbs(args.root)
    if not args.list:
        result = {k: v for k, v in result.items() if not k.endswith("_list")}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
