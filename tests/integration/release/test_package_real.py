"""package on the real cpu runtime: reproducible archives, upstream names, a no-op rebuild (slow tier: the cpu build)."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

from builder.release import matrix
from builder.runtime import manifest
from builder.runtime.manifest import Manifest
from builder.source.archive import extract_members
from tests.support.common import assemble
from tests.support.manifests import read_raw


def test_no_op_rebuild_of_the_cpu_runtime_skips_the_compiler(cpu_runtime, tmp_path):
    proc = assemble("build", "--recipe", "cpu", "--out", str(tmp_path / "runtime-cpu"))
    assert proc.returncode == 0, proc.stderr
    assert "unchanged since its last build" in proc.stderr
    assert "configure main" not in proc.stderr.replace("unchanged", "")


def test_real_cpu_runtime_packages_reproducibly(cpu_runtime, tmp_path):
    a = assemble("package", str(cpu_runtime), "--out-dir", str(tmp_path / "a"), "--json", "--format", "tar.gz")
    b = assemble("package", str(cpu_runtime), "--out-dir", str(tmp_path / "b"), "--json", "--format", "tar.gz")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    pa, pb = Path(json.loads(a.stdout)["archive"]), Path(json.loads(b.stdout)["archive"])
    assert pa.read_bytes() == pb.read_bytes()
    data = read_raw(cpu_runtime)
    assert pa.name == f"runtime-cpu-{data['llama_cpp']['sha'][:12]}-linux-x86_64.tar.gz"
    assert pa.name == next(e for e in matrix.entries() if e.name == "cpu").artifact + ".tar.gz"
    assert subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=pa.parent, capture_output=True).returncode == 0
    out = tmp_path / "unpacked"
    with tarfile.open(pa) as tar:
        extract_members(tar, out)   # tarfile's data filter, or ours before Python 3.11.4
    rt = out / "runtime-cpu"
    assert manifest.check_files(rt, Manifest.load(rt)) == []
    ran = subprocess.run([rt / "bin" / "llama-cli", "--version"], capture_output=True, text=True, env={}, timeout=60)
    assert ran.returncode == 0 and data["llama_cpp"]["sha"][:7] in (ran.stdout + ran.stderr)
    bom = json.loads((pa.parent / (pa.name[: -len(".tar.gz")] + ".cdx.json")).read_text())
    vendor = [f for f in data["files"] if f["role"] == "vendor"]
    listed = {c["bom-ref"] for c in bom["components"]}
    assert all(f"file:{f['path']}" in listed for f in vendor)
