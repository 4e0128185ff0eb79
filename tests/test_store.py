"""The results store refuses a damaged or foreign file when it opens, naming the file and how to
start fresh (issue 11, item 4); a good file and a file from before the schema version still open."""
import sqlite3

import pytest

from specdiff.eval.store import SCHEMA_VERSION, ResultStore, StoreError

PAGE = 4096


@pytest.fixture
def good(tmp_path):
    """A store of 300 units of ~600 bytes: about 55 pages."""
    path = tmp_path / "good.sqlite"
    store = ResultStore(path)
    for i in range(300):
        store.put("sweep", f"unit{i}", {"text": "y" * 600, "i": i})
    store.close()
    assert path.stat().st_size > 40 * PAGE
    return path


def _damaged(good, tmp_path, name, change):
    data = bytearray(good.read_bytes())
    path = tmp_path / name
    path.write_bytes(bytes(change(data)))
    return path


def _refused(path, *fragments):
    with pytest.raises(StoreError) as error:
        ResultStore(path)
    message = str(error.value)
    assert str(path) in message and "start fresh" in message and "--db" in message
    for fragment in fragments:
        assert fragment in message
    return message


def test_a_good_store_opens_and_keeps_its_units(good):
    store = ResultStore(good)
    assert len(store.load("sweep")) == 300
    assert store.connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    store.close()


def test_not_a_sqlite_file(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("these are my notes, not a database\n" * 50)
    _refused(path, "is not a SQLite file")
    assert path.read_text().startswith("these are my notes")  # left as it was


def test_truncated_file(good, tmp_path):
    _refused(_damaged(good, tmp_path, "half.sqlite", lambda d: d[: len(d) // 2]), "is damaged")
    _refused(_damaged(good, tmp_path, "header.sqlite", lambda d: d[:60]), "is damaged")


def _overwrite(data, start, fill):
    data[start : start + len(fill)] = fill
    return data


def test_late_page_corrupted(good, tmp_path):
    """A b-tree page header near the end (quick_check), and a byte inside a late row's payload
    (which quick_check cannot see: every payload is decoded at open)."""
    size = good.stat().st_size
    _refused(_damaged(good, tmp_path, "btree.sqlite", lambda d: _overwrite(d, size - 2 * PAGE, b"\xff" * 200)),
             "is damaged")
    _refused(_damaged(good, tmp_path, "utf8.sqlite", lambda d: _overwrite(d, size - 100, b"\xff" * 50)),
             "is damaged", "unreadable")
    _refused(_damaged(good, tmp_path, "json.sqlite", lambda d: _overwrite(d, size - 100, b"\x01" * 50)),
             "is damaged", "unreadable")


def test_another_schema(tmp_path):
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE measurements (a, b)")
    _refused(foreign, "another schema", "measurements")
    other_columns = tmp_path / "columns.sqlite"
    with sqlite3.connect(other_columns) as connection:
        connection.execute("CREATE TABLE results (run TEXT, value REAL)")
    _refused(other_columns, "another schema", "'run', 'value'")
    newer = tmp_path / "newer.sqlite"
    with sqlite3.connect(newer) as connection:
        connection.execute("PRAGMA user_version = 99")
    _refused(newer, "schema version 99")


def test_a_store_written_before_the_schema_version_is_adopted(tmp_path):
    from specdiff.eval.store import SCHEMA

    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute(SCHEMA)
        connection.execute("INSERT INTO results VALUES ('s', 'k', '{\"a\": 1}', 0.0)")
    store = ResultStore(path)
    assert store.load("s") == {"k": {"a": 1}}
    assert store.connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    store.close()


def test_continuous_bench_refuses_a_damaged_db_before_any_work(tmp_path, capsys, monkeypatch):
    import specdiff.continuous.bench as bench
    from specdiff.cli import main

    def no_work(*args, **kwargs):
        raise AssertionError("a unit ran")

    monkeypatch.setattr(bench, "_execute", no_work)
    path = tmp_path / "bench.sqlite"
    path.write_bytes(b"\x00" * 5000)
    assert main(["continuous", "bench", "--quick", "--db", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "not a SQLite file" in err and "start fresh" in err
