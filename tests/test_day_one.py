"""Small things a user meets on day one (issue 11, item 10)."""
import json
import os
import subprocess
import sys

import pytest
import torch

from specdiff import cli
from specdiff.cli import build_parser, main


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    import specdiff

    assert capsys.readouterr().out.strip() == f"specdiff {specdiff.__version__}"


def test_python_dash_m_specdiff():
    out = subprocess.run([sys.executable, "-m", "specdiff", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "demo" in out.stdout


def test_a_closed_pipe_ends_quietly():
    """`specdiff demo --rules --json | head` used to end in a BrokenPipeError traceback."""
    process = subprocess.Popen([sys.executable, "-m", "specdiff", "demo", "--rules", "--json", "--samples", "500",
                                "--vocab", "8", "--block", "2", "--threads", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader leaves before the command prints
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr


def test_a_missing_subcommand_module_is_an_error(monkeypatch):
    """A renamed module used to vanish from the command without a word."""
    monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", [*cli.SUBCOMMAND_MODULES, "specdiff.commands.no_such_module"])
    with pytest.raises(ImportError, match="specdiff.commands.no_such_module"):
        build_parser()


@pytest.mark.parametrize("cores", [1, 2, 16])
def test_default_threads_follow_the_cores(monkeypatch, cores):
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert build_parser().parse_args(["bench", "verify"]).threads == min(2, cores)
    from specdiff.commands.demo import default_threads

    assert default_threads(build_parser().parse_args(["demo", "--rules"])) == min(2, cores)
    assert default_threads(build_parser().parse_args(["demo"])) == 1  # the main job: per-op bound, see --help


def _fake_bench_result():
    rows = [{"churn": 0.5, "steps": 50, "method": name, "speedup": speedup, "block_efficiency": efficiency,
             "median_seconds": 0.1, "fd": None} for name, speedup, efficiency in
            (("DDPM", 1.0, 1.0), ("B", 1.8, 3.2))]
    return {"rows": rows, "wall_seconds": 12.0, "units": 3, "targets_at_K250": {}}


def test_continuous_bench_prints_its_rows_without_json(monkeypatch, tmp_path, capsys):
    from specdiff.continuous import bench

    monkeypatch.setattr(bench, "run_bench", lambda **kwargs: _fake_bench_result())
    assert main(["continuous", "bench", "--quick", "--db", str(tmp_path / "b.sqlite")]) == 0
    out = capsys.readouterr().out
    assert "| 0.5 | 50 | B | 1.80 | 3.20 |" in out  # a row, not only the totals
    assert '"wall_seconds": 12.0' in out


def test_continuous_eval_prints_a_table(monkeypatch, capsys):
    from specdiff.continuous import metrics, runs

    class Stats:
        block_efficiency = 2.5

    monkeypatch.setattr(runs, "make_target", lambda model, steps, churn, diffusers=None: None)
    monkeypatch.setattr(runs, "draw", lambda target, method, n, seed, *a, **k: (torch.zeros(n, 64), Stats()))
    monkeypatch.setattr(metrics, "digits_frechet_distance", lambda samples: 1.25)
    monkeypatch.setattr(metrics, "projection_two_sample_pvalues", lambda a, b: [0.3, 0.5])
    assert main(["continuous", "eval", "--num-samples", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("digits, K = 250, churn 0.5, 4 samples per method; DDPM FD 1.250")
    assert lines[1].split() == ["method", "block", "efficiency", "min", "p-value", "vs", "DDPM", "FD"]
    assert [line.split() for line in lines[2:]] == [[m, "2.500", "0.3000", "1.250"] for m in ("R", "D", "B")]
    assert "{" not in "\n".join(lines)  # not a raw dict
    assert main(["continuous", "eval", "--num-samples", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["methods"]["B"]["fd"] == 1.25


def test_digit_grid_has_a_title(monkeypatch, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from specdiff.continuous.images import save_samples

    titles = []
    real_savefig = plt.Figure.savefig
    monkeypatch.setattr(plt.Figure, "savefig", lambda self, *a, **k: (titles.append(self._suptitle.get_text()
                                                                                    if self._suptitle else None),
                                                                       real_savefig(self, *a, **k))[1])
    save_samples(torch.zeros(3, 64), str(tmp_path / "g.png"), "digits", "digits: method B, K = 50")
    assert titles == ["digits: method B, K = 50"]


def test_sample_grid_title_names_method_and_steps(monkeypatch, tmp_path, capsys):
    from specdiff.continuous import images, runs

    seen = {}
    monkeypatch.setattr(runs, "make_target", lambda model, steps, churn, diffusers=None: None)

    class Stats:
        def summary(self):
            return {}

    monkeypatch.setattr(runs, "draw", lambda target, method, n, seed, *a, **k: (torch.zeros(n, 64), Stats()))
    monkeypatch.setattr(images, "save_samples",
                        lambda samples, path, model, title=None: seen.setdefault("title", title) and path)
    assert main(["continuous", "sample", "--method", "D", "--steps", "100", "--num-samples", "2",
                 "--out", str(tmp_path / "g.png"), "--json"]) == 0
    assert "method D" in seen["title"] and "K = 100" in seen["title"]
