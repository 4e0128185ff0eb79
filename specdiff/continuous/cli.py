"""`specdiff continuous ...`: sample, bench, train, eval. Heavy imports live inside the handlers."""
from __future__ import annotations

import argparse
import json
import sys

METHOD_CHOICES = ("ddpm", "R", "D", "B")


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
        p.add_argument("--steps", type=int, default=250, help="denoising steps K")
        p.add_argument("--churn", type=float, default=0.5, help="churn epsilon in [0, 1]")
        p.add_argument("--gamma", type=int, default=7, help="draft length")
        p.add_argument("--drafter", choices=("free", "frozen"), default="free")
        p.add_argument("--temperature", type=float, default=1.0, help="omega (Appendix I); != 1 is lossy")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--threads", type=int, default=1, help="torch threads")
        p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("sample", help="draw samples with DDPM or R/D/B and print statistics")
    common(p)
    p.add_argument("--method", choices=METHOD_CHOICES, default="B", help="ddpm, or R/D/B of Table 1")
    p.add_argument("--num-samples", type=int, default=16)
    p.add_argument("--out", help="write samples (.npz) or a digit grid (.png)")
    p.set_defaults(handler=_sample)

    p = sub.add_parser("eval", help="exactness (two-sample tests vs DDPM) and Frechet distance of R/D/B")
    common(p)
    p.add_argument("--num-samples", type=int, default=2000)
    p.set_defaults(handler=_eval)

    p = sub.add_parser("bench", help="Table 2 analog on the digits model: speedup, block efficiency, FD")
    p.add_argument("--quick", action="store_true", help="K in {50, 100, 250} and FD batches of 128")
    p.add_argument("--steps", type=int, nargs="+", default=None, help="K values (default 50 100 250 500 1000)")
    p.add_argument("--churns", type=float, nargs="+", default=[0.25, 0.5])
    p.add_argument("--gamma", type=int, default=7)
    p.add_argument("--num-timing", type=int, default=50, help="single samples timed per method (median)")
    p.add_argument("--fd-samples", type=int, default=None, help="batch size for the Frechet distance (default 256)")
    p.add_argument("--fd-steps", type=int, nargs="+", default=[250],
                   help="K values that get a Frechet distance (default 250, where the FD target is; each FD "
                        "unit is a large batch of every method, e.g. ~2.5 min at K = 250 on one core)")
    p.add_argument("--ddpm-fd-seeds", type=int, default=3, help="DDPM FD runs, for its spread")
    p.add_argument("--timing-parts", type=int, default=2, help="timing units per K (they run in parallel)")
    p.add_argument("--model-call", choices=("eager", "traced"), default="eager",
                   help="timed samples call the UNet eagerly (stock diffusers) or through a TorchScript trace")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: one per core)")
    p.add_argument("--executor", choices=("process", "ray"), default="process",
                   help="run units in local processes or as Ray tasks (pip install 'specdiff[sweep]')")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--weights", help="digits UNet directory (default: shipped)")
    p.add_argument("--db", default=None, help="SQLite file of finished units (default runs/continuous_bench.sqlite)")
    p.add_argument("--fresh", action="store_true", help="forget this configuration's finished units first")
    p.add_argument("--out-json", help="also write the JSON here")
    p.add_argument("--plot", help="write the speedup-vs-steps PNG here")
    p.add_argument("--markdown", help="write the rows as a markdown table here")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_bench)

    p = sub.add_parser("train", help="train the shipped digits denoiser and/or FD classifier")
    p.add_argument("what", choices=("denoiser", "classifier", "all"), nargs="?", default="all")
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument("--batch-size", type=int, default=96)
    p.add_argument("--lr", type=float, default=4e-3)
    p.add_argument("--ema-decay", type=float, default=0.995)
    p.add_argument("--out-dir", help="default: the package's weights/ directory")
    p.add_argument("--checkpoint", default="digits_unet_checkpoint.pt", help="resumable training state")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(handler=_train)


