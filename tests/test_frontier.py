"""`specdiff frontier` and `specdiff report` (issue 14, items 3 and 5) on a synthetic store (no models):
the joint and per-K frontiers, their hypervolumes against the stated reference point, the leads
tested against the noise, the --json keys, the Figure-4-like plot, and a self-contained HTML page."""
import json
import re

import pytest

from specdiff.cli import main
from specdiff.eval.frontier import analyse, load_sweep, pareto_mask
from specdiff.eval.sweepstore import SweepStore

N = 40
# name -> (effort, lam, latency s, indices of the problems it gets right)
CONFIGS = {
    "K=1 lam=0": ("K=1", 0.0, 0.30, set(range(2, 38))),  # 0.90
    "K=1 lam=0.5": ("K=1", 0.5, 0.20, set(range(20))),  # 0.50, dominated by K=2 lam=0.5
    "K=2 lam=0": ("K=2", 0.0, 0.22, set(range(32))),  # 0.80
    "K=2 lam=0.5": ("K=2", 0.5, 0.10, set(range(24))),  # 0.60
}
TOKENS = 30


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "synthetic.sqlite"
    settings = {"models": {"drafter": "d", "verifier": "v"}, "task": {"name": "arith", "problems": N},
                "run": {}, "grid": {}}
    sweep = SweepStore(path, settings, source="[grid]\nsteps = [1, 2]  # see https-free report\n")
    configs = [dict(config_id=name.replace(" ", "_"), name=name, effort=effort,
                    params=dict(rule="linear", leniency=lam, method="token", proposal="marginal", block_size=4))
               for name, (effort, lam, _, _) in CONFIGS.items()]
    configs.append(dict(config_id="unfinished", name="K=4 lam=0", effort="K=4", params=configs[0]["params"]))
    sweep.add_configurations(configs)
    for config, (effort, lam, latency, right) in zip(configs, CONFIGS.values()):
        for i in range(N):
            sweep.put(dict(config_id=config["config_id"], problem_id=f"{i:05d}", problem_index=i, text="#### 1",
                           correct=int(i in right), new_tokens=TOKENS, rounds=10, accepted=[i % 5] * 10,
                           draft_s=latency / 3, verify_s=latency / 2, wall_s=latency, exact=int(lam == 0)))
    sweep.put(dict(config_id="unfinished", problem_id="00000", problem_index=0, text="", correct=1, new_tokens=3,
                   wall_s=0.01))
    sweep.close()
    return path


def test_frontiers_and_hypervolumes(store):
    sweep = load_sweep(store)
    assert [c["name"] for c in sweep["incomplete"]] == ["K=4 lam=0"]  # 1 of 40 problems: left out
    summaries = sweep["summaries"]
    assert [s["name"] for s, on in zip(summaries, pareto_mask(summaries, "latency")) if on] == [
        "K=1 lam=0", "K=2 lam=0", "K=2 lam=0.5"]
    result = analyse(summaries)
    latency = result["latency"]
    assert latency["reference_point"] == {"accuracy": 0.0, "latency_s": pytest.approx(0.33)}
    # areas dominated up to latency 0.33: K=2 lam=0.5 from 0.10, K=2 lam=0 from 0.22, K=1 lam=0 from 0.30
    joint = 0.12 * 0.6 + 0.08 * 0.8 + 0.03 * 0.9
    assert latency["hypervolume_joint"] == pytest.approx(joint)
    assert latency["hypervolume_per_k"] == {"K=1": pytest.approx(0.10 * 0.5 + 0.03 * 0.9),
                                            "K=2": pytest.approx(0.12 * 0.6 + 0.11 * 0.8)}
    assert latency["best_single_k"] == "K=2" and latency["hypervolume_ratio"] == pytest.approx(joint / 0.16)
    throughput = result["throughput"]
    t = {name: TOKENS / c[2] for name, c in CONFIGS.items()}
    joint_t = t["K=1 lam=0"] * 0.9 + (t["K=2 lam=0"] - t["K=1 lam=0"]) * 0.8 + (t["K=2 lam=0.5"] - t["K=2 lam=0"]) * 0.6
    assert throughput["reference_point"] == {"accuracy": 0.0, "throughput": 0.0}
    assert throughput["hypervolume_joint"] == pytest.approx(joint_t)
    assert throughput["hypervolume_ratio"] == pytest.approx(joint_t / max(throughput["hypervolume_per_k"].values()))
    # leads, fastest first: K=2 lam=0 over K=2 lam=0.5 is 8 problems to 0 (McNemar z = 2.83 > 1.96);
    # K=1 lam=0 over K=2 lam=0 is 6 to 2 (z = 1.41): within the noise
    points = {p["name"]: p for p in latency["frontier"]}
    assert [p["name"] for p in latency["frontier"]] == ["K=2 lam=0.5", "K=2 lam=0", "K=1 lam=0"]
    assert points["K=2 lam=0.5"]["lead"] is None
    assert points["K=2 lam=0"]["lead"] == pytest.approx(0.2) and points["K=2 lam=0"]["lead_exceeds_noise"]
    assert points["K=2 lam=0"]["lead_z"] == pytest.approx(8 / 8 ** 0.5)
    assert points["K=1 lam=0"]["lead"] == pytest.approx(0.1) and not points["K=1 lam=0"]["lead_exceeds_noise"]
    assert points["K=1 lam=0"]["accuracy_se"] == pytest.approx((0.9 * 0.1 / N) ** 0.5)
    assert latency["efforts_on_joint_frontier"] == ["K=1", "K=2"] and latency["leads_exceeding_noise"] == 1


