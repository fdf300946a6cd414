"""CI's entry point: both runs always happen and every pytest exit status reaches .ci/run's; the
newer Python is found or its absence fails loudly, never a silent skip."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.common import REPO


def fake_checkout(tmp: Path, test_rc: dict[str, int], newer: str | None) -> Path:
    """.ci/run as it is, beside a scripts/test that logs its arguments and exits as told, and a
    scripts/newer-python that prints `newer` or fails as the real one does."""
    (tmp / ".ci").mkdir()
    (tmp / "scripts").mkdir()
    shutil.copy2(REPO / ".ci" / "run", tmp / ".ci" / "run")
    (tmp / "scripts" / "test").write_text(
        "#!/usr/bin/env bash\n"
        'echo "PYTHON=$PYTHON VENV=${ASSEMBLE_TEST_VENV:-} ARGS=$*" >> "$(dirname "$0")/../calls"\n'
        f'if [ "$*" = "-m not slow" ]; then exit {test_rc["quick"]}; else exit {test_rc["whole"]}; fi\n')
    (tmp / "scripts" / "newer-python").write_text(
        "#!/usr/bin/env bash\n" + (f"echo {newer}\n" if newer else "echo 'no Python >= 3.12 found' >&2; exit 2\n"))
    for f in ("test", "newer-python"):
        (tmp / "scripts" / f).chmod(0o755)
    return tmp


@pytest.mark.parametrize("quick, whole, newer, want", [
    (0, 0, "/opt/py313/bin/python3", 0),
    (1, 0, "/opt/py313/bin/python3", 1),     # a failure of the quick run is not hidden by a good whole run
    (0, 1, "/opt/py313/bin/python3", 1),
    (5, 1, "/opt/py313/bin/python3", 5),     # the first failure's status
    (0, 0, None, 2),                         # no newer Python: a failure, and the whole suite still runs
])
def test_ci_run_runs_both_and_keeps_every_status(tmp_path, quick, whole, newer, want):
    root = fake_checkout(tmp_path, {"quick": quick, "whole": whole}, newer)
    proc = subprocess.run([str(root / ".ci" / "run")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == want, proc.stderr
    calls = (root / "calls").read_text().splitlines()
    whole_run = "PYTHON=/usr/bin/python3 VENV= ARGS="
    assert calls == ([f"PYTHON={newer} VENV=.venv-test-newer ARGS=-m not slow"] if newer else []) + [whole_run]


def test_newer_python_given_is_checked():
    env = {**os.environ, "ASSEMBLE_NEWER_PYTHON": sys.executable}
    proc = subprocess.run([str(REPO / "scripts" / "newer-python")], capture_output=True, text=True, env=env)
    if sys.version_info >= (3, 12):
        assert proc.returncode == 0 and proc.stdout.strip() == sys.executable
    else:
        assert proc.returncode == 2 and "not a Python >= 3.12" in proc.stderr


def test_no_newer_python_fails_loudly(tmp_path):
    """No pyenv and no python3.1x on PATH: exit 2 and a line saying how to provide one."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("ls", "grep", "sort"):
        (bin_ / tool).symlink_to(shutil.which(tool))
    env = {"PATH": str(bin_), "PYENV_ROOT": str(tmp_path / "no-pyenv"), "HOME": str(tmp_path)}
    proc = subprocess.run([shutil.which("bash"), str(REPO / "scripts" / "newer-python")], capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "no Python >= 3.12 found" in proc.stderr and "ASSEMBLE_NEWER_PYTHON" in proc.stderr
