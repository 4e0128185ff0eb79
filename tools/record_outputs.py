"""Seeded outputs of every shipped model at float32, recorded so that a change meant to move code and not
behaviour can be checked against them (issue 39, item 7): tests/test_recorded_outputs.py recomputes them.

    python tools/record_outputs.py            re-record tests/data/recorded_outputs.json (after a change
                                              that alters weights or defaults on purpose; say so in the commit)
    python tools/record_outputs.py --check    exit 1, naming what differs, when the committed file differs
                                              from what this code generates now
    python tools/record_outputs.py --only testbed|real   one group (the real one needs
                                              `specdiff models fetch smollm2-135m-instruct`)

What is recorded, through public entry points only (`specdiff.models.load`, `sd.SpeculativeGenerator`,
`sd.PromptLookupDrafter`), for each verifier (the testbed's `verifier`, the real `smollm2-135m-instruct`) and
each drafter shipped beside it (`specdiff models list`: the testbed's five kinds, the drafters distilled for
SmolLM2), plus the verifier alone (the model-free prompt-lookup drafter): the generated token ids of fixed
prompts in one batch (and the accepted drafted tokens of each round), in two settings:
- greedy: the verifier at temperature 0, the drafter at its defaults, the Lossless rule;
- sampled: every sampling default as `models.load` gives it, `sd.Linear(0.3)`, torch.Generator seed 0
  (the ids then depend on the drafter's weights and defaults too, not only the verifier's).
Every model runs in float32 on the CPU with one thread.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "data" / "recorded_outputs.json"

# verifier name -> (group, the drafters shipped beside it, prompts, new tokens, block size)
TESTBED_PROMPTS = [
    "There are 12 rocks in each of the 7 bags that Omar has. He uses 31 rocks. He receives 3 more rocks. "
    "How many rocks does Omar end up with?\n",
    "Mia has 45 stamps. She gives 18 stamps to her brother. How many stamps does Mia have left?\n",
]
REAL_PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "A shop sells pencils at 3 for 45 cents. How much do 12 pencils cost?"}],
]
VERIFIERS = {
    "verifier": ("testbed", ["ar-drafter", "masked-drafter", "block-drafter", "uniform-drafter", "dflash-drafter"],
                 TESTBED_PROMPTS, 24, 8),
    "smollm2-135m-instruct": ("real", ["smollm2-135m-instruct-ar", "smollm2-135m-instruct-dflash",
                                       "smollm2-135m-instruct-masked"], REAL_PROMPTS, 12, 4),
}
ALONE = "lookup"  # the verifier alone: sd.PromptLookupDrafter drafts from the prompt, no model
SETTINGS = ("greedy", "sampled")


def shipped_models() -> dict[str, str]:
    """name -> status, from `specdiff models list --json` (the public listing of what loads by name)."""
    out = subprocess.run([sys.executable, "-m", "specdiff", "models", "list", "--json"], capture_output=True,
                         text=True, check=True, cwd=ROOT)
    return {m["name"]: m["status"] for m in json.loads(out.stdout)["models"]}


def unlisted(listing: dict[str, str]) -> list[str]:
    """Models that `specdiff models list` names and this tool does not record: add them to VERIFIERS."""
    known = set(VERIFIERS) | {d for _, drafters, *_ in VERIFIERS.values() for d in drafters}
    return sorted(set(listing) - known)


def _float32(model_owner) -> None:
    import torch

    for module in {getattr(model_owner, "model", None), getattr(model_owner, "target", None)} - {None}:
        if isinstance(module, torch.nn.Module) and any(p.dtype != torch.float32 for p in module.parameters()):
            module.float()


def record_verifier(name: str, verbose: bool = False) -> dict[str, dict]:
    """{"<drafter>/<setting>": {"token_ids": per prompt, "accepted": per prompt, per round}} for one verifier
    and its shipped drafters."""
    import torch

    import specdiff as sd
    from specdiff import models

    _, drafters, prompts, new_tokens, block_size = VERIFIERS[name]
    torch.set_num_threads(1)
    tok = models.load_tokenizer(name)
    sampled = models.load(name)  # its sampling defaults
    _float32(sampled)
    verifiers = {"greedy": sd.Verifier(sampled.model, temperature=0.0), "sampled": sampled}  # one copy of the weights
    for v in verifiers.values():
        v.name = name  # the distilled drafters check whom they serve
    out = {}
    for drafter_name in [ALONE] + drafters:
        for setting in SETTINGS:
            start = time.process_time()
            verifier = verifiers[setting]
            if drafter_name == ALONE:
                drafter = sd.PromptLookupDrafter()
            else:
                drafter = models.load(drafter_name, role="drafter", verifier=verifier)
                _float32(drafter)
            rule = sd.Lossless() if setting == "greedy" else sd.Linear(0.3)
            gen = sd.SpeculativeGenerator(drafter, verifier, block_size=block_size, rule=rule, tokenizer=tok,
                                          batch_size=len(prompts))
            result = gen.generate(prompts, max_new_tokens=new_tokens, generator=torch.Generator().manual_seed(0))
            out[f"{drafter_name}/{setting}"] = {"token_ids": [list(map(int, ids)) for ids in result.token_ids],
                                                "accepted": [list(map(int, s.accepted)) for s in result.stats]}
            if verbose:
                print(f"{name} {drafter_name}/{setting}: {time.process_time() - start:.1f} s CPU", file=sys.stderr)
    return out


def available(listing: dict[str, str]) -> list[str]:
    """The verifiers whose weights are here (the real one only once fetched)."""
    return [v for v in VERIFIERS if listing.get(v, "").startswith(("shipped", "fetched"))]


def compute(only: str | None = None, listing: dict[str, str] | None = None, verbose: bool = False) -> dict[str, dict]:
    listing = shipped_models() if listing is None else listing
    return {v: record_verifier(v, verbose) for v in available(listing) if only in (None, VERIFIERS[v][0])}


def differences(recorded: dict, now: dict) -> list[str]:
    """One line per (verifier, drafter/setting) whose ids differ, or that one side lacks."""
    lines = []
    for verifier, runs in now.items():
        old = recorded.get(verifier, {})
        for key in sorted(set(old) | set(runs)):
            if old.get(key) != runs.get(key):
                lines.append(f"{verifier} {key}: recorded {old.get(key)} now {runs.get(key)}")
    return lines


def dumps(recorded: dict) -> str:
    """JSON with one line per list of ids (small diffs when a later issue re-records on purpose)."""
    lines = ["{"]
    for i, verifier in enumerate(sorted(recorded)):
        lines.append(f" {json.dumps(verifier)}: {{")
        runs = recorded[verifier]
        for j, key in enumerate(sorted(runs)):
            fields = [f'   {json.dumps(f)}: [\n' + ",\n".join(f"    {json.dumps(row)}" for row in runs[key][f]) + "\n   ]"
                      for f in sorted(runs[key])]
            lines.append(f"  {json.dumps(key)}: {{\n" + ",\n".join(fields) + "\n  }" + ("," if j < len(runs) - 1 else ""))
        lines.append(" }" + ("," if i < len(recorded) - 1 else ""))
    return "\n".join(lines) + "\n}\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed file; exit 1 if it differs")
    parser.add_argument("--only", choices=("testbed", "real"), help="one group of models")
    parser.add_argument("--out", type=Path, default=RECORD, help=f"the record (default {RECORD.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    listing = shipped_models()
    missing = unlisted(listing)
    if missing:
        print(f"not recorded by this tool: {', '.join(missing)}; add them to VERIFIERS", file=sys.stderr)
        return 1
    now = compute(args.only, listing, verbose=True)
    recorded = json.loads(args.out.read_text()) if args.out.exists() else {}
    if args.check:
        lines = differences(recorded, now)
        print("\n".join(lines) or f"{args.out}: same ({', '.join(now)})")
        return 1 if lines else 0
    recorded.update(now)  # a group not run here keeps its recorded outputs
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dumps(recorded))
    print(f"wrote {args.out}: {', '.join(f'{v} ({len(r)} runs)' for v, r in now.items())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
