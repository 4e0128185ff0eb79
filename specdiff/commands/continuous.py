"""`specdiff continuous ...`: sample, bench, train, eval. Heavy imports live inside the handlers; the run glue
is `specdiff.continuous.runs`, the files written `specdiff.continuous.images`."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdiff.argtypes import nonnegative_int, output_dir, output_file, positive_float, positive_int, unit_interval

METHOD_CHOICES = ("ddpm", "R", "D", "B")
SAMPLE_SUFFIXES = (".npz", ".npy", ".png")
DIFFUSERS_GRID = "diffusers_samples.png"  # `sample --diffusers` writes its grid here unless --out says otherwise
RUN_DIR = Path("runs") / "continuous"  # `continuous train` writes here unless told to replace the shipped weights
NO_SPECULATION = ("churn 0 turns speculation off: every step is deterministic (sigma = 0), so nothing is drafted "
                  "or verified and R, D and B all run as DDPM")


def fd_samples(text: str) -> int:
    """--fd-samples: 0 (no Frechet distance) or a batch of at least 2 (a covariance needs two)."""
    value = nonnegative_int(text)
    if value == 1:
        raise argparse.ArgumentTypeError("must be 0 (no Frechet distance) or >= 2, got '1'")
    return value


def at_least_two(text: str) -> int:
    """A sample count for statistics: two-sample tests and a Frechet distance need at least 2."""
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be an integer >= 2, got {text!r}")
    return value


def pipeline_dir(text: str) -> str:
    """--diffusers: a local directory holding a pipeline's model_index.json (nothing is downloaded)."""
    if not (Path(text) / "model_index.json").is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a saved diffusers pipeline (no model_index.json in it); "
                                         "save one with pipeline.save_pretrained(PATH)")
    return text


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "continuous",
        help="continuous speculative diffusion (second paper): sample, bench, train, eval",
        description="Speculative DDPM with reflection/decomposition residuals and sample/block verification.",
    )
    sub = parser.add_subparsers(dest="continuous_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=lambda args: (parser.print_help(), 0)[1])

    def common(p):
        p.add_argument("--model", choices=("digits", "gmm2d", "gmm64d"), default="digits", help="target model")
        p.add_argument("--steps", type=positive_int, default=250, help="denoising steps K")
        p.add_argument("--churn", type=unit_interval, default=0.5,
                       help="churn epsilon in [0, 1] (0 turns speculation off)")
        p.add_argument("--gamma", type=positive_int, default=7, help="draft length")
        p.add_argument("--drafter", choices=("free", "frozen"), default="free")
        p.add_argument("--temperature", type=positive_float, default=1.0, help="omega (Appendix I); != 1 is lossy")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--threads", type=positive_int, default=1, help="torch threads")
        p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("sample", help="draw samples with DDPM or R/D/B and print statistics")
    common(p)
    p.add_argument("--method", choices=METHOD_CHOICES, default="B", help="ddpm, or R/D/B of Table 1")
    p.add_argument("--num-samples", type=positive_int, default=16)
    p.add_argument("--out", type=output_file(*SAMPLE_SUFFIXES),
                   help="write samples (.npz: key 'samples'; .npy: the array) or an image grid (.png: digits or "
                        f"--diffusers; default {DIFFUSERS_GRID} with --diffusers)")
    p.add_argument("--diffusers", type=pipeline_dir, metavar="PATH",
                   help="instead of --model: a diffusers pipeline saved with save_pretrained (DDPMPipeline, "
                        "DDIMPipeline, or a latent one with a VQModel or AutoencoderKL); churn 1 is its own "
                        "scheduler's step (DDIM's eta = churn)")
    p.set_defaults(handler=_sample)

    p = sub.add_parser("eval", help="exactness (two-sample tests vs DDPM) and Frechet distance of R/D/B")
    common(p)
    p.add_argument("--num-samples", type=at_least_two, default=2000)
    p.set_defaults(handler=_eval)

    p = sub.add_parser("bench", help="Table 2 (and, with --drafters free frozen, Table 4) analog on the digits model: "
                                     "speedup, block efficiency, FD")
    p.add_argument("--quick", action="store_true", help="K in {50, 100, 250} and FD batches of 128")
    p.add_argument("--steps", type=positive_int, nargs="+", default=None,
                   help="K values (default 50 100 250 500 1000)")
    p.add_argument("--churns", type=unit_interval, nargs="+", default=[0.25, 0.5], help="churns in [0, 1]")
    p.add_argument("--gamma", type=positive_int, default=7)
    p.add_argument("--drafters", choices=("free", "frozen"), nargs="+", default=["free"],
                   help="drafters to bench, each on the whole grid (default free; 'free frozen' adds the second "
                        "paper's Table 4, Proposition 3.4 and its corollary; the paper's Table 4 is at --churns 1.0)")
    p.add_argument("--num-timing", type=positive_int, default=50, help="single samples timed per method (median)")
    p.add_argument("--fd-samples", type=fd_samples, default=None,
                   help="batch size for the Frechet distance (default 256; 0: none)")
    p.add_argument("--fd-steps", type=positive_int, nargs="+", default=[250],
                   help="K values that get a Frechet distance (default 250, where the FD target is; each FD "
                        "unit is a large batch of every method, e.g. ~2.5 min at K = 250 on one core)")
    p.add_argument("--ddpm-fd-seeds", type=positive_int, default=3, help="DDPM FD runs, for its spread")
    p.add_argument("--timing-parts", type=positive_int, default=2, help="timing units per K (they run in parallel)")
    p.add_argument("--model-call", choices=("eager", "traced"), default="eager",
                   help="timed samples call the UNet eagerly (stock diffusers) or through a TorchScript trace")
    p.add_argument("--workers", type=positive_int, default=None, help="worker processes (default: one per core)")
    p.add_argument("--executor", choices=("process", "ray"), default="process",
                   help="run units in local processes or as Ray tasks (pip install 'specdiff[sweep]')")
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads per worker")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--weights", help="digits UNet directory (default: shipped)")
    p.add_argument("--db", type=output_file(), default=None,
                   help="SQLite file of finished units (default runs/continuous_bench.sqlite)")
    p.add_argument("--fresh", action="store_true", help="forget this configuration's finished units first")
    p.add_argument("--out-json", type=output_file(), help="also write the JSON here")
    p.add_argument("--plot", type=output_file(".png", ".pdf", ".svg"), help="write the speedup-vs-steps PNG here")
    p.add_argument("--markdown", type=output_file(), help="write the rows as a markdown table here")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_bench)

    from specdiff.continuous.recipes import DENOISER_RECIPE

    p = sub.add_parser("train", help="train the digits denoiser and/or FD classifier (into a run directory)",
                       description="Train the digits denoiser and/or the FD classifier. Writes RUN_DIR/weights "
                                   "(default RUN_DIR: runs/continuous); the shipped weights are replaced only "
                                   "with --replace-shipped.")
    p.add_argument("what", choices=("denoiser", "classifier", "all"), nargs="?", default="all")
    p.add_argument("--steps", type=positive_int, default=DENOISER_RECIPE["steps"])
    p.add_argument("--batch-size", type=positive_int, default=DENOISER_RECIPE["batch_size"])
    p.add_argument("--lr", type=positive_float, default=DENOISER_RECIPE["lr"])
    p.add_argument("--ema-decay", type=unit_interval, default=DENOISER_RECIPE["ema_decay"])
    p.add_argument("--run-dir", type=output_dir, default=None, help=f"default {RUN_DIR}")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out-dir", type=output_dir, help="where the weights go (default: RUN_DIR/weights)")
    where.add_argument("--replace-shipped", action="store_true", help="write into the package's weights/ folder")
    p.add_argument("--checkpoint", type=output_file(), default=None,
                   help="resumable training state (default RUN_DIR/digits_unet_checkpoint.pt)")
    p.add_argument("--threads", type=positive_int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(handler=_train)

    p = sub.add_parser("weights", help="the shipped weights and whether the files match the committed checksums",
                       description="List the shipped continuous weights: shipped (the committed checksum), "
                                   "modified (retrained or replaced) or missing.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_weights)


def _warn_no_speculation(churns) -> None:
    if any(churn == 0 for churn in churns):
        print(f"specdiff continuous: warning: {NO_SPECULATION}", file=sys.stderr)


def _print(args, payload):
    if args.json:
        print(json.dumps(payload, indent=1))
    else:
        for key, value in payload.items():
            print(f"{key}: {value}")


def _sample(args) -> int:
    if args.diffusers:
        return _sample_diffusers(args)
    if args.out and args.out.lower().endswith(".png") and args.model != "digits":
        raise ValueError(f"--out {args.out}: a .png grid needs --model digits or --diffusers; write .npz or .npy")
    import torch

    from specdiff.continuous import images, runs

    _warn_no_speculation([args.churn])
    torch.set_num_threads(args.threads)
    target = runs.make_target(args.model, args.steps, args.churn)
    samples, stats = runs.draw(target, args.method, args.num_samples, args.seed, args.drafter, args.gamma,
                               args.temperature, torch.float32 if args.model == "digits" else torch.float64)
    payload = {"model": args.model, "method": args.method, **stats.summary()}
    if args.out:
        title = (f"{args.model}: method {args.method}, K = {args.steps}, churn {args.churn}, gamma {args.gamma}, "
                 f"seed {args.seed}")
        payload["out"] = images.save_samples(samples, args.out, args.model, title)
    _print(args, payload)
    return 0


def _sample_diffusers(args) -> int:
    """`sample --diffusers PATH`: a user's saved pipeline, sampled with a progress bar (the slowest row's
    step), its samples decoded (latent pipelines) and written as an image grid."""
    import dataclasses

    import torch

    from specdiff.continuous import images, runs
    from specdiff.progress import progress

    _warn_no_speculation([args.churn])
    torch.set_num_threads(args.threads)
    target = runs.make_target(args.model, args.steps, args.churn, args.diffusers)
    out = args.out or DIFFUSERS_GRID
    with progress(total=target.schedule.num_steps, desc=f"{args.method}, slowest row's step", unit="step",
                  enabled=not args.json) as bar:
        watched = dataclasses.replace(target, denoiser=runs.StepProgress(target.denoiser, bar))
        samples, stats = runs.draw(watched, args.method, args.num_samples, args.seed, args.drafter, args.gamma,
                                   args.temperature, target.denoiser.unet.dtype)
        bar.update(bar.total - bar.n)
    payload = {"diffusers": args.diffusers, "method": args.method, **stats.summary()}
    if out.lower().endswith(".png"):
        payload["out"] = images.save_image_grid(target.decode(samples), out)
    else:
        payload["out"] = images.save_samples(samples, out, "diffusers")
    _print(args, payload)
    return 0


def _eval(args) -> int:
    import torch

    from specdiff.continuous.runs import evaluate

    _warn_no_speculation([args.churn])
    torch.set_num_threads(args.threads)
    payload = evaluate(args.model, args.steps, args.churn, args.num_samples, args.seed, args.drafter, args.gamma,
                       args.temperature)
    if args.json:
        print(json.dumps(payload, indent=1))
    else:
        print(eval_table(payload), end="")
    return 0


def eval_table(payload: dict) -> str:
    """`continuous eval`'s result as text: one line of settings, then one row per method.

    block efficiency: mean states accepted per target call; min p-value: the smallest two-sample
    p-value of the method's samples against DDPM's over random 1-D projections (exact methods stay
    well above 0.01); FD: Frechet distance on the digits classifier's features (digits only).
    """
    head = (f"{payload['model']}, K = {payload['steps']}, churn {payload['churn']}, "
            f"{payload['num_samples']} samples per method")
    if "ddpm_fd" in payload:
        head += f"; DDPM FD {payload['ddpm_fd']:.3f}"
    lines = [head, f"{'method':<8}{'block efficiency':>18}{'min p-value vs DDPM':>22}" + (f"{'FD':>10}" if "ddpm_fd" in payload else "")]
    for method, entry in payload["methods"].items():
        line = f"{method:<8}{entry['block_efficiency']:>18.3f}{entry['min_projection_pvalue_vs_ddpm']:>22.4f}"
        if "fd" in entry:
            line += f"{entry['fd']:>10.3f}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _bench(args) -> int:
    from pathlib import Path

    from specdiff.continuous.bench import DEFAULT_DB, markdown_table, plot_speedup, run_bench, write_json

    _warn_no_speculation(args.churns)
    steps = args.steps or ([50, 100, 250] if args.quick else [50, 100, 250, 500, 1000])
    fd_samples = args.fd_samples if args.fd_samples is not None else (128 if args.quick else 256)

    def report(unit, result):
        if not args.json:
            print(f"{unit.key}: {result['unit_seconds']:.0f} s", file=sys.stderr, flush=True)

    result = run_bench(
        steps=steps, churns=args.churns, draft_length=args.gamma, num_timing=args.num_timing,
        fd_samples=fd_samples, fd_steps=args.fd_steps, ddpm_fd_seeds=args.ddpm_fd_seeds,
        model_call=args.model_call, workers=args.workers, threads=args.threads, seed=args.seed,
        weights=args.weights, db=args.db or DEFAULT_DB, fresh=args.fresh, executor=args.executor,
        progress=not args.json, on_unit=report, timing_parts=args.timing_parts, drafters=args.drafters,
    )
    if args.out_json:
        write_json(result, args.out_json)
    if args.plot:
        plot_speedup(result, args.plot)
    if args.markdown:
        Path(args.markdown).write_text(markdown_table(result))
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(markdown_table(result), end="")
        print(json.dumps({"wall_seconds": result["wall_seconds"], "units": result["units"],
                          "targets_at_K250": result["targets_at_K250"]}, indent=1))
    return 0


def _train(args) -> int:
    import torch

    from specdiff.continuous.models import WEIGHTS_DIR
    from specdiff.continuous.train import train_classifier, train_denoiser

    torch.set_num_threads(args.threads)
    run_dir = Path(args.run_dir) if args.run_dir else RUN_DIR
    out = WEIGHTS_DIR if args.replace_shipped else Path(args.out_dir) if args.out_dir else run_dir / "weights"
    checkpoint = Path(args.checkpoint) if args.checkpoint else run_dir / "digits_unet_checkpoint.pt"
    report = {}
    if args.what in ("classifier", "all"):
        report["classifier"] = train_classifier(out / "digits_classifier.safetensors", seed=args.seed)
    if args.what in ("denoiser", "all"):
        path = train_denoiser(out / "digits_unet", steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                              ema_decay=args.ema_decay, seed=args.seed, checkpoint=checkpoint)
        report["denoiser"] = str(path)
    if args.replace_shipped:
        report["note"] = ("replaced the shipped weights: `specdiff continuous weights` shows them as modified until "
                          "specdiff/continuous/weights/manifest.json records their checksum (specdiff.manifest.record)")
    print(json.dumps(report, indent=1))
    return 0


def _weights(args) -> int:
    from specdiff import manifest
    from specdiff.continuous.models import WEIGHTS_DIR

    rows = {}
    for name in manifest.read(WEIGHTS_DIR / manifest.MANIFEST_NAME):
        rows[name] = {"status": manifest.status(WEIGHTS_DIR / manifest.MANIFEST_NAME, WEIGHTS_DIR, name),
                      "path": str(WEIGHTS_DIR / name)}
    if args.json:
        print(json.dumps({"weights": rows}, indent=1))
    else:
        for name, row in rows.items():
            print(f"{name:32s} {row['status']}")
    return 0
