"""verify re-derives every fact manifest.json states about a runtime's files (builder.check.facts).

A small real runtime, made the way build makes one (compiled stand-ins for llama.cpp's libraries, bundled
by plan_bundle/place_bundle with the host's libgomp, licences added, the manifest written from the
bundle's own result), passes `verify --static`. Then each class of consistent edit of issue 49 -- a value
of manifest.json changed (the hashes untouched, since they protect the files), or a file changed with its
hash updated -- fails it, naming the field; none is an internal error.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from builder.check import facts, ggmlcommit
from builder.check.report import FAIL, PASS, SKIP
from builder.check.verify import verify_runtime
from builder.config import cpulevels
from builder.config.glibc import host_glibc
from builder.runtime import licenses
from builder.runtime.bundle import plan_bundle
from builder.runtime.elf import folder_need
from builder.runtime.gpuruntime import describe
from builder.runtime.layout import OwnFile
from builder.runtime.manifest import (GlibcFloor, Manifest, Provenance, RecipeRecord, SourceRecord, UnitRecord)
from builder.runtime.place import patchelf_tool, place_bundle
from builder.units.environment import build_env
from tests.support.common import SHA, assemble
from tests.support.manifests import read_raw, reseal, write_raw
from scripts.support.vendorlibs import compile_c

# ggml-cpu.c's self-report (as tests/unit/check/test_cpulevel.py compiles it): each a constant return
HAS = {"ssse3": "__SSSE3__", "avx": "__AVX__", "f16c": "__F16C__", "fma": "__FMA__", "avx2": "__AVX2__",
       "bmi2": "__BMI2__", "avx_vnni": "__AVXVNNI__", "avx512": "__AVX512F__", "avx512_vbmi": "__AVX512VBMI__",
       "avx512_vnni": "__AVX512VNNI__", "avx512_bf16": "__AVX512BF16__", "amx_int8": "__AMX_INT8__"}
CPU_SOURCE = "\n".join(f"int ggml_cpu_has_{n}(void) {{\n#if defined({m})\n    return 1;\n#else\n    return 0;\n#endif\n}}"
                       for n, m in HAS.items()) + "\nint ggml_init(void);\nint ggml_backend_score(void) { return ggml_init(); }\n"
HASWELL = ("-msse4.2", "-mavx", "-mf16c", "-mfma", "-mavx2", "-mbmi2")
OMP = "#include <omp.h>\nint threads(void) { return omp_get_max_threads(); }\n"


def _link(folder: Path, name: str, target: str) -> None:
    (folder / name).symlink_to(target)


def make_bundled(root: Path, cpu_flags: tuple[str, ...] = (), defines: dict[str, str] | None = None) -> Path:
    """A runtime as build makes one: llama.cpp's libraries (libggml-base with its ggml_commit(), libggml,
    libllama using the host's OpenMP), llama-server and the CPU module, bundled, licensed, and the manifest
    written from the bundle's result as flows.build writes it."""
    build = root / "build"
    build.mkdir(parents=True)
    base = compile_c(f'const char * ggml_commit(void) {{ return "{SHA[:7]}-dirty"; }}\nint ggml_init(void) {{ return 0; }}\n',
                     build / "libggml-base.so.0.9.4", "-shared", "-Wl,-soname,libggml-base.so.0")
    _link(build, "libggml-base.so.0", base.name)
    ggml = compile_c("int ggml_init(void);\nint ggml_backend_load(void) { return ggml_init(); }\n",
                     build / "libggml.so.0.9.4", "-shared", "-Wl,-soname,libggml.so.0", f"-L{build}", "-l:libggml-base.so.0")
    _link(build, "libggml.so.0", ggml.name)
    llama = compile_c(OMP + "int ggml_backend_load(void);\nint llama_init(void) { return ggml_backend_load() + threads(); }\n",
                      build / "libllama.so.0.0.1", "-shared", "-fopenmp", "-Wl,-soname,libllama.so.0", f"-L{build}",
                      "-l:libggml.so.0")
    _link(build, "libllama.so.0", llama.name)
    exe = compile_c("int llama_init(void);\nint main(void) { return llama_init(); }\n", build / "llama-server",
                    f"-L{build}", "-l:libllama.so.0", f"-Wl,-rpath-link,{build}")
    cpu = compile_c(CPU_SOURCE, build / "libggml-cpu.so", "-shared", *cpu_flags, f"-L{build}", "-l:libggml-base.so.0")
    own = [OwnFile(exe, "bin/llama-server", "executable"), OwnFile(cpu, "bin/libggml-cpu.so", "module"),
           OwnFile(base, f"lib/{base.name}", "library", ("libggml-base.so.0",)),
           OwnFile(ggml, f"lib/{ggml.name}", "library", ("libggml.so.0",)),
           OwnFile(llama, f"lib/{llama.name}", "library", ("libllama.so.0",))]
    rt = root / "runtime-cpu"
    rt.mkdir()
    result = place_bundle(plan_bundle(own), rt)
    tree = root / "llama.cpp"
    tree.mkdir()
    (tree / "LICENSE").write_text("MIT License\n\nCopyright (c) 2023-2026 The ggml authors\n")
    result = licenses.add_licenses(result, rt, licenses.tree_license(tree, ()))
    need = folder_need(rt)
    Manifest(recipe=RecipeRecord("cpu", "facts test", ("cpu",), ("llama-server",), "cpu.toml"),
             llama_cpp=SourceRecord(SHA, 1761900000, Provenance("git", "a test", url="https://example.invalid/l.git"),
                                    {}, ()),
             files=result.files, symlinks=result.symlinks,
             units=(UnitRecord("main", ("cpu",), None, None, None, None, str(build), ("cmake",), ("cmake", "--build"),
                               dict(defines or {}), {},
                               build_env({"PATH": "/usr/bin", "HOME": "/root", "CFLAGS": "-O0"}).as_dict()),),
             system_libs=result.system_libs, glibc_min=result.glibc_min, glibcxx_min=result.glibcxx_min,
             glibc_floor=GlibcFloor(host_glibc(), "build host", need.file if need else None),
             size_by_role=dict(result.size_by_role),
             gpu_runtimes=describe(rt, [f.path for f in result.files], {}), licenses=result.licenses).write(rt)
    return rt


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return make_bundled(tmp_path_factory.mktemp("bundled"))


