"""Issue 49's consistent edits, on the suite's real cpu runtime: each fails `verify --static` naming its
field, and so `package` refuses the runtime; the runtime as built passes (every fact the build wrote is
the one verify reads back from its files: 14 CPU levels, libgomp, the ggml commit of a real build).
The same classes on a small bundled runtime, with more detail: tests/unit/check/test_facts.py."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from builder.check import facts, ggmlcommit
from builder.check.report import FAIL, PASS
from builder.check.verify import verify_runtime
from builder.runtime.manifest import Manifest
from builder.runtime.place import patchelf_tool
from tests.support.common import assemble
from tests.support.manifests import copy_runtime, read_raw, reseal, write_raw


def _edit(rt: Path, change: Callable[[dict], object]) -> None:
    raw = read_raw(rt)
    change(raw)
    write_raw(rt, {k: v for k, v in raw.items() if k not in ("schema", "created_by")})


def _real(rt: Path, link: str) -> str:
    return f"lib/{(rt / 'lib' / link).resolve().name}"


def _value(change: Callable[[Path, dict], object]) -> Callable[[Path], None]:
    """A value of manifest.json edited (the files, and so their hashes, untouched)."""
    return lambda rt: _edit(rt, lambda raw: change(rt, raw))


def _role(path_of: Callable[[Path], str], role: str) -> Callable[[Path], None]:
    return _value(lambda rt, raw: next(f for f in raw["files"] if f["path"] == path_of(rt)).__setitem__("role", role))


def _soname_lie(rt: Path) -> None:
    lib = rt / _real(rt, "libllama.so.0")
    subprocess.run([patchelf_tool(), "--set-soname", "libllama.so.9", str(lib)], check=True)
    reseal(rt, changed=(_real(rt, "libllama.so.0"),))


def _extra_level(rt: Path) -> None:
    shutil.copy2(rt / "bin" / "libggml-cpu-x64.so", rt / "bin" / "libggml-cpu-zen9.so")
    reseal(rt)


EDITS: dict[str, tuple[Callable[[Path], None], str]] = {
    "glibc_min 9.99": (_value(lambda rt, raw: raw.__setitem__("glibc_min", "9.99")), "glibc_min: 9.99, but "),
    "a role set to vendor": (_role(lambda rt: "bin/llama-server", "vendor"), "role of bin/llama-server is vendor"),
    "libllama set to vendor": (_role(lambda rt: _real(rt, "libllama.so.0"), "vendor"), "is vendor, but it is own"),
    "system_libs emptied": (_value(lambda rt, raw: raw.__setitem__("system_libs", [])), "system_libs: lacks libc.so.6"),
    "libgomp left to the host": (_value(lambda rt, raw: raw["system_libs"].append(
        {"soname": "libgomp.so.1", "reason": "the host has it", "needed_by": ["bin/libggml-cpu-x64.so"]})),
        "libgomp.so.1: left to the host, but the runtime carries it"),
    "llama_cpp.sha changed": (_value(lambda rt, raw: raw["llama_cpp"].__setitem__("sha", "1" * 40)),
                              "llama_cpp.sha: 1111"),
    "loader.accepted_risk added": (_value(lambda rt, raw: raw.__setitem__("loader", {"backend_dirs": [],
                                                                                    "accepted_risk": "x"})),
                                   "loader: recorded, but llama_cpp.source.kind is"),
    "units[].environment with LD_PRELOAD": (_value(lambda rt, raw: raw["units"][0]["environment"]["passed"].append(
        "LD_PRELOAD")), "units[0].environment.passed: 'LD_PRELOAD'"),
    "gpu_targets.hip invented": (_value(lambda rt, raw: raw["gpu_targets"].__setitem__("hip", ["gfx1100"])),
                                 "gpu_targets.hip"),
    "fake inputs": (_value(lambda rt, raw: raw.__setitem__("inputs", [{"given": "/x.zip", "kind": "archive",
                                                                       "contributed": ["cpu"]}])),
                    "inputs: 1 recorded"),
    "an unknown key": (_value(lambda rt, raw: raw["files"][0].__setitem__("trusted", True)),
                       "key files[0].trusted is not a key assemble writes"),
    "a lying SONAME, its hash updated": (_soname_lie, "has DT_SONAME libllama.so.9"),
    "an extra CPU module listed": (_extra_level, "bin/libggml-cpu-zen9.so is no CPU level ggml builds"),
}


@pytest.fixture
def good(cpu_runtime, tmp_path) -> Path:
    return copy_runtime(cpu_runtime, tmp_path / "runtime-cpu")


def test_the_built_runtime_states_what_its_files_say(cpu_runtime):
    checks = {c.name: c for c in verify_runtime(cpu_runtime, static=True).checks}
    assert checks[facts.NAME].status == PASS, checks[facts.NAME].reason
    m = Manifest.load(cpu_runtime)
    base = next(p for p in (cpu_runtime / "lib").glob("libggml-base.so*") if p.is_file() and not p.is_symlink())
    commit = ggmlcommit.built_from(base)
    assert commit is None or m.llama_cpp.sha.startswith(commit)


def test_every_class_of_consistent_edit_fails_and_package_refuses(good, tmp_path):
    for name, (change, words) in EDITS.items():
        rt = copy_runtime(good, tmp_path / name.replace(" ", "-") / "runtime-cpu")
        change(rt)
        report = verify_runtime(rt, static=True)
        failed = {c.name: c.reason for c in report.checks if c.status == FAIL}
        assert any(words in reason for reason in failed.values()), (name, failed)
    rt = copy_runtime(good, tmp_path / "packaged" / "runtime-cpu")
    _edit(rt, lambda raw: raw.__setitem__("glibc_min", "9.99"))
    proc = assemble("package", str(rt), "--out-dir", str(tmp_path / "dist"))
    assert proc.returncode == 1 and "glibc_min: 9.99" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
