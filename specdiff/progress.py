"""One progress helper for every long loop: commands, sweeps, training and the engine's batches.

    for item in progress(items, desc="configurations", enabled=not args.json):
        ...
    bar = progress(total=n, desc="units"); bar.update(); bar.set_postfix(loss="0.42"); bar.close()

- On a terminal (stdout and stderr both TTYs) it is a tqdm bar, with tqdm's own refresh.
- Off a terminal (CI logs, pipes, files) every bar writes plain lines to stderr, and all the bars of
  the process together write at most one line every `LINE_INTERVAL_S` seconds. A bar made with
  `leave=True` also writes one closing line. A piped `specdiff demo` writes a handful of lines, not
  hundreds of carriage-return updates.
- Disabled (`enabled=False`: the commands pass `not args.json`), it writes nothing.

`SPECDIFF_PROGRESS=tty|lines|off` overrides the terminal test (for a log you want full bars in, or none).
"""
from __future__ import annotations

import os
import sys
import time

LINE_INTERVAL_S = 5.0  # off a terminal: at most one line per this many seconds, all bars together
_last_line = [float("-inf")]  # the process's last line off a terminal (time.monotonic)


def progress(iterable=None, *, total: int | None = None, desc: str | None = None, unit: str = "it",
             enabled: bool = True, leave: bool = False, position: int | None = None, initial: int = 0,
             mininterval: float | None = None):
    """A bar over `iterable` (or a manual one with `total`): tqdm on a terminal, rate-limited lines off one.
    Supports iteration, `update(n)`, `set_postfix(**values)`, `set_description(desc)`, `close()`, `n`,
    `total`, and use as a context manager, in all three modes."""
    if total is None and iterable is not None and hasattr(iterable, "__len__"):
        total = len(iterable)
    mode = _mode() if enabled else "off"
    if mode == "tty":
        from tqdm.auto import tqdm

        options = {} if mininterval is None else {"mininterval": mininterval}
        return tqdm(iterable, total=total, desc=desc, unit=unit, leave=leave, position=position, initial=initial,
                    **options)
    return _Lines(iterable, total, desc or "", unit, leave, initial, quiet=mode == "off")


def _mode() -> str:
    forced = os.environ.get("SPECDIFF_PROGRESS", "").strip().lower()
    if forced in ("tty", "lines", "off"):
        return forced
    interactive = all(getattr(stream, "isatty", lambda: False)() for stream in (sys.stdout, sys.stderr))
    return "tty" if interactive else "lines"


class _Lines:
    """A bar off a terminal: "desc: n/total unit [elapsed] key=value" lines, rate-limited process-wide."""

    def __init__(self, iterable, total, desc: str, unit: str, leave: bool, initial: int, quiet: bool):
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.leave, self.n, self.quiet, self.closed = leave, int(initial), quiet, False
        self.postfix, self.start = "", time.monotonic()

    def __iter__(self):
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()

    def __len__(self):
        return self.total or 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if not self.quiet and now - _last_line[0] >= LINE_INTERVAL_S:
            self._write(now)

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **values) -> None:
        values = {**(ordered_dict or {}), **values}
        self.postfix = " ".join(f"{key}={value}" for key, value in values.items())

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        self.postfix = text

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        self.desc = desc or ""

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.leave and not self.quiet:
            self._write(time.monotonic(), closing=True)

    def _write(self, now: float, closing: bool = False) -> None:
        _last_line[0] = now
        count = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
        line = f"{self.desc}: {count} {self.unit} [{now - self.start:.0f} s]{' done' if closing else ''}"
        if self.postfix:
            line += f" {self.postfix}"
        print(line, file=sys.stderr, flush=True)