def _target(args, steps=None):
    import torch

    from specdiff.continuous.models import Target, gaussian_mixture_2d, gaussian_mixture_64d, load_digits_target
    from specdiff.continuous.schedules import rectified_flow_schedule

    torch.set_num_threads(args.threads)
    steps = steps or args.steps
    if args.model == "digits":
        return load_digits_target(steps, args.churn)
    mixture = gaussian_mixture_2d() if args.model == "gmm2d" else gaussian_mixture_64d()
    return Target(rectified_flow_schedule(steps, args.churn), mixture, mixture.dim)


def _run(args, target, method, num_samples, seed_offset=0):
    import torch

    from specdiff.continuous.bench import METHODS
    from specdiff.continuous.sampler import SpeculativeSampler, ddpm_sample, initial_noise

    dtype = torch.float32 if args.model == "digits" else torch.float64
    noise = initial_noise(num_samples, target.dim, torch.Generator().manual_seed(args.seed + seed_offset), dtype)
    generator = torch.Generator().manual_seed(args.seed + 1 + seed_offset)
    if method == "ddpm":
        return ddpm_sample(target, noise, generator)
    sampler = SpeculativeSampler(target, args.drafter, args.gamma, *METHODS[method], temperature=args.temperature)
    return sampler.sample(noise, generator)


def _print(args, payload):
    if args.json:
        print(json.dumps(payload, indent=1))
    else:
        for key, value in payload.items():
            print(f"{key}: {value}")


def _sample(args) -> int:
    target = _target(args)
    samples, stats = _run(args, target, args.method, args.num_samples)
    payload = {"model": args.model, "method": args.method, **stats.summary()}
    if args.out:
        _save_samples(samples, args.out, args.model)
        payload["out"] = args.out
    _print(args, payload)
    return 0


def _save_samples(samples, path, model):
    import numpy as np

    if path.endswith(".png") and model == "digits":
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        images = samples.reshape(-1, 8, 8).clamp(-1, 1).numpy()
        cols = min(8, images.shape[0])
        rows = -(-images.shape[0] // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(cols, rows), squeeze=False)
        for ax in axes.flat:
            ax.axis("off")
        for ax, image in zip(axes.flat, images):
            ax.imshow(image, cmap="gray_r", vmin=-1, vmax=1)
        fig.savefig(path, dpi=80)
    else:
        np.savez(path, samples=samples.numpy())


def _eval(args) -> int:
    from specdiff.continuous.metrics import digits_frechet_distance, projection_two_sample_pvalues

    target = _target(args)
    reference, ddpm_stats = _run(args, target, "ddpm", args.num_samples, seed_offset=100)
    payload = {"model": args.model, "steps": args.steps, "churn": args.churn, "num_samples": args.num_samples, "methods": {}}
    if args.model == "digits":
        payload["ddpm_fd"] = digits_frechet_distance(reference)
    for method in ("R", "D", "B"):
        samples, stats = _run(args, target, method, args.num_samples)
        entry = {"block_efficiency": stats.block_efficiency, "min_projection_pvalue_vs_ddpm": min(projection_two_sample_pvalues(samples, reference))}
        if args.model == "digits":
            entry["fd"] = digits_frechet_distance(samples)
        payload["methods"][method] = entry
    _print(args, payload)
    return 0


def _bench(args) -> int:
    from pathlib import Path

    from specdiff.continuous.bench import DEFAULT_DB, markdown_table, plot_speedup, run_bench, write_json

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
        progress=not args.json, on_unit=report, timing_parts=args.timing_parts,
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
        print(json.dumps({"wall_seconds": result["wall_seconds"], "units": result["units"],
                          "targets_at_K250": result["targets_at_K250"]}, indent=1))
    return 0


def _train(args) -> int:
    from pathlib import Path

    import torch

    from specdiff.continuous.models import WEIGHTS_DIR
    from specdiff.continuous.train import train_classifier, train_denoiser

    torch.set_num_threads(args.threads)
    out = Path(args.out_dir) if args.out_dir else WEIGHTS_DIR
    report = {}
    if args.what in ("classifier", "all"):
        report["classifier"] = train_classifier(out / "digits_classifier.safetensors", seed=args.seed)
    if args.what in ("denoiser", "all"):
        path = train_denoiser(out / "digits_unet", steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                              ema_decay=args.ema_decay, seed=args.seed, checkpoint=args.checkpoint)
        report["denoiser"] = str(path)
    print(json.dumps(report, indent=1))
    return 0
