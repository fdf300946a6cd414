"""Values written into a unit file, escaped by systemd's own rules (systemd.unit(5), systemd.exec(5),
systemd.service(5); what each function writes was read back by systemd 252 with `systemctl show`).

Each kind of setting parses its value its own way, so each gets its own function:
  verbatim   the rest of the line is one value (EnvironmentFile=, WorkingDirectory=): only the `%`
             specifiers are expanded, so `%` is written `%%`; quotes would be kept as characters.
  path_item  one entry of a space-separated list of SOURCE[:DEST[:OPTIONS]] (BindReadOnlyPaths=): split on
             white space and `:` with quotes, then specifiers; a backslash escapes the next character but
             C escapes are not decoded (`\\x20` stays four characters). Written in double quotes with `\\`,
             `"` and `:` escaped and `%` doubled.
  exec_path  the program of a command line (ExecStart=): specifiers first, then words with quotes and C escapes,
             then `$VAR` expanded at exec: `%%`, `\\\\`, `\\"` and `$$`.
A value that needs none of this is written as it is, so the common unit reads as before.
"""

from __future__ import annotations

import re

_PLAIN = re.compile(r"[A-Za-z0-9/._+@=,-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


class UnitValueError(ValueError):
    """A value no escaping can put on one line of a unit file (a control character, a byte that is not UTF-8)."""


def _check(value: str) -> str:
    if bad := _CONTROL.search(value):
        raise UnitValueError(f"{value!r} holds {bad.group()!r}, which a unit file cannot carry on one line")
    return value


def verbatim(value: str) -> str:
    """A value that is the whole rest of its line: specifiers doubled; white space at either end would be
    trimmed by systemd, so it is refused."""
    if _check(value) != value.strip():
        raise UnitValueError(f"{value!r} begins or ends with white space, which systemd trims")
    return value.replace("%", "%%")


def path_item(path: str) -> str:
    """One path of a path list such as BindReadOnlyPaths=."""
    if _PLAIN.fullmatch(_check(path)):
        return path
    inner = path.replace("\\", "\\\\").replace('"', '\\"').replace(":", "\\:").replace("%", "%%")
    return f'"{inner}"'


def exec_path(path: str) -> str:
    """The program of ExecStart=: an absolute path (systemd reads `-`, `@`, `+`, `!` and `:` at the start of
    the word, even quoted, as prefixes; a path starts with `/`)."""
    if not path.startswith("/"):
        raise UnitValueError(f"{path!r} is not an absolute path")
    if _PLAIN.fullmatch(_check(path)):
        return path
    inner = path.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{inner}"'
