"""`specdiff sweep` (issue 14, item 2): one row per (configuration, problem) in a WAL SQLite store
with UNIQUE (config_id, problem_id); a rerun skips finished rows; a real `kill -9` loses at most the
problem in flight and never duplicates a row."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

from sweep_helpers import store_rows, write_config

from specdiff.cli import main


def test_a_sweep_writes_one_row_per_configuration_and_problem_and_resumes(tmp_path, capsys):
    config, store = write_config(tmp_path / "s.toml", problems=2), tmp_path / "s.sqlite"
    assert main(["sweep", config, "--store", str(store), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["configurations"] == 2 and summary["rows"] == {"total": 4, "resumed": 0, "run": 4, "in_store": 4}
    connection = sqlite3.connect(store)
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    unique = [row for row in connection.execute("PRAGMA index_list(results)") if row[2]]  # unique indexes
    assert [[c[2] for c in connection.execute(f"PRAGMA index_info({u[1]})")] for u in unique] == [
        ["config_id", "problem_id"]]
    connection.row_factory = sqlite3.Row
    for row in connection.execute("SELECT * FROM results"):
        accepted = json.loads(row["accepted"])
        assert row["text"] and row["correct"] in (0, 1) and row["new_tokens"] > 0 and row["prompt_tokens"] > 0
        assert len(accepted) == row["rounds"] and all(0 <= a <= 6 for a in accepted)
        assert row["wall_s"] > 0 and row["draft_s"] > 0 and row["verify_s"] > 0
    before = store_rows(store, timing=True)
    assert main(["sweep", config, "--store", str(store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == {"total": 4, "resumed": 4, "run": 0, "in_store": 4}
    assert store_rows(store, timing=True) == before  # nothing rewritten


def test_kill_9_loses_at_most_the_problem_in_flight_and_never_duplicates(tmp_path, capsys):
    config, store = write_config(tmp_path / "k.toml", problems=10), tmp_path / "k.sqlite"
    code = f"import sys; from specdiff.cli import main; sys.exit(main(['sweep', {config!r}, '--store', {str(store)!r}, '--json']))"
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               cwd=os.getcwd())
    seen, deadline = 0, time.time() + 50
    try:
        while time.time() < deadline and process.poll() is None:
            if store.exists():
                try:
                    with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1) as connection:
                        seen = connection.execute("SELECT COUNT(*) FROM results").fetchone()[0]
                except sqlite3.OperationalError:
                    seen = 0
            if seen >= 3:
                os.kill(process.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL, "the sweep finished before it could be killed"
    survived = store_rows(store, timing=True)
    assert seen <= len(survived) <= seen + 1 < 20  # the rows seen are durable; at most the one in flight is lost
    assert main(["sweep", config, "--store", str(store), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == {"total": 20, "resumed": len(survived), "run": 20 - len(survived), "in_store": 20}
    connection = sqlite3.connect(store)
    count, distinct = connection.execute(
        "SELECT COUNT(*), COUNT(DISTINCT config_id || '/' || problem_id) FROM results").fetchone()
    assert count == distinct == 20
    assert set(survived) <= set(store_rows(store, timing=True))  # the rows written before the kill stand as they were


def test_check_lists_the_configurations_and_runs_nothing(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text("""[models]\ndrafter = "masked-drafter"\nverifier = "verifier"\n[task]\nname = "arith"
problems = 5\n[grid]\nsteps = [1, 4]\nthreshold = [0.9]\nrule = ["linear", "cactus"]\nlam = [0.0, 0.2]
delta = [0.5, 1, 2]\n""")
    assert main(["sweep", str(config), "--store", str(tmp_path / "c.sqlite"), "--check", "--json"]) == 0
    names = [c["name"] for c in json.loads(capsys.readouterr().out)["configurations"]]
    assert len(names) == 3 * (2 + 3) and len(set(names)) == len(names)  # (K=1, K=4, tau=0.9) x (2 lam + 3 delta)
    assert "tau=0.9 cactus delta=2 token marginal B=8" in names and "K=4 linear lam=0.2 token marginal B=8" in names
    assert not (tmp_path / "c.sqlite").exists()
