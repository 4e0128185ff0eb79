"""The sweep's figures, as PNG bytes (the report embeds them; the commands write them).

- `frontier_png`: Figure 4 of the first paper, for latency and throughput side by side: the joint
  Pareto frontier as a thick line coloured by the effort K of its points (a gradient between points
  of different K) with white ticks at the points, ±1 s.e. of accuracy on them, every configuration
  off the frontier as a hollow marker in its K's colour, and each fixed-K frontier as a thin dashed
  line (the single-effort frontiers the joint one is compared with, as in Figure 5).
- `accepted_histograms_png`: the accepted length of every round, one small panel per configuration.
"""
from __future__ import annotations

import io

import numpy as np

from specdiff.eval.frontier import AXES, effort_order, pareto_mask


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    _pyplot().close(figure)
    return buffer.getvalue()


def effort_colours(efforts) -> dict:
    """Effort label -> RGBA, along viridis (so that the gradient between neighbours reads as K)."""
    from matplotlib import colormaps

    order = effort_order(efforts)
    cmap = colormaps["viridis"]
    return {e: cmap(0.1 + 0.8 * i / max(1, len(order) - 1)) for i, e in enumerate(order)}


def _gradient_line(axis, xs, ys, colours, width=5.0, pieces=24):
    from matplotlib.collections import LineCollection

    segments, segment_colours = [], []
    for i in range(len(xs) - 1):
        for t0, t1 in zip(np.linspace(0, 1, pieces, endpoint=False), np.linspace(0, 1, pieces + 1)[1:]):
            x0, x1 = xs[i] + (xs[i + 1] - xs[i]) * t0, xs[i] + (xs[i + 1] - xs[i]) * t1
            y0, y1 = ys[i] + (ys[i + 1] - ys[i]) * t0, ys[i] + (ys[i + 1] - ys[i]) * t1
            segments.append([(x0, y0), (x1, y1)])
            mid = (t0 + t1) / 2
            segment_colours.append(tuple((1 - mid) * np.array(colours[i]) + mid * np.array(colours[i + 1])))
    axis.add_collection(LineCollection(segments, colors=segment_colours, linewidths=width, capstyle="round", zorder=3))


def draw_frontier(axis, summaries: list[dict], name: str, analysis: dict | None = None, cost: str = "wall") -> None:
    """One axis of the frontier figure; `cost="calls"` labels the speed axis in priced seconds."""
    key, higher, label = AXES[name]
    colours = effort_colours(s["effort"] for s in summaries)
    on = pareto_mask(summaries, name)
    for s, frontier in zip(summaries, on):
        if not frontier:
            axis.plot(s[key], s["accuracy"], "o", markerfacecolor="none", markeredgecolor=colours[s["effort"]],
                      markersize=6, zorder=2)
    for effort in colours:
        group = [s for s in summaries if s["effort"] == effort]
        mask = pareto_mask(group, name)
        line = sorted((s for s, m in zip(group, mask) if m), key=lambda s: s[key])
        if len(line) > 1:
            axis.plot([s[key] for s in line], [s["accuracy"] for s in line], "--", color=colours[effort], lw=1,
                      alpha=0.7, zorder=1)
    points = sorted((s for s, m in zip(summaries, on) if m), key=lambda s: s[key])
    xs, ys = [s[key] for s in points], [s["accuracy"] for s in points]
    if len(points) > 1:
        _gradient_line(axis, xs, ys, [colours[s["effort"]] for s in points])
    elif points:
        axis.plot(xs, ys, "o", color=colours[points[0]["effort"]], markersize=9, zorder=3)
    axis.errorbar(xs, ys, yerr=[s["accuracy_se"] for s in points], fmt="none", ecolor="0.3", elinewidth=0.8,
                  capsize=2, zorder=4)
    axis.plot(xs, ys, "|", color="white", markersize=9, markeredgewidth=2, zorder=5)
    for effort, colour in colours.items():
        axis.plot([], [], "o", color=colour, label=effort)
    axis.plot([], [], "o", markerfacecolor="none", markeredgecolor="0.4", label="dominated")
    axis.plot([], [], "--", color="0.4", lw=1, label="frontier of one K")
    if cost == "calls":  # model calls priced once (docs/leniency.md)
        label = label.replace("wall s", "priced s")
    axis.set_xlabel(label)
    axis.set_ylabel("accuracy (± 1 s.e. on the frontier)")
    axis.grid(alpha=0.3)
    if analysis:
        axis.set_title(f"{name}: joint / best single K ({analysis['best_single_k']}) hypervolume = "
                       f"{analysis['hypervolume_ratio']:.3f}" if analysis["hypervolume_ratio"] else name, fontsize=9)
    axis.legend(fontsize=7, loc="best")
    axis.autoscale_view()


def frontier_png(summaries: list[dict], analysis: dict | None = None, title: str = "") -> bytes:
    """Latency and throughput frontiers side by side (see the module docstring)."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for axis, name in zip(axes, ("latency", "throughput")):
        draw_frontier(axis, summaries, name, (analysis or {}).get(name), (analysis or {}).get("cost", "wall"))
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    return _png(figure)


def accepted_histograms_png(summaries: list[dict], rows: list[dict], columns: int = 6) -> bytes | None:
    """Histograms of accepted draft tokens per round, one panel per configuration (None without rounds)."""
    accepted: dict[str, list[int]] = {}
    for row in rows:
        accepted.setdefault(row["config_id"], []).extend(row["accepted"] or [])
    panels = [s for s in summaries if accepted.get(s["config_id"])]
    if not panels:
        return None
    plt = _pyplot()
    columns = min(columns, len(panels))
    lines = -(-len(panels) // columns)
    figure, axes = plt.subplots(lines, columns, figsize=(2.3 * columns, 1.9 * lines), squeeze=False,
                                sharey=False)
    colours = effort_colours(s["effort"] for s in summaries)
    for axis in axes.flat[len(panels):]:
        axis.axis("off")
    for axis, s in zip(axes.flat, panels):
        values = accepted[s["config_id"]]
        block = s["params"].get("block_size") or max(values)
        axis.hist(values, bins=np.arange(-0.5, block + 1.5), color=colours[s["effort"]], density=True)
        axis.set_title(s["name"], fontsize=6)
        axis.tick_params(labelsize=6)
        axis.set_xlim(-0.5, block + 0.5)
    figure.supxlabel("accepted draft tokens per round", fontsize=8)
    figure.tight_layout()
    return _png(figure)