@pytest.fixture
def rt(pristine, tmp_path) -> Path:
    dest = tmp_path / "runtime-cpu"
    shutil.copytree(pristine, dest, symlinks=True)
    return dest


def _checks(runtime: Path) -> dict[str, object]:
    return {c.name: c for c in verify_runtime(runtime, static=True).checks}


def _failed(runtime: Path) -> dict[str, str]:
    return {c.name: c.reason for c in verify_runtime(runtime, static=True).checks if c.status == FAIL}


def _edit(runtime: Path, change: Callable[[dict], object]) -> None:
    raw = read_raw(runtime)
    change(raw)
    write_raw(runtime, {k: v for k, v in raw.items() if k not in ("schema", "created_by")})


def _file(raw: dict, path: str) -> dict:
    return next(f for f in raw["files"] if f["path"] == path)


def _index(raw: dict, path: str) -> int:
    return next(i for i, f in enumerate(raw["files"]) if f["path"] == path)


# --- the runtime as made passes, and every fact is read from it ----------------------------------

def test_a_runtime_as_the_bundler_makes_it_passes_every_check(pristine):
    checks = _checks(pristine)
    assert {n for n, c in checks.items() if c.status == FAIL} == set(), \
        [(n, c.reason) for n, c in checks.items() if c.status == FAIL]
    assert checks[facts.NAME].status == PASS
    m = Manifest.load(pristine)
    assert {s.soname for s in m.system_libs} >= {"libc.so.6"} and m.glibc_min
    assert any(f.role == "vendor" and f.path.startswith("lib/libgomp.so") for f in m.files)
    base = pristine / "lib" / "libggml-base.so.0.9.4"
    assert ggmlcommit.built_from(base) == SHA[:7]          # gcc's ggml_commit(): lea + ret, read without running it


def test_the_cli_passes_it_and_fails_an_edit_in_one_line_per_check(rt):
    assert assemble("verify", str(rt), "--static").returncode == 0
    _edit(rt, lambda raw: raw.__setitem__("glibc_min", "9.99"))
    proc = assemble("verify", str(rt), "--static")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.strip().startswith(facts.NAME))
    assert "FAIL" in line and "glibc_min: 9.99, but " in line and "GLIBC_" in line, line


