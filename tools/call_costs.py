"""Per-call costs of a verifier and a drafter, measured once on this machine (`specdiff.runs.call_costs`):
forwards over 1 to 128 tokens, interleaved medians, fitted as ms = per_forward + per_token * n. Prints the
JSON that `specdiff frontier --cost calls --costs FILE` and `specdiff.eval.pricing` read.

    python tools/call_costs.py --drafter masked-drafter --repeats 21 > docs/results/leniency/call_costs_masked.json
    python tools/call_costs.py --drafter block-drafter --repeats 21 > docs/results/leniency/call_costs_block.json

(`specdiff frontier STORE --cost calls` measures the same costs itself when its store has none, and keeps them
in the store; this script writes them to a file, so that several stores are priced alike.)
"""
from __future__ import annotations

import argparse
import json


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verifier", default="verifier")
    parser.add_argument("--drafter", default=None)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    from specdiff.runs.call_costs import measure_call_costs

    print(json.dumps(measure_call_costs(args.verifier, args.drafter, repeats=args.repeats, threads=args.threads),
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
