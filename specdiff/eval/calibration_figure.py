"""Figure 3 of the first paper, theory beside measurement, from `specdiff calibrate`'s result:

(a) theoretical acceptance alpha_K(lam) against verifier agreement 1 - lam d_K (Eq. 6), one curve
    per K over the sweep's range of lam, its lam marked;
(b) measured acceptance per drafted position against accuracy, per K over the sweep's lam;
(c) theoretical throughput (the chosen model: Eq. 7 by default) against agreement;
(d) measured throughput against accuracy.
Panels (a)/(b) and (c)/(d) share their x axis, so that a horizontal shift between them is the
model's error; (b) and (d) also mark the prediction of each configuration (x) at its accuracy.
"""
from __future__ import annotations

import numpy as np

from specdiff.eval import calibration as model
from specdiff.eval.figures import _png, _pyplot, effort_colours


def figure3_png(result: dict, summaries: list[dict]) -> bytes:
    plt = _pyplot()
    configurations = result["configurations"]
    colours = effort_colours(f"K={c['steps']}" for c in configurations)
    chosen = result["model"]
    figure, axes = plt.subplots(2, 2, figsize=(11, 8.5))
    (a, c), (b, d) = axes
    lams = np.linspace(0, max(c_["lam"] for c_ in configurations) or 1.0, 51)  # the sweep's range of lam
    for key in sorted({(c_["steps"], c_["block_size"], c_["proposal"]) for c_ in configurations}):
        steps, block, proposal = key
        mine = sorted((c_ for c_ in configurations if (c_["steps"], c_["block_size"], c_["proposal"]) == key),
                      key=lambda c_: c_["lam"])
        colour, label = colours[f"K={steps}"], f"K={steps}" + ("" if len(result["costs"]) == 1 else f" B={block}")
        d_k = result["distance"][f"B={block}"][proposal][f"K={steps}"]["d_K"]
        cost = result["costs"][f"B={block}"]
        fit = {"a": cost["fit"]["a_ms"] / 1000, "b": cost["fit"]["b_ms"] / 1000}
        agreement = [model.verifier_agreement(d_k, lam) for lam in lams]
        a.plot([model.expected_acceptance(d_k, lam) for lam in lams], agreement, color=colour, label=label)
        a.plot([c_["predicted"]["eq7"]["acceptance"] for c_ in mine], [c_["agreement"] for c_ in mine], "o",
               color=colour)
        if chosen == "eq7":
            speeds = [model.predict(model.iid_survival(model.expected_acceptance(d_k, lam), block), steps, fit,
                                    cost["c_v_ms"] / 1000, cost["prefill_ms"] / 1000,
                                    result["prefixes"]["verifier_tokens_per_problem"])["throughput"] for lam in lams]
            c.plot(speeds, agreement, color=colour, label=label)
        c.plot([c_["predicted"][chosen]["throughput"] for c_ in mine], [c_["agreement"] for c_ in mine],
               "o-" if chosen != "eq7" else "o", color=colour, label=label if chosen != "eq7" else None)
        accuracy = [c_["accuracy"] for c_ in mine]
        b.plot([c_["measured"]["acceptance"] for c_ in mine], accuracy, "o-", color=colour, label=label)
        b.plot([c_["predicted"][chosen]["acceptance"] for c_ in mine], accuracy, "x", color=colour)
        d.plot([c_["measured"]["throughput"] for c_ in mine], accuracy, "o-", color=colour, label=label)
        d.plot([c_["predicted"][chosen]["throughput"] for c_ in mine], accuracy, "x", color=colour)
    errors = result["errors_by_model"][chosen]
    titles = {a: "(a) theoretical: acceptance vs agreement (Eq. 6)",
              b: "(b) measured acceptance (x: predicted; median |rel. err.| "
                 f"{_pct(errors['median_rel_error_acceptance'])})",
              c: f"(c) theoretical throughput ({'Eq. 7' if chosen == 'eq7' else chosen})",
              d: "(d) measured throughput (x: predicted; median |rel. err.| "
                 f"{_pct(errors['median_rel_error_throughput'])})"}
    for axis, title in titles.items():
        axis.set_title(title, fontsize=9)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7, loc="best")
    for axis in (a, b):
        axis.set_xlabel("acceptance rate per drafted position")
    for axis in (c, d):
        axis.set_xlabel("throughput (tokens / s)")
    for axis in (a, c):
        axis.set_ylabel("verifier agreement 1 - λ d_K")
    for axis in (b, d):
        axis.set_ylabel("accuracy")
    for top, bottom in ((a, b), (c, d)):
        low = min(top.get_xlim()[0], bottom.get_xlim()[0])
        high = max(top.get_xlim()[1], bottom.get_xlim()[1])
        top.set_xlim(low, high)
        bottom.set_xlim(low, high)
    figure.suptitle(f"{result['models']['drafter']} -> {result['models']['verifier']}: theory (top) beside "
                    "measurement (bottom)", fontsize=10)
    figure.tight_layout()
    return _png(figure)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"