# --- each class of consistent edit (issue 49's trials) --------------------------------------------

def _set(key: str, value: object) -> Callable[[Path, dict], None]:
    def edit(_rt: Path, raw: dict) -> None:
        raw[key] = value
    return edit


def _role(path: str, role: str) -> Callable[[Path, dict], None]:
    def edit(_rt: Path, raw: dict) -> None:
        _file(raw, path)["role"] = role
    return edit


def _gomp(raw: dict) -> str:
    return next(f["path"] for f in raw["files"] if f["path"].startswith("lib/libgomp.so"))


VALUE_EDITS: dict[str, tuple[Callable[[Path, dict], None], str]] = {
    "glibc_min 9.99": (_set("glibc_min", "9.99"), "glibc_min: 9.99, but "),
    "glibc_min lowered": (_set("glibc_min", "2.2"), "glibc_min: 2.2, but "),
    "glibcxx_min invented": (_set("glibcxx_min", "3.4.99"), "glibcxx_min: 3.4.99, but "),
    "glibc_floor.needed_by another file": (lambda rt, raw: raw["glibc_floor"].__setitem__("needed_by", "lib/libllama.so.0.0.1"),
                                           "glibc_floor.needed_by: lib/libllama.so.0.0.1, but "),
    "a role set to vendor": (_role("bin/llama-server", "vendor"), "role of bin/llama-server is vendor, but it is own"),
    "a library's role set to vendor": (_role("lib/libllama.so.0.0.1", "vendor"),
                                       "role of lib/libllama.so.0.0.1 is vendor, but it is own"),
    "a vendor library set to own": (lambda rt, raw: _file(raw, _gomp(raw)).__setitem__("role", "own"),
                                    "is own, but it is vendor"),
    "a licence text set to data": (lambda rt, raw: _file(raw, "licenses/llama.cpp/LICENSE").__setitem__("role", "data"),
                                   "role of licenses/llama.cpp/LICENSE is data, but it is license"),
    "system_libs emptied": (_set("system_libs", []), "system_libs: lacks libc.so.6"),
    "a carried library left to the host": (
        lambda rt, raw: raw["system_libs"].append({"soname": "libgomp.so.1", "reason": "the host has it",
                                                   "needed_by": ["lib/libllama.so.0.0.1"]}),
        "system_libs[{n}] libgomp.so.1: left to the host, but the runtime carries it"),
    "a system library's reason invented": (
        lambda rt, raw: next(s for s in raw["system_libs"] if s["soname"] == "libc.so.6").__setitem__("reason", "fine"),
        ".reason: 'fine', but the bundling policy says"),
    "a system library's needed_by invented": (
        lambda rt, raw: next(s for s in raw["system_libs"] if s["soname"] == "libc.so.6").__setitem__(
            "needed_by", ["bin/llama-server"]), "libc.so.6.needed_by: bin/llama-server, but "),
    "llama_cpp.sha changed": (lambda rt, raw: raw["llama_cpp"].__setitem__("sha", "1" * 40),
                              f"llama_cpp.sha: {'1' * 40}, but lib/libggml-base.so.0.9.4 was built from commit {SHA[:7]}"),
    "loader.accepted_risk added": (_set("loader", {"backend_dirs": [], "accepted_risk": "trust me"}),
                                   "loader: recorded, but llama_cpp.source.kind is git"),
    "units[].environment with LD_PRELOAD": (
        lambda rt, raw: raw["units"][0]["environment"]["passed"].append("LD_PRELOAD"),
        "units[0].environment.passed: 'LD_PRELOAD', a name the build's environment policy never passes"),
    "units[].environment keying LD_PRELOAD": (
        lambda rt, raw: raw["units"][0]["environment"]["keyed"].__setitem__("LD_PRELOAD", "/tmp/x.so"),
        "units[0].environment.keyed: 'LD_PRELOAD'"),
    "gpu_targets.hip without HIP code": (_set("gpu_targets", {"cuda": [], "hip": ["gfx1100"]}),
                                         "gpu_targets.hip: gfx1100, but there is no bin/libggml-hip.so"),
    "gpu_targets.cuda without CUDA code": (_set("gpu_targets", {"cuda": ["90"], "hip": []}),
                                           "gpu_targets.cuda: 90, but there is no bin/libggml-cuda.so"),
    "gpu_runtimes.cuda invented": (
        _set("gpu_runtimes", {"cuda": {"version": "12.8", "driver_min": "1.0", "driver_for_ptx": "1.0", "source": "x"},
                              "rocm": None, "notes": []}), "gpu_runtimes.cuda: recorded, but the files carry no CUDA"),
    "fake inputs": (_set("inputs", [{"given": "/tmp/llama-b1-bin-ubuntu-x64.zip", "kind": "archive", "sha256": "a" * 64,
                                     "version": "0.9.4", "build": "b1", "base": "ggml 0.9.4", "contributed": ["cpu"]}]),
                    "inputs: 1 recorded, but llama_cpp.source.kind is git"),
    "recipe.targets with a program it lacks": (lambda rt, raw: raw["recipe"]["targets"].append("llama-cli"),
                                               "recipe.targets: llama-cli, llama-server, but the programs in bin/ are llama-server"),
    "size_by_role edited": (lambda rt, raw: raw["size_by_role"].__setitem__("own", 1), "size_by_role.own: 1, but "),
}


