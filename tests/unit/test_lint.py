"""ruff and mypy (settings in pyproject.toml) pass on the checkout: a finding fails the suite with the
linter's own output. Both run from this interpreter's environment (the test extras install them).

Cost on the 2-core machine: ruff about 0.3 s (its cache: .ruff_cache/); mypy strict on builder/ about
COLD s cold and WARM s warm (its cache: .mypy_cache/, both in the checkout and ignored by git)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.common import REPO


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff() -> None:
    proc = _run("ruff", "check", "--no-fix", "--output-format=concise", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy() -> None:
    proc = _run("mypy")          # files, strictness and python_version come from pyproject.toml
    assert proc.returncode == 0, proc.stdout + proc.stderr
