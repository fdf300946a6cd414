"""Every example a --help prints parses with the real argument parser: no example names an
option its command does not take (show once offered build's --out and --check-env)."""

from __future__ import annotations

import re
import shlex

import pytest

from builder.cli.main import parser
from builder.cli import main as cli_main


def _commands() -> dict[str, object]:
    sub = next(a for a in parser()._actions if a.dest == "command")
    return dict(sub.choices)


def _example_lines(epilog: str) -> list[str]:
    """`assemble ...` lines of an epilog, joined over trailing backslashes, comments and notes cut."""
    lines, joined = [], ""
    for raw in (epilog or "").splitlines():
        joined += raw.strip()
        if joined.endswith("\\"):
            joined = joined[:-1] + " "
            continue
        if joined.startswith(("assemble ", 'echo "matrix=$(assemble')) or "$(assemble " in joined:
            lines.append(joined)
        joined = ""
    return lines


def _argv(line: str) -> list[str]:
    if line.startswith("assemble "):
        line = re.sub(r'"\$\([^)]*\)"', "/some/dir", line)     # a value from another command
    else:
        line = re.search(r"\$\((assemble [^)]*)\)", line).group(1)
    line = re.split(r"\s#\s|\s{2,}(?=[a-z(])|\s\|\s|\s>\s|\s>>\s", line)[0]   # comments, notes, pipes
    return shlex.split(line)[1:]


def test_every_help_example_parses():
    commands = _commands()
    checked = 0
    for name, sub in commands.items():
        for line in _example_lines(sub.epilog):
            argv = _argv(line)
            try:
                parser().parse_args(argv)
            except SystemExit as exc:   # the parser's one-line error exits 2
                pytest.fail(f"`assemble {name} --help` example does not parse: {line!r} (exit {exc.code})")
            checked += 1
    assert checked >= 20, checked
    assert cli_main.EPILOG      # the top-level help keeps its own text
