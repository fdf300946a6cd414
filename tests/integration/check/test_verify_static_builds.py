"""verify --static on a real build (slow tier: the cpu build)."""

from __future__ import annotations

import json
import shutil

from builder.runtime.elf import read_elf
from tests.support.common import assemble
from tests.support.glibcfloor import retag
from tests.support.manifests import read_raw, reseal, write_raw


def test_static_verify_runs_nothing_and_reads_the_glibc_floor(cpu_runtime, tmp_path):
    rt = tmp_path / "rt"
    shutil.copytree(cpu_runtime, rt, symlinks=True)
    proc = assemble("verify", str(rt), "--static", "--json")
    assert proc.returncode == 0, proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["devices, loader and smoke"]["status"] == "skip"
    assert checks["glibc floor"]["status"] == "pass"
    assert not any(name.startswith("load ") or name == "--list-devices" for name in checks)
    # a runtime that asks for a newer glibc than this host has: a warning with --static, a failure without.
    # The file says so (its version need renamed, its hash and the manifest's facts rewritten from it): a
    # manifest saying so alone is a lie verify refuses (tests/unit/check/test_facts.py). Built elsewhere,
    # it promises no floor.
    server = rt / "bin" / "llama-server"
    need = read_elf(server).max_version("GLIBC_")
    newer = "9." + "9" * (len(need) - 2)            # as long as the need it replaces: "2.34" -> "9.99"
    retag(server, f"GLIBC_{need}".encode(), f"GLIBC_{newer}".encode())
    data = read_raw(rt)
    data.pop("glibc_floor", None)
    write_raw(rt, {k: v for k, v in data.items() if k not in ("schema", "created_by")})
    reseal(rt, changed=("bin/llama-server",))
    assert read_raw(rt)["glibc_min"] == newer
    static = assemble("verify", str(rt), "--static", "--json")
    assert static.returncode == 0 and {c["name"]: c["status"] for c in json.loads(static.stdout)["checks"]}["glibc floor"] == "warn"
    full = assemble("verify", str(rt), "--json")
    assert full.returncode == 1 and any(c["name"] == "glibc floor" and c["status"] == "fail"
                                        for c in json.loads(full.stdout)["checks"])
    for bad in (["--static", "--smoke"], ["--hip-target", "gfx11"]):
        proc = assemble("verify", str(rt), *bad)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr


def test_build_can_verify_statically(cpu_runtime, tmp_path):
    """--verify-static: the runtime is checked by reading files only (built for another host)."""
    out = tmp_path / "runtime-cpu"
    proc = assemble("build", "--recipe", "cpu", "--out", str(out), "--verify-static")
    assert proc.returncode == 0, proc.stderr
    assert "devices, loader and smoke  SKIP  not run: --static reads files only" in proc.stderr
    assert "glibc floor" in proc.stderr and "--list-devices" not in proc.stderr
    both = assemble("build", "--recipe", "cpu", "--out", str(tmp_path / "x"), "--verify-static", "--no-verify")
    assert both.returncode == 2 and "contradict" in both.stderr and not (tmp_path / "x").exists()
