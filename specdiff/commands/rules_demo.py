"""`specdiff demo --rules`: every acceptance rule on a synthetic pair of distributions.

What verify() does at one position, without models: for each rule, the first-position acceptance
rate and the distance of what it emits from the verifier, theory beside measurement, and the mean
accepted length of token against block verification over a block of B positions.
"""
from __future__ import annotations

import argparse
import json

MAX_VOCAB = 1 << 16  # --vocab bound: verification reads --samples rows of V tokens per rule
WORK_ELEMENTS = 1 << 24  # default rows x V per rule: seconds per rule at any --vocab


def vocab_size(text: str) -> int:
    """argparse `type=` for --vocab: an integer in 2..MAX_VOCAB, refused by name otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 2 <= value <= MAX_VOCAB:
        raise argparse.ArgumentTypeError(
            f"must lie in 2..{MAX_VOCAB:,}, got {text!r} (the demo verifies --samples rows of V tokens "
            "per rule; `specdiff bench verify --vocab` times verify() at real vocabulary sizes)"
        )
    return value


def default_samples(vocab: int) -> int:
    """Rows per rule when --samples is not given: 100,000, fewer for large V (about 2^24 row-tokens)."""
    return max(1_000, min(100_000, WORK_ELEMENTS // vocab))


def synthetic_pair(vocab: int, seed: int):
    """A peaked verifier p and a flatter, shifted drafter q over `vocab` tokens (float64)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(vocab, generator=generator, dtype=torch.float64)
    p = torch.softmax(2.0 * base, dim=0)
    q = torch.softmax(1.2 * base + 0.8 * torch.randn(vocab, generator=generator, dtype=torch.float64), dim=0)
    return p, q


def demo_rules():
    import specdiff as sd

    return [
        sd.Lossless(),
        sd.Linear(0.2),
        sd.Linear(0.5),
        sd.TVBudget(0.1),
        sd.TVBudget(0.3),
        sd.Cactus(0.005),
        sd.Cactus(0.02),
        sd.Cactus(0.02, solver="taylor"),
    ]


def short_name(rule) -> str:
    """Lossless, Linear(0.2), TVBudget(0.1), Cactus(0.02), Cactus-taylor(0.02)."""
    import dataclasses

    name = type(rule).__name__
    values = [getattr(rule, field.name) for field in dataclasses.fields(rule) if field.name not in ("solver", "support")]
    solver = "-taylor" if getattr(rule, "solver", "newton") == "taylor" else ""
    support = "-untruncated" if getattr(rule, "support", "truncated") == "untruncated" else ""
    if not values:
        return name + support
    return f"{name}{solver}{support}({values[0]:g})"


ROW_ELEMENTS = 1 << 21  # rows x (B+1) x V per verify() call: memory stays flat in --samples and --vocab


def rule_target(rule, p, q):
    """What token verification with `rule` emits at one position, [V], in O(V log V).

    Linear-type rules emit p~ = (1 - lam) p + lam q; Cactus emits C (acceptance.cactus_emitted_distribution,
    equal to theory.emitted_distribution's O(V^2) mixture over every draft y, without the V x V tensor).
    """
    from specdiff import theory
    from specdiff.acceptance import Cactus, cactus_emitted_distribution

    if isinstance(rule, Cactus):
        return cactus_emitted_distribution(p.unsqueeze(0), q.unsqueeze(0), rule)[0]
    return theory.emitted_distribution(rule, p, q)


