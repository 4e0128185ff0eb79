"""`specdiff zoo`: list, train and evaluate the shipped testbed models."""
from __future__ import annotations

import argparse
import json

from specdiff.argtypes import output_dir, positive_int


def register(subparsers) -> None:
    """Adds `zoo` with `list`, `train NAME` and `eval` to the `specdiff` command."""
    from specdiff.zoo.configs import TRAINABLE

    zoo = subparsers.add_parser("zoo", help="the shipped testbed models: list, train, eval",
                                description="The shipped testbed: tokenizer and tiny verifier / drafter models "
                                            "for the arith task (see docs/testbed.md).")
    zoo_sub = zoo.add_subparsers(dest="zoo_command", metavar="ZOO_COMMAND")
    zoo.set_defaults(handler=lambda args: (zoo.print_help(), 0)[1])

    listing = zoo_sub.add_parser("list", help="list the shipped models", description="List the shipped models.")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=run_list)

    train = zoo_sub.add_parser("train", help="train a model from its config and seed",
                               description="Train a zoo model from its config and seed, resuming from "
                                           "RUN_DIR/checkpoint.pt; writes config.json + model.safetensors to "
                                           "RUN_DIR/model (default RUN_DIR: runs/zoo/NAME). The shipped weights "
                                           "are replaced only with --replace-shipped.")
    train.add_argument("name", choices=TRAINABLE)
    train.add_argument("--steps", type=positive_int, default=None, help="override the number of steps (>= 1)")
    train.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    train.add_argument("--run-dir", type=output_dir, default=None, help="checkpoint dir (default runs/zoo/NAME)")
    where = train.add_mutually_exclusive_group()
    where.add_argument("--out", type=output_dir, default=None, help="output dir (default: RUN_DIR/model)")
    where.add_argument("--replace-shipped", action="store_true",
                       help="write into the folder that `zoo.load` reads (the shipped weights, or SPECDIFF_ZOO_DIR)")
    train.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    train.add_argument("--probe-every", type=positive_int, default=400,
                       help="steps between validation probes (default 400)")
    train.set_defaults(handler=run_train)

    evaluate = zoo_sub.add_parser("eval", help="accuracy, size and speed on arith test problems",
                                  description="Standalone accuracy of each model on the first N arith test "
                                              "problems at its default sampling settings, parameters, mean "
                                              "answer tokens and ms per step; for the block, uniform and DFlash "
                                              "drafters (when trained) standalone accuracy per effort and "
                                              "lossless tokens per round with the verifier.")
    evaluate.add_argument("--models", nargs="+", choices=TRAINABLE, default=None,
                          help="default: every model whose weights are in the zoo folder")
    evaluate.add_argument("-n", type=positive_int, default=500, help="number of test problems (default 500)")
    evaluate.add_argument("--seed", type=int, default=0)
    evaluate.add_argument("--threads", type=positive_int, default=2)
    evaluate.add_argument("--speed-only", action="store_true", help="only params and ms per step (no generation)")
    evaluate.add_argument("--repeats", type=positive_int, default=30, help="timed calls per model (median reported)")
    evaluate.add_argument("--json", action="store_true", help="print JSON")
    evaluate.set_defaults(handler=run_eval)


STATUS_NOTE = {
    "shipped": "shipped",
    "modified": "MODIFIED (not the committed weights; `git checkout specdiff/zoo/models` restores them)",
    "missing": "missing",
    "unrecorded": "no checksum recorded",
}


def run_list(args: argparse.Namespace) -> int:
    from specdiff import manifest
    from specdiff.zoo import MANIFEST, MODELS_DIR, configs, model_dir

    rows = {}
    for name in configs.MODEL_NAMES:
        path = model_dir(name) / "model.safetensors"
        status = manifest.status(MANIFEST, MODELS_DIR, f"{name}/model.safetensors")
        rows[name] = {"architecture": configs.MODEL_CLASSES.get(name, "Qwen3ForCausalLM"),
                      "objective": configs.TRAINING[name]["objective"],
                      **configs.ARCHITECTURES[name], "shipped": status == "shipped", "status": status,
                      "path": str(path), "bytes": path.stat().st_size if path.exists() else 0}
    if args.json:
        print(json.dumps({"models": rows}, indent=1))
    else:
        for name, row in rows.items():
            print(f"{name:15s} {row['objective']:7s} hidden={row['hidden_size']} layers={row['num_hidden_layers']} "
                  f"{row['bytes'] / 1e6:.2f} MB {STATUS_NOTE[row['status']]}")
    return 0


def run_train(args: argparse.Namespace) -> int:
    from specdiff.zoo import model_dir
    from specdiff.training.zoo import train

    out = model_dir(args.name) if args.replace_shipped else args.out
    train(args.name, run_dir=args.run_dir, out_dir=out, steps=args.steps, threads=args.threads,
          resume=not args.fresh, probe_every=args.probe_every)
    if args.replace_shipped:
        print(f"replaced the weights of {args.name} in {out}: `specdiff zoo list` shows them as modified until "
              "specdiff/zoo/models/manifest.json records their checksum (specdiff.manifest.record)")
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from specdiff.zoo_tools.evaluate import evaluate

    if args.models:
        from specdiff.models import require_weights

        for name in args.models:
            require_weights(name)
    results = evaluate(args.models, n=args.n, seed=args.seed, threads=args.threads, progress=not args.json,
                       quality=not args.speed_only, repeats=args.repeats)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print(f"{'model':15s} {'accuracy':>9s} {'params':>9s} {'answer tok':>10s} {'ms/step':>8s}  lossless")
        for name, row in results["models"].items():
            print(f"{name:15s} {row.get('accuracy', float('nan')):9.3f} {row['params']:9d} "
                  f"{row.get('mean_answer_tokens', float('nan')):10.1f} {row.get('ms_per_step', float('nan')):8.2f}  "
                  f"{_lossless_note(row.get('lossless'))}")
            for effort, standalone in row.get("standalone", {}).items():
                print(f"  standalone {effort}: {standalone['accuracy']:.3f} ± {standalone['stderr']:.3f}")
        if "speed" in results:
            print(f"masked step / verifier round: {results['speed']['masked_step_over_verifier_round']:.3f}")
    return 0


def _lossless_note(lossless: dict | None) -> str:
    if lossless is None:
        return ""
    return f"{lossless['tokens_per_round']:.2f} tokens/round ({lossless['effort']}, B={lossless['block']})"
