"""Ships a finished `specdiff distill` folder as a named distilled drafter (maintainers only): copies its
config.json, model.safetensors, draft_vocab.json (DFlash, masked) and training.json into
specdiff/zoo/distilled/NAME and records the weights' and index's sha256 in the manifest there.

    python tools/ship_distilled.py runs/distill/dflash smollm2-135m-instruct-dflash
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from specdiff import manifest
from specdiff.zoo import distilled

FILES = ("config.json", "model.safetensors", "draft_vocab.json", "training.json")
BUDGET_BYTES = 28 * 1000 * 1000  # every weight shipped for one real verifier together (issue 40; 20 MB in issue 31)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run")
    parser.add_argument("name")
    args = parser.parse_args()
    run, target = Path(args.run), distilled.DISTILLED_DIR / args.name
    config = json.loads((run / "config.json").read_text())
    if not args.name.startswith(config["specdiff_target"] + "-"):
        raise SystemExit(f"{args.name} must start with the verifier's name {config['specdiff_target']}-")
    target.mkdir(parents=True, exist_ok=True)
    recorded = []
    for name in FILES:
        if (run / name).is_file():
            shutil.copyfile(run / name, target / name)
            if name in ("model.safetensors", "draft_vocab.json"):
                recorded.append(f"{args.name}/{name}")
    manifest.record(distilled.DISTILLED_DIR / manifest.MANIFEST_NAME, distilled.DISTILLED_DIR, recorded)
    verifier = config["specdiff_target"]
    total = sum((distilled.DISTILLED_DIR / n / "model.safetensors").stat().st_size
                for n in distilled.names() if n.startswith(verifier + "-"))
    print(json.dumps({"shipped": args.name, "files": recorded, f"bytes_for_{verifier}": total,
                      "within_budget": total <= BUDGET_BYTES}))


if __name__ == "__main__":
    main()