@pytest.mark.parametrize("edit", sorted(VALUE_EDITS))
def test_each_value_edit_fails_naming_its_field(rt, edit):
    change, words = VALUE_EDITS[edit]
    _edit(rt, lambda raw: change(rt, raw))
    words = words.format(n=len(read_raw(rt)["system_libs"]) - 1)
    failed = _failed(rt)
    assert words in failed.get(facts.NAME, ""), failed


UNKNOWN_KEYS = {
    "a top-level key": (lambda raw: raw.__setitem__("signed_off", True), "manifest.json key signed_off is not a key"),
    "a key in a file record": (lambda raw: raw["files"][0].__setitem__("trusted", True), "key files[0].trusted is not"),
    "a key in the recipe": (lambda raw: raw["recipe"].__setitem__("verified", "yes"), "key recipe.verified is not"),
    "a key in the environment": (lambda raw: raw["units"][0]["environment"].__setitem__("LD_PRELOAD", "/tmp/x.so"),
                                 "key units[0].environment.LD_PRELOAD is not"),
    "a key in the loader": (lambda raw: raw.__setitem__("loader", {"backend_dirs": [], "reads_cwd": False}),
                            "key loader.reads_cwd is not"),
    "a role of its own in size_by_role": (lambda raw: raw["size_by_role"].__setitem__("extra", 0),
                                          "key size_by_role.extra is not"),
}


@pytest.mark.parametrize("edit", sorted(UNKNOWN_KEYS))
def test_an_unknown_key_anywhere_is_refused_in_one_line(rt, edit):
    change, words = UNKNOWN_KEYS[edit]
    _edit(rt, change)
    failed = _failed(rt)
    assert words in failed.get("manifest", ""), failed
    assert "\n" not in failed["manifest"]


def test_a_lying_soname_with_its_hash_updated(rt):
    """libllama's DT_SONAME changed and its hash updated: ld.so finds it by a name no link gives."""
    lib = rt / "lib" / "libllama.so.0.0.1"
    subprocess.run([patchelf_tool(), "--set-soname", "libllama.so.9", str(lib)], check=True)
    reseal(rt, changed=("lib/libllama.so.0.0.1",))
    reason = _failed(rt)[facts.NAME]
    assert "symlinks: lib/libllama.so.0.0.1 has DT_SONAME libllama.so.9, but lib/libllama.so.9 is missing" in reason
    # the link made too (listed, hashed): what needs it by its old name now reaches another SONAME
    (rt / "lib" / "libllama.so.9").symlink_to(lib.name)
    reseal(rt)
    reason = _failed(rt)[facts.NAME]
    assert ("bin/llama-server needs libllama.so.0, which lib/ answers with lib/libllama.so.0.0.1, whose DT_SONAME is "
            "libllama.so.9") in reason


def test_a_vendor_soname_claiming_another_library(rt):
    raw = read_raw(rt)
    gomp = _gomp(raw)
    subprocess.run([patchelf_tool(), "--set-soname", "libgomp.so.2", str(rt / gomp)], check=True)
    reseal(rt, changed=(gomp,))
    assert f"symlinks: {gomp} has DT_SONAME libgomp.so.2" in _failed(rt)[facts.NAME]


