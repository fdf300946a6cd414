"""package refuses what verify --static fails, on copies of the real cpu build (slow tier)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.check import integrity
from builder.runtime.elf import read_elf
from tests.support.common import assemble
from tests.support.manifests import copy_runtime, reseal
from tests.unit.release.test_package_gate import _tree  # shared with the quick tier

LIBLLAMA = "lib/libllama.so.0.5.0"


def _patchelf(*args: str) -> None:
    subprocess.run(["patchelf", *args], check=True, capture_output=True)


def _needs_libevil(rt: Path) -> str:
    _patchelf("--add-needed", "libevil.so.1", str(rt / LIBLLAMA))
    return LIBLLAMA


def _rpath_tmp_evil(rt: Path) -> str:
    _patchelf("--force-rpath", "--set-rpath", "/tmp/evil", str(rt / LIBLLAMA))
    return LIBLLAMA


def _runpath_instead_of_rpath(rt: Path) -> str:
    """The same path, written as patchelf writes it without --force-rpath: DT_RUNPATH."""
    [same] = {":".join(read_elf(rt / LIBLLAMA).rpath)}
    _patchelf("--set-rpath", same, str(rt / LIBLLAMA))
    assert read_elf(rt / LIBLLAMA).runpath and not read_elf(rt / LIBLLAMA).rpath
    return LIBLLAMA


def _server_is_ls(rt: Path) -> str:
    shutil.copyfile("/bin/ls", rt / "bin" / "llama-server")
    return "bin/llama-server"


def _truncated_libllama(rt: Path) -> str:
    os.truncate(rt / LIBLLAMA, (rt / LIBLLAMA).stat().st_size // 2)
    return LIBLLAMA


DAMAGE = {   # what is done to the runtime: (how, a failed check's name, words of its reason)
    "patchelf --add-needed libevil.so.1": (_needs_libevil, "libraries resolve", "libevil.so.1"),
    "an RPATH of /tmp/evil": (_rpath_tmp_evil, "RPATH of own files", "/tmp/evil"),
    "a RUNPATH instead of the RPATH": (_runpath_instead_of_rpath, "RPATH of own files", "DT_RUNPATH"),
    "llama-server replaced by /bin/ls": (_server_is_ls, "RPATH of own files", "bin/llama-server has no DT_RPATH"),
    "a truncated libllama": (_truncated_libllama, "libraries resolve", "truncated"),
}


def _failed_lines(stderr: str) -> list[str]:
    """verify's lines of failed checks: each FAIL line and the hint line under it."""
    lines = stderr.splitlines()
    out = []
    for i, line in enumerate(lines):
        if "  FAIL  " in line:
            out.append(line)
            if i + 1 < len(lines) and lines[i + 1].lstrip().startswith("hint: "):
                out.append(lines[i + 1])
    return out


@pytest.mark.parametrize("damage", DAMAGE)
def test_package_refuses_what_verify_static_fails(cpu_runtime, tmp_path, damage):
    how, check, words = DAMAGE[damage]
    rt = copy_runtime(cpu_runtime, tmp_path / "runtime-cpu")
    reseal(rt, (how(rt),))
    assert integrity.problems(rt) == []         # the manifest agrees: the old file checks let it through
    before, dist = _tree(tmp_path), tmp_path / "dist"

    verify = assemble("verify", "--static", str(rt))
    proc = assemble("package", str(rt), "--out-dir", str(dist))

    assert verify.returncode == proc.returncode == 1, proc.stderr   # the same status for the same runtime
    assert "Traceback" not in proc.stderr + proc.stdout and proc.stdout == ""
    error, *details = proc.stderr.splitlines()
    assert error == (f"error: {rt}: the runtime fails verify --static ({sum('  FAIL  ' in d for d in details)} "
                     "check(s), below): it is not packaged -- fix: rebuild it with assemble build; never edit a "
                     "runtime by hand")
    assert details == _failed_lines(verify.stderr)                  # verify's own lines, nothing else
    assert any(check in d and "  FAIL  " in d and words in d for d in details), details
    assert _tree(tmp_path) == before and not dist.exists()          # nothing written, the runtime untouched
