"""The cpu recipe end to end: real llama.cpp from the PyPI sdist mirror, bundled, moved,
started with an empty environment and a hostile LD_LIBRARY_PATH, answering a request."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from builder.check.tinymodel import write_tiny_llama
from builder.config import cpulevels
from tests.support.common import SHA, TEST_CACHE, assemble
from tests.support.server import complete, decoy_folder, server



@pytest.fixture(scope="session")
def spm_model(tmp_path_factory, cpu_runtime) -> Path:
    vocab = TEST_CACHE / "cache" / "sources" / SHA / "models" / "ggml-vocab-llama-spm.gguf"
    return write_tiny_llama(tmp_path_factory.mktemp("model") / "tiny.gguf", vocab_from=vocab)


def test_runtime_layout(cpu_runtime):
    m = json.loads((cpu_runtime / "manifest.json").read_text())
    assert m["llama_cpp"]["sha"] == SHA
    assert m["llama_cpp"]["source"]["kind"] in ("sdist", "git")
    assert (cpu_runtime / "bin" / "llama-server").is_file()
    # every CPU level as a module next to the executable; ggml picks the best at run time
    assert sorted(p.name for p in (cpu_runtime / "bin").glob("libggml-cpu*.so")) == sorted(
        f"libggml-cpu-{lv.name}.so" for lv in cpulevels.LEVELS)
    assert (cpu_runtime / "lib" / "libllama.so.0").is_symlink()  # SONAME chains kept
    assert not list((cpu_runtime / "lib").glob("libstdc++*")) and not list((cpu_runtime / "lib").glob("libc.so*"))
    # the C++ runtime floor is recorded (ours link libstdc++ from the host): a version, not null
    assert m["glibc_min"] and m["glibcxx_min"] and m["glibcxx_min"].startswith("3.4.")
    # the glibc floor: the recipe states none, so the build host's glibc is promised; the file named
    # needs the recorded version (read again from the file)
    from builder.config.glibc import host_glibc
    from builder.runtime.elf import read_elf
    floor = m["glibc_floor"]
    assert floor["promised"] == host_glibc() and floor["stated_by"] == "build host"
    assert read_elf(cpu_runtime / floor["needed_by"]).max_version("GLIBC_") == m["glibc_min"]
    roles = {f["path"]: f["role"] for f in m["files"]}
    assert roles["bin/llama-server"] == "own"
    assert any(p.startswith("lib/libgomp") and r == "vendor" for p, r in roles.items())


def test_moved_runtime_serves_with_empty_env_and_decoys(cpu_runtime, spm_model, tmp_path):
    # A second build into another folder reuses the build tree: nothing is compiled again. It runs in
    # a release pipeline's environment: SOURCE_DATE_EPOCH (which turns ggml's AVX..F16C defaults off)
    # and flags meant for other tools change neither the plan nor the stamp.
    second = tmp_path / "second" / "runtime-cpu"
    proc = assemble("build", "--recipe", "cpu", "--out", str(second), "-v", check=True,
                    env={"SOURCE_DATE_EPOCH": "1700000000", "CFLAGS": "-O0", "CMAKE_BUILD_TYPE": "Debug"})
    assert "reusing" in proc.stderr
    assert "Building C" not in proc.stderr and "unchanged since its last build" in proc.stderr  # the build stamp
    first, again = (json.loads((rt / "manifest.json").read_text())["units"][0] for rt in (cpu_runtime, second))
    assert first["build_dir"] == again["build_dir"] and first["configure"] == again["configure"]
    assert set(again["environment"]["scrubbed"]) == {"SOURCE_DATE_EPOCH", "CFLAGS", "CMAKE_BUILD_TYPE"}
    cache = (Path(again["build_dir"]) / "CMakeCache.txt").read_text()
    isa = {line.split(":")[0]: line.split("=")[-1] for line in cache.splitlines()
           if line.split(":")[0] in {f"GGML_{f}" for f in cpulevels.FEATURES} | {"GGML_CPU_ALL_VARIANTS", "GGML_NATIVE"}}
    assert isa["GGML_CPU_ALL_VARIANTS"] == "ON" and isa["GGML_NATIVE"] == "OFF"
    assert {k: v for k, v in isa.items() if k.removeprefix("GGML_") in cpulevels.FEATURES} == {
        f"GGML_{f}": "OFF" for f in cpulevels.FEATURES}      # every one set by the plan, none by the environment

    moved = tmp_path / "a folder with spaces" / "runtime cpu"
    moved.parent.mkdir()
    shutil.move(second, moved)
    decoy = decoy_folder(tmp_path)
    neutral = tmp_path / "cwd"
    neutral.mkdir()
    env = {"LD_LIBRARY_PATH": str(decoy)}
    with server(moved, spm_model, [], env, neutral) as (base, proc, _log):
        body = complete(base, n=16)
        assert body["tokens_predicted"] == 16
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert str(decoy) not in maps
        assert str(moved / "lib" / "libllama.so.0.5.0") in maps or str(moved / "lib") in maps


def test_verify_smoke_cpu(cpu_runtime):
    proc = assemble("verify", str(cpu_runtime), "--smoke", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stdout
    names = {c["name"]: c["status"] for c in report["checks"]}
    assert names["smoke CPU"] == "pass"
    assert names["--list-devices"] == "pass"


def test_planted_module_in_working_directory(cpu_runtime, unpatched_runtime, tmp_path):
    """The loader patch closes the hole: without it, llama-server dlopen()s a planted
    libggml-cpu-*.so from its working directory and runs its constructor."""
    import subprocess

    from tests.support.planted import build_planted_module

    def marker_after_start(runtime: Path, name: str) -> bool:
        cwd = tmp_path / f"shared-models-{name}"
        marker = tmp_path / f"marker-{name}"
        build_planted_module(cwd, marker)
        subprocess.run([str(runtime / "bin" / "llama-server"), "--list-devices"], cwd=cwd, env={},
                       capture_output=True, timeout=120)
        return marker.exists()

    assert not marker_after_start(cpu_runtime, "patched")
    manifest = json.loads((cpu_runtime / "manifest.json").read_text())
    assert [p["name"] for p in manifest["llama_cpp"]["patches"]] == ["backend-loader-no-cwd"]

    # A build with the patch disabled: the suite's one unpatched build (tests/conftest.py), shared with
    # the repair tests; its CPU modules are the same fourteen levels, beside the Vulkan one.
    unpatched = unpatched_runtime
    assert json.loads((unpatched / "manifest.json").read_text())["llama_cpp"]["patches"] == []
    assert marker_after_start(unpatched, "unpatched")
    # and verify names the hole
    proc = assemble("verify", str(unpatched), "--json")
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert proc.returncode == 1 and checks["working-directory modules"]["status"] == "fail"