def test_an_extra_cpu_module_listed(rt):
    """A module no level of ggml's names, listed and hashed: ggml's loader would try it."""
    shutil.copy2(rt / "bin" / "libggml-cpu.so", rt / "bin" / "libggml-cpu-zen9.so")
    reseal(rt)
    assert read_raw(rt)["files"][_index(read_raw(rt), "bin/libggml-cpu-zen9.so")]["role"] == "own"
    reason = _failed(rt)[facts.NAME]
    assert "bin/libggml-cpu-zen9.so is no CPU level ggml builds" in reason
    assert "bin/libggml-cpu.so beside 1 CPU level modules" in reason


def test_a_library_of_llamas_name_carried_as_vendor(rt):
    """Two ggml bases (issue 49's first finding): one of them a vendor file by the manifest."""
    shutil.copy2(rt / "lib" / "libggml-base.so.0.9.4", rt / "lib" / "libggml-base.so")
    reseal(rt)
    _edit(rt, lambda raw: _file(raw, "lib/libggml-base.so").__setitem__("role", "vendor"))
    reason = _failed(rt)[facts.NAME]
    assert "role of lib/libggml-base.so is vendor, but it is own" in reason
    assert ("symlinks: lib/libggml-base.so has DT_SONAME libggml-base.so.0, but lib/libggml-base.so.0 is "
            "lib/libggml-base.so.0.9.4") in reason


def test_a_file_outside_the_layout(rt):
    (rt / "share").mkdir()
    (rt / "share" / "notes.txt").write_text("x\n")
    reseal(rt)
    assert "files[" in _failed(rt)[facts.NAME] and "share/notes.txt lies outside bin/, lib/, tests/" in \
        _failed(rt)[facts.NAME]


def test_the_system_libraries_are_read_back_from_the_files(pristine):
    """The bundler's record and the files' own NEEDED agree (one home: the policy's classify)."""
    from builder.check import libfacts
    m = Manifest.load(pristine)

    def as_paths(labels: tuple[str, ...]) -> set[str]:      # a vendor requester is named as it was needed
        return {x if "/" in x else f"lib/{os.path.basename(os.path.realpath(pristine / 'lib' / x))}" for x in labels}

    derived = libfacts.system_libs(libfacts.read(pristine, m))
    assert [(s.soname, s.reason, as_paths(s.needed_by)) for s in derived] == \
        [(s.soname, s.reason, as_paths(s.needed_by)) for s in m.system_libs]
    assert any(not n.startswith(("bin/", "lib/")) for s in m.system_libs for n in s.needed_by), "a vendor requester"


# --- CPU defines, GPU code -------------------------------------------------------------------------

def _defines(level: str) -> dict[str, str]:
    return dict(cpulevels.level(level).defines())


def test_a_single_level_modules_defines_are_what_its_code_reports(tmp_path):
    good = make_bundled(tmp_path / "good", HASWELL, _defines("haswell"))
    assert facts.NAME not in _failed(good)
    lying = make_bundled(tmp_path / "lying", (), _defines("haswell"))      # an x64 build recorded as haswell
    reason = _failed(lying)[facts.NAME]
    assert ("units[0].defines: GGML_FMA, GGML_F16C, GGML_SSE42, GGML_BMI2, GGML_AVX, GGML_AVX2 ON, but "
            "bin/libggml-cpu.so was compiled with nothing beyond SSE2") in reason


def _hip_module(rt: Path, archs: tuple[str, ...]) -> None:
    ids = "".join(f"hipv4-amdgcn-amd-amdhsa--{a}\\0" for a in archs)
    src = compile_c(f'const char bundle_ids[] = "{ids}";\nint ggml_backend_init(void) {{ return 0; }}\n',
                    rt.parent / "libggml-hip.so", "-shared", "-Wl,-rpath,$ORIGIN/../lib,--disable-new-dtags")
    shutil.copyfile(src, rt / "bin" / "libggml-hip.so")