def measure_rule(rule, p, q, samples: int, block_len: int, seed: int) -> dict:
    """verify() on `samples` rows of the same pair at every position, in chunks of rows so that
    no tensor holds more than about ROW_ELEMENTS entries: time O(samples B V), memory O(V)."""
    import torch

    import specdiff as sd
    from specdiff import theory

    vocab = p.shape[0]
    generator = torch.Generator().manual_seed(seed)
    chunk = max(1, ROW_ELEMENTS // ((block_len + 1) * vocab))
    # block verification reads every position densely; 20k rows pin its mean length to ~0.01
    block_rows = min(samples, 20_000)
    emitted = torch.zeros(vocab, dtype=torch.float64)  # [V] first-position token counts
    accepted_first = accepted_token = accepted_block = 0
    for first in range(0, samples, chunk):
        rows = min(chunk, samples - first)
        draft = torch.multinomial(q.expand(rows, vocab), block_len, replacement=True, generator=generator)  # [n, B]
        target_probs = p.expand(rows, block_len + 1, vocab)  # [n, B+1, V]
        draft_probs = q.expand(rows, block_len, vocab)  # [n, B, V]
        token = sd.verify(draft, draft_probs, target_probs, rule=rule, method="token", generator=generator)
        emitted += torch.bincount(token.tokens[:, 0], minlength=vocab).double()
        accepted_first += int((token.num_accepted >= 1).sum())
        in_block = max(0, min(rows, block_rows - first))  # the first block_rows rows also run block
        if in_block:
            accepted_token += int(token.num_accepted[:in_block].sum())
            block = sd.verify(draft[:in_block], draft_probs[:in_block], target_probs[:in_block], rule=rule,
                              method="block", generator=generator)
            accepted_block += int(block.num_accepted.sum())
    emitted /= samples
    target = rule_target(rule, p, q)
    return {
        "rule": short_name(rule),
        "accept_theory": float(theory.acceptance_rate(rule, p, q)),
        "accept_measured": accepted_first / samples,
        "tv_to_verifier_theory": float(theory.total_variation(target, p)),
        "tv_to_verifier_measured": float(theory.total_variation(emitted, p)),
        "tv_to_rule_target": float(theory.total_variation(emitted, target)),
        "mean_accepted_token": accepted_token / block_rows,
        "mean_accepted_block": accepted_block / block_rows,
        "block_rows": block_rows,
    }


def run_demo(args) -> int:
    import torch

    from specdiff import theory

    torch.set_num_threads(args.threads)
    samples = args.samples if args.samples is not None else default_samples(args.vocab)
    p, q = synthetic_pair(args.vocab, args.seed)
    rows = []
    if args.json:
        rows = [measure_rule(rule, p, q, samples, args.block, args.seed + i) for i, rule in enumerate(demo_rules())]
    else:
        from specdiff.progress import progress

        for i, rule in progress(list(enumerate(demo_rules())), desc="verifying", unit="rule"):
            rows.append(measure_rule(rule, p, q, samples, args.block, args.seed + i))
    result = {
        "demo": "synthetic",
        "vocab": args.vocab,
        "samples": samples,
        "block": args.block,
        "tv_p_q": float(theory.total_variation(p, q)),
        "tv_noise_floor": tv_noise_floor(p, samples),
        "rules": rows,
    }
    if args.plot:
        result["plot"] = save_tradeoff_plot(p, q, rows, args.plot, samples)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    _print_table(result)
    if args.plot:
        print(f"plot: {result['plot']}")
    return 0


def tv_noise_floor(p, samples: int) -> float:
    """Expected TV between p and the histogram of `samples` draws from p, about
    1/2 sum_v sqrt(2 p(v) (1 - p(v)) / (pi N)) for large N: the measured TV of a lossless rule."""
    import math

    return float(0.5 * (2.0 * p * (1.0 - p) / (math.pi * samples)).sqrt().sum())


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


def _print_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 112))
    table = Table(
        title=f"verifier p vs drafter q, V={result['vocab']}, TV(p,q)={result['tv_p_q']:.3f}, "
        f"{result['samples']:,} rows per rule",
    )
    table.add_column("rule", no_wrap=True)
    table.add_column("accept\ntheory", justify="right")
    table.add_column("accept\nmeasured", justify="right")
    table.add_column("TV to p\ntheory", justify="right")
    table.add_column("TV to p\nmeasured", justify="right")
    table.add_column("TV to\nrule target", justify="right")
    table.add_column(f"accepted\ntoken B={result['block']}", justify="right")
    table.add_column(f"accepted\nblock B={result['block']}", justify="right")
    for row in result["rules"]:
        table.add_row(
            row["rule"],
            f"{row['accept_theory']:.4f}",
            f"{row['accept_measured']:.4f}",
            f"{row['tv_to_verifier_theory']:.4f}",
            f"{row['tv_to_verifier_measured']:.4f}",
            f"{row['tv_to_rule_target']:.4f}",
            f"{row['mean_accepted_token']:.3f}",
            f"{row['mean_accepted_block']:.3f}",
        )
    console.print(table)
    console.print(
        "Lossless emits p exactly (TV to p is sampling noise); Linear/TVBudget move toward q by "
        "lam*TV(p,q) (Theorem 1) and Cactus by its KL budget, buying acceptance. Block verification "
        "accepts at least as many tokens as token verification (Sun et al. 2025)."
    )
