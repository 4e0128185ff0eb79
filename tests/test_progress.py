"""The one progress helper (`specdiff.progress`, issue 19 item 4): quiet off a terminal."""
import subprocess
import sys

import pytest

from specdiff import progress as progress_module
from specdiff.progress import progress


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class _Captured:
    def __init__(self, capsys):
        self.capsys = capsys

    def getvalue(self) -> str:
        return self.capsys.readouterr().err


@pytest.fixture
def off_tty(monkeypatch, capsys):
    """stdout and stderr are captured (not TTYs); a fake clock; the process-wide last line forgotten."""
    monkeypatch.delenv("SPECDIFF_PROGRESS", raising=False)
    clock = _Clock()
    monkeypatch.setattr(progress_module, "time", type("FakeTime", (), {"monotonic": staticmethod(clock)}))
    monkeypatch.setattr(progress_module, "_last_line", [float("-inf")])
    assert not sys.stderr.isatty() and not sys.stdout.isatty()
    return _Captured(capsys), clock


def test_off_a_terminal_all_bars_together_write_at_most_a_line_per_interval(off_tty):
    err, clock = off_tty
    for outer in progress(range(4), desc="configurations"):
        for _ in progress(range(500), desc=f"config {outer}"):
            clock.now += 0.01  # 20 s in all, 2,000 updates
    text = err.getvalue()
    lines = text.splitlines()
    assert 1 <= len(lines) <= 20 / progress_module.LINE_INTERVAL_S + 1, lines
    assert "\r" not in text
    assert all(":" in line and "/500" in line or "/4" in line for line in lines)


def test_off_a_terminal_a_kept_bar_writes_its_closing_line_with_postfix(off_tty):
    err, clock = off_tty
    bar = progress(range(10), desc="train", leave=True, initial=2, total=12)
    for _ in bar:
        bar.set_postfix(loss="0.5")
    lines = err.getvalue().splitlines()
    assert lines[-1].startswith("train: 12/12") and lines[-1].endswith("done loss=0.5")


def test_disabled_writes_nothing_and_still_counts(off_tty):
    err, _ = off_tty
    with progress(total=5, desc="units", enabled=False, leave=True) as bar:
        bar.update(3)
        bar.update(2)
    assert bar.n == bar.total == 5
    assert list(progress([1, 2, 3], enabled=False)) == [1, 2, 3]
    assert err.getvalue() == ""


def test_on_a_terminal_it_is_tqdm(monkeypatch):
    monkeypatch.setenv("SPECDIFF_PROGRESS", "tty")
    from tqdm.auto import tqdm

    bar = progress(range(3), desc="x")
    assert isinstance(bar, tqdm)
    assert list(bar) == [0, 1, 2]


def test_a_piped_demo_writes_a_few_lines_not_hundreds(tmp_path):
    """Before: about 650 lines of bar updates for a piped `specdiff demo` (50 problems)."""
    out = subprocess.run([sys.executable, "-m", "specdiff", "demo", "--problems", "3", "--max-new-tokens", "24",
                          "--plot", ""], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    bar_lines = [line for line in out.stderr.splitlines() if "problem" in line or "configurations" in line]
    assert len(bar_lines) <= 10, out.stderr
    assert "\r" not in out.stderr and "\r" not in out.stdout