def _fatbin(entries: list[tuple[int, int, int]]) -> bytes:
    """One fat binary container as nvcc writes it (builder.runtime.cudacode reads its headers)."""
    body = b"".join(struct.pack("<HHIQ12xI8xQ", kind, 0x0101, 64, 16, arch, flags) + b"\0" * 16 + b"\0" * 16
                    for kind, arch, flags in entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def _cuda_module(rt: Path, entries: list[tuple[int, int, int]]) -> None:
    blob = rt.parent / "fatbin.bin"
    blob.write_bytes(_fatbin(entries))
    src = compile_c("int ggml_backend_init(void) { return 0; }\n", rt.parent / "libggml-cuda.so", "-shared",
                    "-Wl,-rpath,$ORIGIN/../lib,--disable-new-dtags")
    subprocess.run(["objcopy", "--add-section", f".nv_fatbin={blob}", "--set-section-flags", ".nv_fatbin=alloc,readonly",
                    str(src), str(rt / "bin" / "libggml-cuda.so")], check=True)


def _gpu_runtime(rt: Path, backend: str, targets: dict[str, list[str]]) -> None:
    reseal(rt)
    m = Manifest.load(rt)
    _edit(rt, lambda raw: (raw["recipe"].__setitem__("backends", ["cpu", backend]),
                           raw.__setitem__("gpu_targets", targets),
                           raw.__setitem__("gpu_runtimes", json.loads(json.dumps(__import__("dataclasses").asdict(
                               describe(rt, [f.path for f in m.files], {})))))))


def test_hip_targets_are_the_archs_the_module_carries(rt):
    _hip_module(rt, ("gfx1100", "gfx90a"))
    _gpu_runtime(rt, "hip", {"cuda": [], "hip": ["gfx1100", "gfx90a:xnack-"]})
    assert facts.NAME not in _failed(rt), _failed(rt)
    # narrower than the module (a repair's --hip-target, its ROCm data pruned to that card): a true claim
    _edit(rt, lambda raw: raw["gpu_targets"].__setitem__("hip", ["gfx1100"]))
    assert facts.NAME not in _failed(rt), _failed(rt)
    # a target the module has no code for, or none stated for a module that carries code: a false one
    _edit(rt, lambda raw: raw["gpu_targets"].__setitem__("hip", ["gfx1100", "gfx942"]))
    assert "gpu_targets.hip: gfx1100, gfx942, but bin/libggml-hip.so carries code for gfx1100, gfx90a" \
        in _failed(rt)[facts.NAME]
    _edit(rt, lambda raw: raw["gpu_targets"].__setitem__("hip", []))
    assert "gpu_targets.hip: none, but bin/libggml-hip.so carries code for gfx1100, gfx90a" in _failed(rt)[facts.NAME]


def test_cuda_targets_are_the_code_objects_the_module_carries(rt):
    sass, ptx = 2, 1
    _cuda_module(rt, [(sass, 90, 0), (ptx, 90, 0), (sass, 120, 0x100000), (ptx, 75, 0)])
    _gpu_runtime(rt, "cuda", {"cuda": ["75-virtual", "90", "120a-real"], "hip": []})
    assert facts.NAME not in _failed(rt), _failed(rt)
    _edit(rt, lambda raw: raw["gpu_targets"].__setitem__("cuda", ["75-virtual", "90-real", "120a-real"]))
    reason = _failed(rt)[facts.NAME]
    assert "gpu_targets.cuda: 75-virtual, 90-real, 120a-real, but bin/libggml-cuda.so carry" in reason
    assert "compute_75, compute_90, sm_120a, sm_90" in reason
    _edit(rt, lambda raw: raw["gpu_targets"].__setitem__("cuda", ["75-virtual", "90", "120a-real"]))
    _edit(rt, lambda raw: raw["gpu_runtimes"]["cuda"]["modules"][0].__setitem__("sass", ["sm_90"]))
    assert "gpu_runtimes.cuda.modules: " in _failed(rt)[facts.NAME]


# --- repaired runtimes: the loader and the inputs ---------------------------------------------------

def _as_repaired(rt: Path, accepted: str | None = None) -> None:
    base = rt / "lib" / "libggml-base.so.0.9.4"
    from builder.prebuilt.identity import base_identity
    _edit(rt, lambda raw: (
        raw["llama_cpp"].__setitem__("sha", None),
        raw["llama_cpp"].__setitem__("source", {"kind": "prebuilt", "path": "/in/llama-b1-bin-ubuntu-x64.zip",
                                                "version": "0.9.4"}),
        raw.__setitem__("units", []),
        raw.__setitem__("inputs", [{"given": "/in/llama-b1-bin-ubuntu-x64.zip", "kind": "archive", "sha256": "a" * 64,
                                    "version": "0.9.4", "build": "b1", "base": base_identity(base, "b1").describe(),
                                    "contributed": ["cpu"]}]),
        raw.__setitem__("loader", {"backend_dirs": [], "accepted_risk": accepted})))


def test_a_repaired_runtime_states_its_inputs_and_loader_as_its_files_say(rt):
    _as_repaired(rt, accepted="a test")
    assert facts.NAME not in _failed(rt), _failed(rt)
    _edit(rt, lambda raw: raw["loader"].__setitem__("backend_dirs", ["/usr/lib/x86_64-linux-gnu/ggml/backends0"]))
    assert ("loader.backend_dirs: /usr/lib/x86_64-linux-gnu/ggml/backends0, but lib/libggml.so.0.9.4 searches no "
            "compiled-in folder") in _failed(rt)[facts.NAME]
    _as_repaired(rt)
    _edit(rt, lambda raw: raw["inputs"][0].__setitem__("contributed", ["cpu", "vulkan"]))
    assert "inputs[].contributed: cpu, vulkan, but bin/ holds modules of cpu" in _failed(rt)[facts.NAME]
    _as_repaired(rt)
    _edit(rt, lambda raw: raw["inputs"][0].__setitem__("base", "ggml 0.9.4, 722 exported symbols (interface 0)"))
    assert "inputs[0].base: 'ggml 0.9.4, 722 exported symbols (interface 0)', but lib/libggml-base.so.0.9.4 is" in \
        _failed(rt)[facts.NAME]


def test_a_broken_file_is_a_failure_never_an_internal_error(rt):
    lib = rt / "lib" / "libllama.so.0.0.1"
    lib.write_bytes(lib.read_bytes()[:200])
    reseal(rt, changed=("lib/libllama.so.0.0.1",))
    report = verify_runtime(rt, static=True)
    assert not report.passed and all(isinstance(c.reason, str) for c in report.checks)
    os.chmod(rt / "bin" / "llama-server", 0o000)
    try:
        assert not verify_runtime(rt, static=True).passed
    finally:
        os.chmod(rt / "bin" / "llama-server", 0o755)


def test_a_linux_runtime_relabelled_windows_fails(rt):
    """platform decides which verifier reads the folder: the other one finds nothing it needs."""
    _edit(rt, lambda raw: raw.__setitem__("platform", "windows"))
    report = verify_runtime(rt, static=True)
    assert not report.passed and "backend modules" in {c.name for c in report.checks if c.status == FAIL}


def test_a_runtime_packaged_without_its_tests_states_what_tests_needed(tmp_path):
    """tests/ left out as a whole (package without --with-tests): what only its files needed is not
    there to read, so a system library or glibc need of tests/ alone is no mismatch."""
    from tests.support.runtimes import make_runtime
    rt = make_runtime(tmp_path, with_tests=True)
    assert any(n.startswith("tests/") for s in Manifest.load(rt).system_libs for n in s.needed_by)
    shutil.rmtree(rt / "tests")
    assert facts.NAME not in _failed(rt), _failed(rt)
    _edit(rt, lambda raw: raw.__setitem__("system_libs", []))
    assert "system_libs: lacks libc.so.6" in _failed(rt)[facts.NAME]


def test_a_name_with_a_newline_stays_one_line(rt):
    shutil.copy2(rt / "bin" / "libggml-cpu.so", rt / "bin" / "libggml-cpu-a\nb.so")
    reseal(rt)
    reason = _failed(rt)[facts.NAME]
    assert "\n" not in reason and "libggml-cpu-a\\nb.so" in reason


def test_facts_are_read_once_the_files_are_those_listed(rt):
    """A file changed without its hash: 'manifest hashes' names it; facts read from other files would
    only repeat it, so they wait (not run, saying why)."""
    (rt / "lib" / "libllama.so.0.0.1").unlink()
    checks = _checks(rt)
    assert checks["manifest hashes"].status == FAIL
    assert checks[facts.NAME].status == SKIP and "manifest hashes" in checks[facts.NAME].reason
