"""A unit built alone (--only-unit) and carried elsewhere, built for real: slow tier (the quick ones,
on made-up unit folders, stay in tests/unit/units/test_unitfolder.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path


from builder.units import unitfolder
from tests.support.common import SHA, TEST_CACHE, assemble
from tests.unit.units.test_unitfolder import LAVAPIPE, RECIPE


def test_a_unit_built_alone_and_carried_elsewhere_merges_and_serves(tmp_path):
    """--only-unit vulkan, carry bin/ + assemble-unit.json, merge with --unit-from, serve on lavapipe."""
    from builder.check.tinymodel import write_tiny_llama
    from tests.support.server import complete, server

    def base_units():   # the other unit's build folders, and when each last changed
        cache = Path(os.environ.get("ASSEMBLE_CACHE", TEST_CACHE / "cache"))   # as conftest.assemble() sets it
        return {d: d.stat().st_mtime_ns for d in (cache / "trees").glob("*/build/vulkan-units-base-*")}

    before = base_units()
    built = assemble("build", "--recipe", str(RECIPE), "--only-unit", "vulkan", check=True)
    unit_dir = Path(built.stdout.strip().splitlines()[-1])
    desc = json.loads((unit_dir / unitfolder.UNIT_FILE).read_text())
    assert desc["unit"] == "vulkan" and desc["sha"] == SHA and desc["defines"]["GGML_BACKEND_DL"] == "ON"
    assert base_units() == before, "--only-unit touched another unit"

    # what a release job uploads: --only-unit --out exports bin/ and the description, nothing else
    exported = tmp_path / "unit-export"
    again = assemble("build", "--recipe", str(RECIPE), "--only-unit", "vulkan", "--out", str(exported), check=True)
    assert Path(again.stdout.strip().splitlines()[-1]) == exported
    assert sorted(p.name for p in exported.iterdir()) == ["assemble-unit.json", "bin"]
    assert sorted(p.name for p in (exported / "bin").iterdir()) == sorted(p.name for p in (unit_dir / "bin").iterdir())
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    refused = assemble("build", "--recipe", str(RECIPE), "--only-unit", "vulkan", "--out", str(tmp_path / "other"))
    assert refused.returncode == 2 and "did not make" in refused.stderr and (tmp_path / "other" / "notes.txt").exists()
    carried = tmp_path / "carried unit"          # ... and the merging job downloads
    shutil.copytree(exported, carried, symlinks=True)

    out = tmp_path / "runtime-vulkan-units"
    merged = assemble("build", "--recipe", str(RECIPE), "--unit-from", f"vulkan={carried}", "--out", str(out),
                      "--check-env", "GGML_VK_VISIBLE_DEVICES=0", cwd=tmp_path)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert f"unit vulkan: built elsewhere, taken from {carried}" in merged.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    units = {u["name"]: u for u in manifest["units"]}
    assert units["vulkan"]["built_elsewhere"]["folder"] == str(carried)
    assert units["base"]["built_elsewhere"] is None
    # the module in the runtime is the carried one, byte for byte (only its RPATH was rewritten)
    module = next(f for f in manifest["files"] if f["path"] == "bin/libggml-vulkan.so")
    assert module["origin"] == str((carried / "bin" / "libggml-vulkan.so").resolve())
    listed = subprocess.run([str(out / "bin" / "llama-server"), "--list-devices"], env=LAVAPIPE, cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert "Vulkan0:" in listed.stdout, listed.stdout + listed.stderr
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    with server(out, model, ["--device", "Vulkan0", "-ngl", "99"], LAVAPIPE, tmp_path) as (base, proc, _log):
        assert complete(base, n=8)["tokens_predicted"] == 8
        assert str(out / "bin" / "libggml-vulkan.so") in Path(f"/proc/{proc.pid}/maps").read_text()

    # the same folder with a flag that changes what the module expects of libggml-base: refused
    desc["defines"]["LLAMA_OPENSSL"] = "OFF"
    (carried / unitfolder.UNIT_FILE).write_text(json.dumps(desc))
    refused = assemble("build", "--recipe", str(RECIPE), "--unit-from", f"vulkan={carried}",
                       "--out", str(tmp_path / "second"), cwd=tmp_path)
    assert refused.returncode == 2 and "disagree on ggml ABI flags: LLAMA_OPENSSL=ON vs OFF" in refused.stderr
    assert not (tmp_path / "second").exists()


def test_only_unit_needs_only_that_units_toolkit(llama_tree, tmp_path):
    """--only-unit hip of rocm-cuda128 must not probe the CUDA unit's container (no engine here)."""
    proc = assemble("build", "--recipe", "rocm-cuda128", "--only-unit", "hip", "--rocm-path", str(tmp_path / "none"),
                    cwd=tmp_path, env={"ASSEMBLE_CONTAINER_ENGINE": str(tmp_path / "no-engine")})
    assert proc.returncode == 2, proc.stderr
    assert "unit hip: no ROCm found" in proc.stderr and "engine" not in proc.stderr, proc.stderr
