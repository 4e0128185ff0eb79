"""The figure of `specdiff demo --rules` (`save_tradeoff_plot`): what each rule emits at one position,
theory curves beside the rules measured by `specdiff.runs.rules_demo`."""
from __future__ import annotations

from specdiff.runs.rules_demo import demo_rules, rule_target, short_name, tv_noise_floor

def save_tradeoff_plot(p, q, rows, path: str, samples: int | None = None) -> str:
    """What each rule emits at one position, theory curves beside the measured demo rules.

    Left: acceptance against TV(emitted, p). At one position every rule lies on Theorem 1's line
    1 - TV(p, q) + TV(emitted, p) (Linear reaches it by construction, and so do TVBudget and Cactus
    here), so the line is drawn on top and the families as markers along it. Right: acceptance
    against KL(emitted || p), where the families separate (the same acceptance costs each a
    different KL).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    import specdiff as sd
    from specdiff import theory

    families = {
        "Linear": [sd.Linear(float(lam)) for lam in torch.linspace(0, 1, 21)],
        "TVBudget": [sd.TVBudget(float(eps)) for eps in torch.linspace(0, 0.5, 21)],
        "Cactus": [sd.Cactus(float(delta)) for delta in torch.logspace(-4, 0, 21)],
        "Cactus-taylor": [sd.Cactus(float(delta), solver="taylor") for delta in torch.logspace(-4, 0, 21)],
    }
    labels = {"Linear": "Linear(lam), lam 0..1", "TVBudget": "TVBudget(eps), eps 0..0.5",
              "Cactus": "Cactus(delta), delta 1e-4..1", "Cactus-taylor": "Cactus-taylor(delta), delta 1e-4..1"}
    tv_pq = float(theory.total_variation(p, q))
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for name, rules in families.items():
        targets = [rule_target(rule, p, q) for rule in rules]
        acceptance = [float(theory.acceptance_rate(rule, p, q)) for rule in rules]
        style = FAMILY_STYLE[name]
        left.scatter([float(theory.total_variation(t, p)) for t in targets], acceptance, s=28, alpha=0.75, zorder=3,
                     label=f"{labels[name]} (theory)", **_scatter_style(style))
        right.plot([kl_divergence(t, p) for t in targets], acceptance, linestyle="-", linewidth=1, markersize=4,
                   alpha=0.85, label=labels[name], color=style["color"], marker=style["marker"],
                   markerfacecolor="none")
    left.plot([0, tv_pq], [1 - tv_pq, 1.0], color="black", linestyle="--", linewidth=1.2, zorder=4,
              label=f"Theorem 1: 1 - TV(p,q) + TV(emitted,p), TV(p,q) = {tv_pq:.3f}")
    _plot_measured(left, rows, p, samples)
    left.set_xlabel("TV(emitted, verifier p)  (quality loss)")
    left.set_ylabel("first-position acceptance  (speed)")
    left.set_title("Every rule on Theorem 1's line")
    right.set_xlabel("KL(emitted || verifier p)")
    right.set_ylabel("first-position acceptance")
    right.set_title("Where the rules differ: the KL that each acceptance costs")
    for axis in (left, right):
        axis.grid(alpha=0.3)
    left.legend(fontsize=7, loc="upper left")
    right.legend(fontsize=7, loc="lower right")
    figure.suptitle(f"Leniency buys acceptance: one position of the synthetic pair, V = {p.shape[0]:,}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


FAMILY_STYLE = {  # colour and marker of each leniency family, shared by theory curves and measured dots
    "Linear": dict(color="tab:blue", marker="o"),
    "TVBudget": dict(color="tab:orange", marker="x"),
    "Cactus": dict(color="tab:green", marker="s"),
    "Cactus-taylor": dict(color="tab:red", marker="^"),
    "Lossless": dict(color="black", marker="D"),
}


def family(rule) -> str:
    """The FAMILY_STYLE key of a rule: its class name, Cactus-taylor for the closed-form solver."""
    name = type(rule).__name__
    return "Cactus-taylor" if getattr(rule, "solver", None) == "taylor" else name


def kl_divergence(a, b) -> float:
    """KL(a || b) = sum_v a(v) log(a(v) / b(v)), 0 log 0 = 0."""
    import torch

    return float((torch.xlogy(a, a) - torch.xlogy(a, b)).sum())


NOISY_TV = 0.02  # above this sampling noise, a histogram's TV says nothing at the scale of the plot


def _plot_measured(axis, rows, p, samples: int | None) -> None:
    """The demo's rules as measured, in their family's colour and marker, labelled by name (rules
    on the same spot share one label). Where --samples is too small for V to measure TV (its
    sampling noise is above NOISY_TV), the dots sit at the theory TV and the legend says so."""
    by_rule = {short_name(rule): rule for rule in demo_rules()}
    noise = tv_noise_floor(p, samples) if samples else 0.0
    measured_tv = noise <= NOISY_TV
    spots: dict[tuple, list] = {}  # rounded (x, y) -> rows drawn there
    for row in rows:
        x = row["tv_to_verifier_measured" if measured_tv else "tv_to_verifier_theory"]
        y = row["accept_measured"]
        style = FAMILY_STYLE[family(by_rule[row["rule"]])] if row["rule"] in by_rule else FAMILY_STYLE["Lossless"]
        axis.scatter(x, y, s=70, color=style["color"], marker="X" if style["marker"] == "x" else style["marker"],
                     edgecolors="black", linewidths=0.6, zorder=5)
        spots.setdefault((round(x * 60), round(y * 60)), []).append((x, y, row["rule"], style["color"]))
    for rank, spot in enumerate(sorted(spots.values(), key=lambda spot: spot[0][1])):
        x, y, _, color = spot[0]
        below_right = rank % 2 == 0  # alternate sides: neighbouring spots of the line
        axis.annotate("\n".join(name for _, _, name, _ in spot), (x, y), fontsize=7,
                      xytext=(7, -10) if below_right else (-7, 5), ha="left" if below_right else "right",
                      va="top" if below_right else "bottom", textcoords="offset points",
                      color=color if len(spot) == 1 else "dimgrey", zorder=6)
    label = "measured: the demo's rules (labelled)"
    if not measured_tv:
        label = (f"measured acceptance, at the theory TV: with {samples:,} rows over V = {p.shape[0]:,}\n"
                 f"a histogram's TV is sampling noise (~{noise:.2f}); the table has it")
    axis.scatter([], [], s=70, color="grey", edgecolors="black", label=label)


def _scatter_style(style: dict) -> dict:
    """Hollow markers in the family colour (an 'x' has no face)."""
    if style["marker"] == "x":
        return dict(color=style["color"], marker="x")
    return dict(marker=style["marker"], edgecolors=style["color"], facecolors="none")
