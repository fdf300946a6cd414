"""`repair --dry-run` fails where the real run fails, with the same exit status (issue 49 item 7): it
runs every step but the writing -- the --out check, the plan and its refusals, then the placing and
the verify on a copy in its scratch folder -- and shows the verify table. The issue's case: for an
upstream-style Windows zip the dry run exited 0 and said nothing of the working-directory module
search that the real run then failed (exit 1). --out is never written by a dry run.

Inputs made here: Linux builds of real ELF files (test_discover.make_build), Windows zips of minimal
PE files (pefiles.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.common import assemble, one_error_line
from tests.unit.prebuilt.pefiles import upstream_windows_zip
from tests.unit.prebuilt.test_discover import make_build
from tests.unit.prebuilt.test_loader_cwd import unpatched_build

ACCEPT = ("--accept-loader-risk", "a test: started only from its own folder")
_ROW = re.compile(r"^  (\S.*?)\s{2,}(PASS|FAIL|WARN|SKIP)\s", re.M)


def _failed(stderr: str) -> list[str]:
    return [name for name, status in _ROW.findall(stderr) if status == "FAIL"]


def _state(path: Path) -> list[tuple[str, int]]:
    return sorted((str(p), p.stat().st_mtime_ns) for p in [path, *path.rglob("*")] if p.exists())


def _both(cwd: Path, out: Path, *args: str):
    """The dry run, then the real run, of the same command; the dry run leaves --out and its folder as
    they were."""
    before = _state(cwd)
    dry = assemble("repair", *args, "--out", str(out), "--dry-run", cwd=cwd)
    assert _state(cwd) == before, "a dry run wrote something"
    return dry, assemble("repair", *args, "--out", str(out), cwd=cwd)


def test_the_windows_working_directory_search_fails_the_dry_run_as_the_real_run(tmp_path):
    z = upstream_windows_zip(tmp_path)
    dry, real = _both(tmp_path, tmp_path / "rt", str(z), "--name", "w")
    assert (dry.returncode, real.returncode) == (1, 1), dry.stderr + real.stderr
    assert _failed(dry.stderr) == _failed(real.stderr) == ["module search"]
    assert "verify fails until --accept-loader-risk REASON" in dry.stdout
    assert dry.stderr.strip().splitlines()[-1].startswith(
        f"error: {tmp_path / 'rt'}: the repaired runtime (dry run) failed verification")
    assert not (tmp_path / "rt").exists()
    dry, real = _both(tmp_path, tmp_path / "rt", str(z), "--name", "w", *ACCEPT)
    assert (dry.returncode, real.returncode) == (0, 0), dry.stderr + real.stderr
    assert "module search    WARN" in dry.stderr and "runtime ready" not in dry.stderr


def test_a_patched_windows_loader_passes_both(tmp_path):
    z = upstream_windows_zip(tmp_path, reads_cwd=False)
    dry, real = _both(tmp_path, tmp_path / "rt", str(z), "--name", "w")
    assert (dry.returncode, real.returncode) == (0, 0), dry.stderr + real.stderr
    assert "working directory" not in dry.stdout and _failed(dry.stderr) == []


@pytest.mark.parametrize("case", ["plain", "unpatched", "unpatched-accepted"])
def test_linux_dry_runs_exit_and_fail_as_the_real_run(tmp_path, case):
    root = (make_build if case == "plain" else unpatched_build)(tmp_path / "b")
    args = [str(root), "--name", "b", "--verify-static", *(ACCEPT if case.endswith("accepted") else ())]
    dry, real = _both(tmp_path, tmp_path / "rt", *args)
    want = 1 if case == "unpatched" else 0
    assert (dry.returncode, real.returncode) == (want, want), dry.stderr + real.stderr
    assert _failed(dry.stderr) == _failed(real.stderr) == (["working-directory modules"] if want else [])


def test_a_dry_run_that_cannot_run_the_programs_fails_as_the_real_run(tmp_path):
    """Without --verify-static both start llama-server; these test programs list no devices."""
    root = make_build(tmp_path / "b")
    dry, real = _both(tmp_path, tmp_path / "rt", str(root), "--name", "b", *ACCEPT)
    assert (dry.returncode, real.returncode) == (1, 1)
    assert "--list-devices" in _failed(dry.stderr) and _failed(dry.stderr) == _failed(real.stderr)


@pytest.mark.parametrize("case", ["target", "out-is-a-file", "out-is-not-a-runtime"])
def test_refusals_are_the_same_line_and_exit_2(tmp_path, case):
    root = make_build(tmp_path / "b")
    out, args = tmp_path / "rt", [str(root), "--name", "b", "--verify-static"]
    if case == "target":
        args += ["--target", "llama-cli"]
    elif case == "out-is-a-file":
        out.write_text("mine")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    dry, real = _both(tmp_path, out, *args)
    assert one_error_line(dry, 2) == one_error_line(real, 2)
    assert not (out / "manifest.json").exists()
