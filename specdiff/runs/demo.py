"""The testbed demo's runs (`specdiff demo`): its configurations and the interleaved measurement.

On the first `problems` arith test problems, one problem at a time: plain autoregressive decoding of the
verifier, classic speculative decoding with the small autoregressive drafter, and each requested kind's rows
(the demo's own table, `demo.toml` beside this module: the masked kind at a few (effort K, leniency) points,
and its adaptive row). The rows
are timed interleaved: the problems run in chunks of `INTERLEAVE`, every row on each chunk in turn, so that
a change of machine load moves every row alike.
"""
from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path

from specdiff.drafters import registry

INTERLEAVE = 10  # problems per interleaved chunk: every row runs on each chunk in turn
PRESET = Path(__file__).resolve().parent / "demo.toml"  # the demo's rows: its settings, not the kinds'


@lru_cache(maxsize=1)
def preset() -> dict:
    """`demo.toml`: the default drafters, the baseline row and each kind's rows (that file's header)."""
    return tomllib.loads(PRESET.read_text())


def default_kinds() -> list[str]:
    """The kinds `specdiff demo` runs without --drafter."""
    return list(preset()["drafters"])


def kind_rows(kind: str) -> list[dict]:
    """One kind's demo rows (RunConfig fields, B = 8 unless given); none for a kind the demo has no rows for."""
    return [{"block_size": 8, **row} for row in preset()["kinds"].get(registry.get(kind).name, {}).get("rows", [])]


def _adaptive(kind: str) -> dict | None:
    return preset()["kinds"].get(registry.get(kind).name, {}).get("adaptive")


def demo_configs(kinds=None, controller: str | None = None):
    """The demo's configurations: the baselines, then each kind's rows (`kind_configs`), and its adaptive row
    where the kind has one (with `controller` in place of its own)."""
    from specdiff.runs import RunConfig

    baseline = dict(preset()["baseline"])
    name, drafter = baseline.pop("name"), registry.get(baseline.pop("kind")).zoo_model
    rows = [RunConfig("autoregressive (verifier)", drafter=None), RunConfig(name, drafter=drafter, **baseline)]
    for kind in dict.fromkeys(kinds or default_kinds()):
        spec = registry.get(kind)
        rows += kind_configs(kind)
        own = _adaptive(kind)
        if own is not None:
            adaptive = dict(own, controller=controller or own["controller"])
            effort = spec.describe(adaptive["steps"], None, adaptive["block_size"]).replace(" K=", " K<=").replace(
                " B=", " B<=")
            rows.append(RunConfig(f"{effort} point mass, {adaptive['controller']}", drafter=spec.zoo_model,
                                  **adaptive))
    return rows


def kind_configs(kind: str):
    """One kind's demo rows (`kind_rows`) as RunConfigs of its zoo model."""
    from specdiff.runs import RunConfig

    spec = registry.get(kind)
    return [RunConfig(_label(spec, row), drafter=spec.zoo_model, **row) for row in kind_rows(kind)]


def default_controller(kind: str | None = None) -> str | None:
    """The controller of a kind's adaptive row (default: the first default kind's), None without one."""
    adaptive = _adaptive(kind or default_kinds()[0])
    return None if adaptive is None else adaptive["controller"]


def run_demo(kinds, problems: int, max_new_tokens: int, seed: int = 0, controller: str | None = None,
             show_progress: bool = True) -> dict:
    """Every demo row on the first `problems` arith test problems, interleaved (module docstring); the rows
    with their speedup over plain decoding."""
    from specdiff.eval import tasks
    from specdiff.models import require_weights
    from specdiff.progress import progress
    from specdiff.models import ModelCache
    from specdiff.runs import merge_results, run_config

    test = tasks.arith_problems("test", problems)
    prompts, targets = [p.prompt for p in test], [p.target for p in test]
    for kind in kinds:
        require_weights(registry.get(kind).zoo_model)  # before anything runs: `specdiff zoo train NAME`
    cache = ModelCache()
    configs = demo_configs(kinds, controller)
    for config in configs:  # one short generation per model, so that the first row is not timed cold
        run_config(config, [prompts[0]], None, cache, 24)
    chunks = [range(start, min(start + INTERLEAVE, len(prompts))) for start in range(0, len(prompts), INTERLEAVE)]
    parts = {config.name: [] for config in configs}
    for number, chunk in enumerate(progress(chunks, desc="interleaved chunks", enabled=show_progress)):
        for config in configs:
            parts[config.name].append(run_config(config, [prompts[i] for i in chunk], [targets[i] for i in chunk],
                                                 cache, max_new_tokens, seed=seed + 1000 * number,
                                                 is_correct=tasks.is_correct))
    rows = [merge_results(parts[config.name]) for config in configs]
    base = rows[0]["tokens_per_s"]
    for row in rows:
        row["speedup"] = row["tokens_per_s"] / base
    return {"task": "arith", "split": "test", "drafters": list(kinds), "problems": problems,
            "max_new_tokens": max_new_tokens, "seed": seed, "rows": rows}


def _label(spec, row: dict) -> str:
    label = spec.describe(row.get("steps", 1), row.get("threshold"), row["block_size"])
    if row.get("proposal") == "point_mass":
        label += " point mass"
    if row.get("rule") == "linear":
        label += f" Linear({row['leniency']})"
    if row.get("rule") == "typical":
        label += f" Typical({row['leniency']})"
    return label


def save_frontier_plot(rows: list[dict], path: str) -> str:
    """Accuracy (with its standard error) against tokens/s, one point per configuration: filled when
    lossless, hollow when approximate, each named in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(10, 4.8))
    colors = plt.get_cmap("tab10").colors
    markers = "osD^v<>ph*"
    for i, row in enumerate(rows):
        color = "black" if "rounds" not in row else colors[i % len(colors)]  # plain decoding drafts no rounds
        axis.errorbar(row["tokens_per_s"], row["accuracy"], yerr=row["accuracy_stderr"], capsize=3, color=color,
                      marker=markers[i % len(markers)], markersize=8, linestyle="none",
                      markerfacecolor=color if row["exact"] else "white", markeredgewidth=1.5,
                      label=f"{row['config']} ({row['speedup']:.2f}x){'' if row['exact'] else ', approximate'}")
    axis.set_xlabel("throughput (generated tokens / s, batch 1)")
    axis.set_ylabel("accuracy (arith test, ± 1 s.e.)")
    axis.set_title("Speculative diffusion on the testbed: effort K and leniency\n"
                   "filled: lossless (exact); hollow: approximate (out-of-order marginal, or lenient)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
