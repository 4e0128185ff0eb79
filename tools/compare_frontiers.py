"""Where one sweep's drafter stands against another's: the joint Pareto frontiers of several stores
in one figure (accuracy against latency and against throughput) and one JSON, each store's frontier
and the frontier of their union with its hypervolume share per store (same reference point for all).

    python tools/compare_frontiers.py docs/results/frontier/masked_linear.sqlite docs/results/frontier/block_linear.sqlite \
        --only-block-size 8 --plot docs/results/frontier/block_vs_masked.png > docs/results/frontier/block_vs_masked.json

`--only-block-size B` keeps the configurations at draft length B (the block drafter is trained for B = 8).
A store named `X.sqlite` is read from the committed `X.sqlite.xz` when it is not decompressed. With `--out J`
the JSON goes to J instead of stdout; with `--check` nothing is written: J and the --plot figure are compared
with what would be written (exit 1 if they differ; tests/test_tools_check.py runs the two committed ones):

    python tools/compare_frontiers.py $F/masked_linear.sqlite $F/block_linear.sqlite --only-block-size 8 \
        --plot $F/block_vs_masked.png --out $F/block_vs_masked.json --check        # F=docs/results/frontier
"""
from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

from specdiff.eval import frontier as fr

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doc_blocks  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stores", nargs="+")
    parser.add_argument("--only-block-size", type=int, default=None)
    parser.add_argument("--plot", default=None)
    parser.add_argument("--out", type=Path, help="write the JSON here (default: stdout)")
    parser.add_argument("--check", action="store_true", help="compare --out and --plot with what would be written")
    args = parser.parse_args(argv)
    if args.check and args.out is None:
        parser.error("--check compares the file named by --out")
    labelled = []
    for path in args.stores:
        with doc_blocks.readable_store(path) as readable:
            sweep = fr.load_sweep(readable)
        label = f"{sweep['settings']['models']['drafter']} ({Path(path).stem})"
        summaries = [dict(s, name=f"{label}: {s['name']}", store=label) for s in sweep["summaries"]
                     if args.only_block_size is None or s["params"].get("block_size") == args.only_block_size]
        labelled.append((label, summaries))
    union = [s for _, summaries in labelled for s in summaries]
    out = {"stores": args.stores, "only_block_size": args.only_block_size}
    for axis in fr.AXES:
        reference = fr.reference_point(union, axis)
        joint = fr.hypervolume(union, axis, reference)
        mask = fr.pareto_mask(union, axis)
        out[axis] = {"reference_point": reference, "hypervolume_union": joint,
                     "hypervolume_per_store": {label: fr.hypervolume(s, axis, reference) for label, s in labelled},
                     "union_frontier_points_per_store": {label: sum(1 for s, on in zip(union, mask) if on and s["store"] == label)
                                                         for label, _ in labelled},
                     "union_frontier": [{k: p[k] for k in ("name", "accuracy", fr.AXES[axis][0])}
                                        for p in fr.frontier_points(union, axis)]}
    figure = None
    if args.plot:
        figure = io.BytesIO()
        _plot(labelled, figure)
        out["plot"] = args.plot
    text = json.dumps(out, indent=1) + "\n"
    if args.check:
        failed = doc_blocks.check_file(args.out, text)
        return max(failed, doc_blocks.check_figure(Path(args.plot), figure.getvalue()) if args.plot else 0)
    if args.plot:
        Path(args.plot).write_bytes(figure.getvalue())
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _plot(labelled, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(13, 5))
    markers = ["o", "s", "^", "D"]
    for axis, (name, (key, _, label)) in zip(axes, fr.AXES.items()):
        for index, ((store, summaries), marker) in enumerate(zip(labelled, markers)):
            colour = f"C{index}"
            mask = fr.pareto_mask(summaries, name)
            xs, ys = [s[key] for s in summaries], [s["accuracy"] for s in summaries]
            axis.scatter(xs, ys, marker=marker, facecolors="none", edgecolors=colour, alpha=0.5, label=f"{store}: all")
            on = sorted((s for s, m in zip(summaries, mask) if m), key=lambda s: s[key])
            axis.plot([s[key] for s in on], [s["accuracy"] for s in on], marker=marker, color=colour,
                      label=f"{store}: frontier")
        axis.set_xlabel(label)
        axis.set_ylabel("accuracy")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle("joint frontiers (every effort and leniency) of each drafter on arith")
    figure.tight_layout()
    figure.savefig(path, dpi=110, format="png")
    plt.close(figure)


if __name__ == "__main__":
    sys.exit(main())
