"""builder.interpreter: the supported Pythons have one home, pyproject.toml's requires-python."""

from __future__ import annotations

import sys
import tomllib

from builder import interpreter
from tests.support.common import REPO


def _pyproject() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]


def test_read_from_the_checkout():
    interpreter.requires_python.cache_clear()
    assert interpreter.requires_python() == _pyproject() and interpreter.floor() == (3, 11)
    assert sys.version_info[:2] >= interpreter.floor()       # the suite itself runs on a supported one


def test_an_installed_wheel_reads_its_metadata(monkeypatch, tmp_path):
    """Without a pyproject.toml beside the package (a wheel), the installed METADATA says the same."""
    monkeypatch.setattr(interpreter, "_PYPROJECT", tmp_path / "absent" / "pyproject.toml")
    interpreter.requires_python.cache_clear()
    try:
        assert interpreter.requires_python() == _pyproject()
    finally:
        interpreter.requires_python.cache_clear()
