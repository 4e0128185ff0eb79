"""The sweep runner's executors (issue 14, items 1-2): a process pool hands every result back once;
`specdiff sweep --backend ray` on a local Ray cluster on CPU writes the same store as the local
backend (every column but the timings), and Ray actors run each configuration's problems together."""
import json

import pytest
from sweep_helpers import Item, pid_unit, store_rows, write_config

from specdiff.cli import main
from specdiff.eval.runner import connect_ray, execute, pending


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray cluster of 2 CPUs for the module (started as the runner starts one: its workers
    import this specdiff and the tests' helpers)."""
    pytest.importorskip("ray", reason="Ray is the optional 'sweep' extra")
    ray, started = connect_ray(2, None)
    yield ray
    if started:
        ray.shutdown()


def test_process_pool_returns_each_unit_once_in_this_process():
    units = [Item(f"g{g}/u{u}", f"g{g}") for g in range(3) for u in range(2)]
    got = []
    execute(units, pid_unit, {"scale": 2}, lambda unit, result: got.append((unit.key, result["key"])), workers=2,
            progress=False)
    assert sorted(got) == sorted((u.key, u.key) for u in units)
    assert pending(units, {"g0/u0", "g2/u1"}) == [u for u in units if u.key not in ("g0/u0", "g2/u1")]


def test_ray_backend_writes_the_same_store_as_the_local_one(tmp_path, capsys, local_ray):
    config = write_config(tmp_path / "r.toml", problems=3, steps=(1, 2))
    local, remote = tmp_path / "local.sqlite", tmp_path / "ray.sqlite"
    assert main(["sweep", config, "--store", str(local), "--json"]) == 0
    capsys.readouterr()
    assert main(["sweep", config, "--store", str(remote), "--backend", "ray", "--workers", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["backend"] == "ray" and summary["rows"]["in_store"] == 12
    assert store_rows(remote) == store_rows(local) and len(store_rows(local)) == 12  # texts, verdicts, tokens, rounds


def test_ray_actors_run_a_group_in_one_process(local_ray):
    units = [Item(f"g{g}/u{u}", f"g{g}") for g in range(3) for u in range(3)]
    pids = {}
    execute(units, pid_unit, {"scale": 1}, lambda unit, result: pids.setdefault(unit.group, set()).add(result["pid"]),
            workers=2, executor="ray", progress=False)
    assert sorted(pids) == ["g0", "g1", "g2"] and all(len(p) == 1 for p in pids.values())  # a group on one actor
