"""`specdiff demo --real`: the real pair side by side, in about three minutes on two cores, fetch included.

The verifier is SmolLM2-135M-Instruct (fetched when missing: `checkpoints.fetch`); the rows are the one bench's
(`bench.speedup`) on the `demo_real` preset: a few of the shipped held-out chat prompts, greedy, measured
interleaved. The configurations are not tuned at demo time: they come from `presets/demo_real.tuning.json`, made
on the validation prompts only by

    specdiff bench tune --verifier smollm2-135m-instruct --preset demo_real --out specdiff/bench/presets/demo_real.tuning.json

Rows: `ar` (plain cached decoding: the 1.00x), `hf` (transformers' generate: the greedy reference),
`spec_lookup` (prompt lookup), `spec_dflash` (the DFlash drafter), `spec_masked` (the masked diffusion drafter,
the best distilled drafter on the held-out test prompts since issue 40's retrain), `spec_hybrid` (lookup where a
long match exists, else DFlash) and `spec_dflash_tree8` (DFlash's best-first draft tree of 8 nodes). Every row is
lossless: at float32 its output equals HF greedy token for token; at bfloat16 up to the stated near-ties
(`bench.ties`).

The figure (`save_plot`): speedup over plain decoding against tokens per verifier round, filled markers for exact
rows; the legend gives each row's share of outputs equal to the verifier's greedy output (up to near-ties).
"""
from __future__ import annotations

from pathlib import Path

PRESET = "demo_real"
TUNING = Path(__file__).parent / "presets" / "demo_real.tuning.json"
VERIFIER = "smollm2-135m-instruct"


def real_demo(dtype: str | None = None, plot: str | None = None, say=None, show_progress: bool = True,
              overrides: dict | None = None) -> dict:
    """Fetches the verifier when missing, measures the preset's rows with the committed tuning, returns the bench's
    report (plus `plot`, the PNG's path, when `plot` is given). overrides: settings over the preset's (smaller
    sizes in tests)."""
    from specdiff.bench import settings as settings_
    from specdiff.bench import speedup, tuner
    from specdiff.checkpoints import fetch, fetched_dir

    say = say or (lambda *a: None)
    if fetched_dir(VERIFIER) is None:
        say(f"fetching {VERIFIER} (once; it is cached)")
        fetch(VERIFIER, show_progress=show_progress)
    settings = settings_.build(PRESET, {**(overrides or {}), **({"dtype": dtype} if dtype else {})})
    report = speedup.speedup(settings, tuner.read(TUNING, settings.verifier), say)
    if plot:
        report["plot"] = save_plot(report, plot)
    return report


def table_rows(report: dict) -> list[dict]:
    """One line per row, plain decoding first: the figures the demo prints."""
    from specdiff.bench.rows import PLAIN

    rows, base = report["rows"], report["rows"][PLAIN]["tokens_per_s"]
    lines = []
    for name, row in rows.items():
        lines.append({"row": name, "tokens_per_s": row["tokens_per_s"], "speedup_vs_ar": row["tokens_per_s"] / base,
                      "mean_accepted": row["mean_accepted"], "tokens_per_round": row["tokens_per_round"],
                      "drafter_cost": row.get("drafter_cost_vs_verifier_step"), "exact": row["exact"],
                      "greedy_identical": row.get("greedy_identical"),
                      "up_to_ties": row.get("greedy_identical_up_to_ties")})
    return lines


def save_plot(report: dict, path: str) -> str:
    """Speedup over plain decoding (y) against tokens per verifier round (x, tau: accepted drafted tokens + 1), one
    point per row, filled when exact: speculation pays above the dashed line, and a row's distance right of
    tau = 1 is what its drafter bought, its distance below the line what its drafting and verification cost."""
    import matplotlib

    from specdiff.bench.rows import is_speculative

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(10, 4.8))
    colors = plt.get_cmap("tab10").colors
    for i, line in enumerate(table_rows(report)):
        same = line["up_to_ties"] if line["up_to_ties"] is not None else line["greedy_identical"]
        speculative = is_speculative(report["rows"][line["row"]])
        color = colors[i % len(colors)] if speculative else "black"  # the plain and HF rows: black
        axis.plot(line["tokens_per_round"], line["speedup_vs_ar"], "o", markersize=9, color=color,
                  markerfacecolor=color if line["exact"] else "white", markeredgewidth=1.5,
                  label=f"{line['row']}: {line['speedup_vs_ar']:.2f}x, tau {line['tokens_per_round']:.2f}"
                        + ("" if same is None else f", {same:.0%} = greedy"))
    axis.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    axis.set_xlabel("tokens per verifier round (tau = accepted drafted tokens + 1)")
    axis.set_ylabel("speedup over plain decoding")
    axis.set_title(f"{report['verifier']}, {report['dtype']}, {report['threads']} threads, greedy: "
                   f"{report['prompts']} held-out prompts x {report['max_new_tokens']} tokens\n"
                   "filled: lossless (exact); above the dashed line speculation pays", fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
