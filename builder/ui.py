"""Console output: step lines, progress bars, colours only on a terminal.

Everything the tool says goes through here, to stderr, so stdout stays clean for
--json and for commands whose output is data (show, list).
"""

from __future__ import annotations

import os
import sys
import time

QUIET, NORMAL, VERBOSE = 0, 1, 2
_level = NORMAL


def set_level(level: int) -> None:
    global _level  # noqa: PLW0603 -- the process-wide output level (-q, --json)
    _level = level


def level() -> int:
    return _level


def is_tty() -> bool:
    return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


def _colour(code: str, text: str) -> str:
    if is_tty() and not os.environ.get("NO_COLOR"):
        return f"\033[{code}m{text}\033[0m"
    return text


def step(text: str) -> None:
    if _level >= NORMAL:
        print(_colour("1", "==> ") + text, file=sys.stderr, flush=True)


def info(text: str) -> None:
    if _level >= NORMAL:
        print("    " + text, file=sys.stderr, flush=True)


def detail(text: str) -> None:
    if _level >= VERBOSE:
        print("    " + text, file=sys.stderr, flush=True)


def warn(text: str) -> None:
    print(_colour("33", "warning: ") + text, file=sys.stderr, flush=True)


def error(text: str) -> None:
    print(_colour("31", "error: ") + text, file=sys.stderr, flush=True)


def ok(text: str) -> str:
    return _colour("32", text)


def bad(text: str) -> str:
    return _colour("31", text)


def fmt_seconds(s: float) -> str:
    s = int(s)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


class Progress:
    """A one-line bar on a terminal; a line per 10% elsewhere; nothing when quiet."""

    def __init__(self, label: str, total: float | None, unit: str = "items"):
        self.label, self.total, self.unit = label, total, unit
        self.done = 0.0
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._last_decile = -1
        self.note = ""

    def _amount(self, v: float) -> str:
        return fmt_bytes(v) if self.unit == "bytes" else f"{int(v)}"

    def update(self, done: float, total: float | None = None, note: str = "") -> None:
        self.done = done
        if total is not None and total != self.total:
            self.total = total
            self._last_decile = -1  # a new phase (Ninja sub-build): count deciles afresh
        self.note = note
        if _level < NORMAL:
            return
        now = time.monotonic()
        elapsed = now - self.start
        frac = (self.done / self.total) if self.total else None
        if is_tty():
            if now - self._last_draw < 0.1 and not (frac is not None and frac >= 1):
                return
            self._last_draw = now
            width = 28
            if frac is not None:
                filled = int(width * min(frac, 1.0))
                bar = "#" * filled + "." * (width - filled)
                eta = f" ETA {fmt_seconds(elapsed / frac - elapsed)}" if 0 < frac < 1 and elapsed > 2 else ""
                amount = f"{self._amount(self.done)}/{self._amount(self.total or 0)}"
                line = f"\r{self.label} [{bar}] {amount} {fmt_seconds(elapsed)}{eta} {note}"
            else:
                line = f"\r{self.label} {self._amount(self.done)} {fmt_seconds(elapsed)} {note}"
            cols = 120
            try:
                cols = os.get_terminal_size(sys.stderr.fileno()).columns
            except OSError:
                pass
            print(line[: cols - 1].ljust(cols - 1), end="", file=sys.stderr, flush=True)  # overwrite the old line
        elif frac is not None:
            decile = int(min(frac, 1.0) * 10)
            if decile > self._last_decile:
                self._last_decile = decile
                print(f"    {self.label}: {decile * 10}% ({self._amount(self.done)}/{self._amount(self.total or 0)}, "
                      f"{fmt_seconds(elapsed)})", file=sys.stderr, flush=True)

    def finish(self, note: str = "") -> None:
        if _level >= NORMAL and is_tty():
            print(file=sys.stderr, flush=True)
        if note:
            info(f"{self.label}: {note} in {fmt_seconds(time.monotonic() - self.start)}")