def test_frontier_command_json_and_plot(store, tmp_path, capsys):
    plot = tmp_path / "f.png"
    assert main(["frontier", str(store), "--json", "--plot", str(plot)]) == 0
    out = json.loads(capsys.readouterr().out)
    for axis in ("latency", "throughput"):
        r = out[axis]
        assert r["hypervolume_ratio"] == pytest.approx(r["hypervolume_joint"] / r["hypervolume_best_single_k"])
        assert set(r["reference_point"]) == {"accuracy", "latency_s" if axis == "latency" else "throughput"}
    assert out["library"].startswith("moocore") and out["plot"] == str(plot)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["frontier", str(store), "--latency-ref", "1.0", "--no-plot", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["latency"]["reference_point"]["latency_s"] == 1.0
    assert main(["frontier", str(store), "--latency-ref", "0.2", "--no-plot"]) == 2  # not beyond every point
    assert "must exceed" in capsys.readouterr().err


def test_report_is_one_self_contained_page(store, tmp_path, capsys):
    page = tmp_path / "r.html"
    sweep = SweepStore(store)
    sweep.put_artifact("calibration", {"median_rel_error_throughput": 0.12, "d_K": {"1": 0.5}})
    sweep.close()
    assert main(["report", str(store), "--out", str(page)]) == 0
    html = page.read_text()
    references = re.findall(r"""(?:src|href|url)\s*[=(]\s*["']?([^"')\s>]+)""", html)
    assert references and all(r.startswith("data:image/png;base64,") for r in references)
    assert "http" not in html.replace("https-free", "") and "<script" not in html and "@import" not in html
    assert html.count("<img") >= 2  # the frontiers and the accepted-length histograms
    for name in CONFIGS:
        assert f"<td class=\"l\">{name}</td>" in html
    assert "median_rel_error_throughput" in html and "steps = [1, 2]" in html and "K=4 lam=0 (1/40)" in html
    assert "hypervolume joint" in html and "reference point" in html


def test_the_figure_labels_its_speed_axes_by_the_cost_they_show(store):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from specdiff.eval.figures import draw_frontier

    summaries = load_sweep(store)["summaries"]
    for cost, unit in (("wall", "wall s"), ("calls", "priced s")):
        figure, axes = plt.subplots(1, 2)
        for axis, name in zip(axes, ("latency", "throughput")):
            draw_frontier(axis, summaries, name, analyse(summaries)[name], cost=cost)
            assert unit in axis.get_xlabel(), (cost, name, axis.get_xlabel())
        plt.close(figure)
