"""One self-contained HTML page for a sweep store: the settings that made it, the frontiers
(figure, hypervolumes, frontier points with their leads), the calibration when the store holds one
(an artifact named "calibration"), one row per configuration, and the accepted-length histograms.

Self-contained: the CSS is inline and the figures are base64 PNG data URIs; the page references
nothing outside itself (no scripts, fonts, styles or images from the network).
"""
from __future__ import annotations

import base64
import datetime
import html
import json

from specdiff.eval.figures import accepted_histograms_png, frontier_png
from specdiff.eval.frontier import AXES, analyse, load_sweep, pareto_mask
from specdiff.eval.pricing import priced_sweep

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1250px; color: #222; }
table { border-collapse: collapse; margin: 0.6em 0 1.4em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
th { background: #f2f2f2; } td.l, th.l { text-align: left; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
img { max-width: 100%; } .note { color: #555; font-size: 0.9em; }
"""


def _e(value) -> str:
    return html.escape(str(value))


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) >= 1000 or (value and abs(value) < 1e-3) else f"{value:.{digits}f}"
    return _e(value)


def _table(header: list[str], rows: list[list], left: int = 1) -> str:
    head = "".join(f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{cell}</td>' for i, cell in enumerate(row))
                   + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _image(png: bytes | None, alt: str) -> str:
    if not png:
        return f'<p class="note">{_e(alt)}: nothing to draw.</p>'
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _settings_section(sweep: dict) -> str:
    settings = sweep["settings"]
    rows = [[_e(f"{section}.{key}"), _e(json.dumps(value))] for section in ("models", "task", "run", "grid")
            for key, value in settings[section].items()]
    written = [r["written"] for r in sweep["rows"]]
    span = max(written) - min(written) if written else 0.0
    busy = sum(r["wall_s"] for r in sweep["rows"])
    rows += [["configurations", str(len(sweep["configurations"]))], ["rows (configuration, problem)", str(len(written))],
             ["first to last row written", f"{span:.1f} s"], ["generation wall seconds, summed", f"{busy:.1f} s"]]
    out = "<h2>Settings</h2>" + _table(["setting", "value"], rows, left=2)
    if sweep["incomplete"]:
        out += ('<p class="note">Not finished, left out of the figures: '
                + _e(", ".join(f"{c['name']} ({c['rows']}/{c['problems']})" for c in sweep["incomplete"])) + "</p>")
    if sweep["source"]:
        out += f"<h3>The config that made this store</h3><pre>{_e(sweep['source'])}</pre>"
    return out


def _frontier_section(sweep: dict, result: dict, title: str) -> str:
    out = "<h2>Pareto frontiers</h2>" + _image(frontier_png(sweep["summaries"], result, title), "frontiers")
    out += ('<p class="note">Thick line: the joint frontier over every (K, leniency), coloured by K (white ticks at '
            "its points, ±1 s.e. of accuracy); hollow markers: dominated configurations; dashed: the frontier of "
            f"one K. Hypervolumes by {_e(result['library'])}, all against the same reference point per axis.</p>")
    for axis in ("latency", "throughput"):
        r, key = result[axis], AXES[axis][0]
        per_k = ", ".join(f"{k}: {v:.4g}" for k, v in r["hypervolume_per_k"].items())
        out += f"<h3>{axis}</h3>" + _table(
            ["hypervolume joint", "best single K", "its hypervolume", "ratio", "per K", "reference point"],
            [[_fmt(r["hypervolume_joint"], 4), _e(r["best_single_k"]), _fmt(r["hypervolume_best_single_k"], 4),
              _fmt(r["hypervolume_ratio"], 4), _e(per_k), _e(json.dumps(r["reference_point"]))]], left=0)
        out += _table(["frontier point (fastest first)", "accuracy ± s.e.", key, "lead over next faster", "z",
                       "exceeds noise"],
                      [[_e(p["name"]), f"{p['accuracy']:.3f} ± {p['accuracy_se']:.3f}", _fmt(p[key], 4),
                        "-" if p["lead"] is None else f"{p['lead']:+.3f} ± {p['lead_se']:.3f}",
                        "-" if p["lead"] is None else f"{p['lead_z']:.2f}",
                        "-" if p["lead"] is None else _fmt(p["lead_exceeds_noise"])] for p in r["frontier"]])
    return out


def _calibration_section(artifacts: dict) -> str:
    calibration = artifacts.get("calibration")
    if not calibration:
        return ('<h2>Calibration</h2><p class="note">This store holds no calibration of the throughput model '
                "(Eq. 6-7): run <code>specdiff calibrate</code> on it.</p>")
    figures = {k: v for k, v in calibration.items() if k.endswith("_png_base64")}
    tables = ("costs", "costs_other", "distance", "configurations", "errors_by_model", "errors_by_costs")
    rows = [[_e(k), _e(json.dumps(v) if not isinstance(v, str) else v)] for k, v in calibration.items()
            if k not in figures and k not in tables]
    out = "<h2>Calibration of the throughput model (Eq. 6-7)</h2>" + _table(["quantity", "value"], rows, left=2)
    by_costs = calibration.get("errors_by_costs") or {"-": calibration.get("errors_by_model", {})}
    for source, by_model in by_costs.items():
        if by_model:
            keys = list(next(iter(by_model.values())))
            out += _table(["costs from", "model"] + keys, [[_e(source), _e(m)] + [_fmt(e[k]) for k in keys]
                                                           for m, e in by_model.items()], left=2)
    for block, cost in calibration.get("costs", {}).items():
        fit = cost["fit"]
        residuals = {k: round(v, 3) for k, v in fit["residuals_ms"].items()}
        parts = ", ".join(f"{k} {v:.2f}" for k, v in cost["c_v_parts_ms"].items())
        distances = "; ".join(f"{mode} " + ", ".join(f"{k} {v['d_K']:.3f} ± {v['stderr']:.3f}"
                                                      for k, v in per_k.items())
                              for mode, per_k in calibration["distance"][block].items())
        drift = _drift(calibration.get("costs_other", {}).get(block, {}), cost)
        text = (f"{block}: c_d(K) = {fit['a_ms']:.3f} + {fit['b_ms']:.3f} K ms (R² {fit['r2']:.3f}, residuals "
                f"{json.dumps(residuals)}); c_v = {cost['c_v_ms']:.2f} ms ({parts}); prefill "
                f"{cost['prefill_ms']:.2f} ms per problem; costs from {cost['source']}; {drift}"
                f"d_K: {distances}")
        out += f'<p class="note">{_e(text)}</p>'
    if "configurations" in calibration:
        model = calibration.get("model", "eq7")
        header = ["configuration", "d_K", "agreement", "acceptance pred / meas", "tokens/round pred / meas",
                  "round ms pred / meas", "tokens/s pred / meas", "rel. error tokens/s"]
        body = []
        for c in calibration["configurations"]:
            p, m = c["predicted"][model], c["measured"]
            body.append([_e(c["name"]), _fmt(c["d_K"]), _fmt(c["agreement"])]
                        + [f"{_fmt(p[k])} / {_fmt(m[k])}" for k in ("acceptance", "tokens_per_round", "round_ms")]
                        + [f"{p['throughput']:.0f} / {m['throughput']:.0f}",
                           f"{c['rel_error'][model]['throughput']:+.3f}"])
        out += _table(header, body)
    return out + "".join(f'<img alt="{_e(k)}" src="data:image/png;base64,{_e(v)}">' for k, v in figures.items())


def _drift(other: dict, cost: dict) -> str:
    drift = cost.get("sweep_over_timed") or other.get("sweep_over_timed")
    if not drift:
        return ""
    return "sweep / timed cost ratios (load drift) " + ", ".join(f"{k} {v:.2f}" for k, v in drift.items()) + "; "


def _configurations_section(sweep: dict) -> str:
    summaries = sweep["summaries"]
    on = {axis: dict(zip((s["config_id"] for s in summaries), pareto_mask(summaries, axis))) for axis in AXES}
    header = ["configuration", "K / tau", "rule", "leniency", "method", "proposal", "B", "n", "accuracy ± s.e.",
              "latency s ± s.e.", "tokens/s", "tokens/problem", "accepted/round", "acceptance rate",
              "tokens/round", "draft ms/round", "verify ms/round", "exact", "on latency frontier",
              "on throughput frontier"]
    rows = []
    for s in summaries:
        p = s["params"]
        rows.append([_e(s["name"]), _e(s["effort"]), _e(p["rule"]), _fmt(p["leniency"]), _e(p["method"]),
                     _e(p["proposal"]), _e(p["block_size"]), _e(s["n"]),
                     f"{s['accuracy']:.3f} ± {s['accuracy_se']:.3f}", f"{s['latency_s']:.4f} ± {s['latency_se']:.4f}",
                     _fmt(s["throughput"], 1), _fmt(s["new_tokens"], 1), _fmt(s.get("mean_accepted")),
                     _fmt(s.get("acceptance_rate")), _fmt(s.get("tokens_per_round")),
                     _fmt(s.get("draft_ms_per_round")), _fmt(s.get("verify_ms_per_round")), _fmt(s["exact"]),
                     _fmt(bool(on["latency"][s["config_id"]])), _fmt(bool(on["throughput"][s["config_id"]]))])
    return "<h2>Configurations</h2>" + _table(header, rows, left=1)


def build_report(store, latency_ref: float | None = None, costs: dict | None = None) -> str:
    """The HTML page of a sweep store (see the module docstring). With `costs` (per-call costs), the
    frontiers and the configurations' latency and throughput are priced calls (`eval.pricing`)."""
    sweep = load_sweep(store)
    if costs is not None:
        priced_sweep(sweep, costs)
    settings = sweep["settings"]
    title = (f"{settings['models']['drafter']} -> {settings['models']['verifier']} on {settings['task']['name']} "
             f"({settings['task']['problems']} problems)")
    parts = [f"<h1>specdiff sweep: {_e(title)}</h1>",
             f'<p class="note">store {_e(store)}; report written {_e(datetime.datetime.now().isoformat(timespec="seconds"))}'
             "</p>", _settings_section(sweep)]
    if costs is not None:
        parts.append('<p class="note">Speed axes and columns: the rows\' model calls priced with per-call costs '
                     f"measured once (priced seconds, not wall time): {_e(json.dumps(costs, sort_keys=True))}</p>")
    if sweep["summaries"]:
        result = analyse(sweep["summaries"], latency_ref)
        result["cost"] = "calls" if costs is not None else "wall"
        parts.append(_frontier_section(sweep, result, title))
    else:
        parts.append('<h2>Pareto frontiers</h2><p class="note">No configuration has finished yet.</p>')
    parts.append(_calibration_section(sweep["artifacts"]))
    parts.append(_configurations_section(sweep))
    parts.append("<h2>Accepted length per round</h2>"
                 + _image(accepted_histograms_png(sweep["summaries"], sweep["rows"]), "accepted-length histograms"))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n")
