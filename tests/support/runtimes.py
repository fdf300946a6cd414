"""A small runtime folder with a manifest, made of real files with real origins (for the release
and output-folder tests, which need no compiled llama.cpp)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

from builder.digest import sha256_file
from builder.paths import data_dir
from builder.runtime import layout, licenses, manifest
from builder.runtime.manifest import Manifest
from builder.runtime.place import patchelf_tool
from tests.support.common import SHA
from tests.support.manifests import refresh_facts, write_raw
from scripts.support.vendorlibs import compile_c


COMMIT_TIME = 1761900000


PATCH = "backend-loader-no-cwd.patch"


def _record(rt: Path, rel: str, role: str, origin: str) -> dict:
    p = rt / rel
    return {"path": rel, "role": role, "origin": origin, "sha256": sha256_file(p),
            "size": p.stat().st_size, "mode": p.stat().st_mode & 0o777}


def make_runtime(root: Path, *, commit_time: int | None = COMMIT_TIME, name: str = "cpu",
                 hip: tuple[str, ...] = (), build: str | None = None, rocm: str | None = None,
                 cuda: str | None = None, licensed: bool = True, with_tests: bool = False) -> Path:
    """A small runtime with a manifest, made of real files with real origins; build is what its manifest
    says of upstream's build number; hip, rocm and cuda give it what verify reads those facts from: a HIP
    module carrying code for those gfx targets, a libamdhip64 / libcudart of that version (stand-ins
    compiled here, their licence stated as a recipe's [bundle.licenses] would). Every fact the manifest
    states about the files is the files' own (refresh_facts, as verify re-derives them). licensed:
    licenses/ as build writes it (llama.cpp's LICENSE of a stand-in tree, the packages' own texts).
    with_tests: tests/ as a [tests] backend_ops build writes it (a real ELF as test-backend-ops with
    DT_RPATH $ORIGIN/../lib, role test, and its link to the CPU module)."""
    rt = root / f"runtime-{name}"
    (rt / "bin").mkdir(parents=True)
    (rt / "lib" / "data").mkdir(parents=True)
    files = []
    exe = Path(shutil.which("true")).resolve()
    for rel in ("bin/llama-server", "bin/libggml-cpu.so"):    # the server and the CPU module every runtime carries
        # DT_RPATH as build sets it: `package` runs every check of `verify --static`, this one too
        subprocess.run([patchelf_tool(), "--force-rpath", "--set-rpath", "$ORIGIN/../lib", "--output", rt / rel, exe],
                       check=True)
        files.append(_record(rt, rel, "own", f"/build/{rel}"))
    os.chmod(rt / "bin" / "llama-server", 0o775)
    files[0]["mode"] = 0o775
    links = [{"path": "lib/libz.so.1", "target": Path("/lib/x86_64-linux-gnu/libz.so.1").resolve().name}]
    if with_tests:
        (rt / layout.TESTS_DIR).mkdir()
        rel = f"{layout.TESTS_DIR}/{layout.BACKEND_OPS}"
        subprocess.run([patchelf_tool(), "--force-rpath", "--set-rpath", layout.LINK_RPATH, "--output", rt / rel, exe],
                       check=True)
        files.append(_record(rt, rel, "test", f"/build/bin/{layout.BACKEND_OPS}"))
        for link, target in layout.module_links_in_tests(["libggml-cpu.so"]):
            os.symlink(target, rt / link)
            links.append({"path": link, "target": target})
    stated = _gpu_files(root, rt, files, links, hip, rocm, cuda)
    zlib = Path("/lib/x86_64-linux-gnu/libz.so.1").resolve()   # from a Debian package
    shutil.copyfile(zlib, rt / "lib" / zlib.name)
    os.symlink(zlib.name, rt / "lib" / "libz.so.1")
    files.append(_record(rt, f"lib/{zlib.name}", "vendor", str(zlib)))
    import zstandard   # a library that lives in a wheel
    wheel_lib = Path(zstandard.__file__).parent / "backend_c.cpython-311-x86_64-linux-gnu.so"
    wheel_lib = next(Path(zstandard.__file__).parent.glob("backend_c*.so"), wheel_lib).resolve()
    shutil.copyfile(wheel_lib, rt / "lib" / wheel_lib.name)
    files.append(_record(rt, f"lib/{wheel_lib.name}", "vendor", str(wheel_lib)))
    copyright_ = Path("/usr/share/doc/zlib1g/copyright")
    shutil.copyfile(copyright_, rt / "lib" / "data" / "zlib.txt")
    files.append(_record(rt, "lib/data/zlib.txt", "data", str(copyright_)))
    records = []
    if licensed:
        tree = root / "llama.cpp-src"
        tree.mkdir()
        (tree / "LICENSE").write_text("MIT License\n\nCopyright (c) 2023-2026 The ggml authors\n")
        own = licenses.tree_license(tree, [f["path"] for f in files if f["role"] in manifest.BUILT])
        found = licenses.vendor_licenses([(f["path"], f["origin"]) for f in files if f["role"] not in manifest.BUILT],
                                         stated=stated)
        entries, placed = licenses.place_licenses([own, *found], rt)
        files += [dataclasses.asdict(e) for e in entries]
        records = [dataclasses.asdict(r) for r in placed]
    patch = data_dir("patches") / PATCH
    write_raw(rt, {
        "recipe": {"name": name, "description": "test runtime", "backends": ["cpu", *(["hip"] if hip else [])],
                   "targets": ["llama-server"],
                   "file": f"{name}.toml"},
        "llama_cpp": {"sha": SHA, "commit_time": commit_time,
                      "source": {"kind": "sdist", "package": "llama-cpp-python", "version": "0.3.36",
                                 "sha256": "8" * 64, "verified_by": "git"},
                      "features": {}, "patches": [{"name": "backend-loader-no-cwd", "file": PATCH,
                                                   "sha256": sha256_file(patch), "fixes": "cwd loading"}],
                      **({"build": build} if build else {})},
        "gpu_targets": {"cuda": [], "hip": list(hip)},
        "units": [{"name": "main", "backends": ["cpu"], "container": None,
                   "toolchain": {"cmake": {"path": "/usr/bin/cmake", "version": "3.31.6"},
                                 "cc": {"path": "/usr/bin/cc", "version": "12.2.0"},
                                 "launcher": "/usr/bin/ccache"}}],
        "size_by_role": {},
        "files": files, "symlinks": sorted(links, key=lambda x: x["path"]), "licenses": records,
    })
    refresh_facts(rt)
    assert manifest.check_files(rt, Manifest.load(rt)) == []
    return rt


def _gpu_files(root: Path, rt: Path, files: list, links: list, hip: tuple[str, ...], rocm: str | None,
               cuda: str | None) -> tuple[tuple[str, str], ...]:
    """bin/libggml-hip.so with an offload entry per gfx target (static.hip_archs reads them), and the
    ROCm / CUDA runtime libraries whose file names say their version (gpuruntime.describe reads them).
    Returns the licences to state for the stand-ins."""
    work = root / "gpu-src"
    work.mkdir(exist_ok=True)
    if hip:
        ids = "".join(f"hipv4-amdgcn-amd-amdhsa--{t.split(':')[0]}\\0" for t in hip)
        module = compile_c(f'const char ggml_hip_bundle_ids[] = "{ids}";\nint ggml_backend_init(void) {{ return 0; }}\n',
                           work / "libggml-hip.so", "-shared", "-Wl,-rpath,$ORIGIN/../lib,--disable-new-dtags")
        shutil.copyfile(module, rt / "bin" / "libggml-hip.so")
        files.append(_record(rt, "bin/libggml-hip.so", "own", "/build/bin/libggml-hip.so"))
    stated = []
    for version, stem, major in ((rocm, "libamdhip64", (rocm or "").split(".")[0]),
                                 (cuda, "libcudart", (cuda or "").split(".")[0])):
        if not version:
            continue
        real = f"{stem}.so.{version}.0"
        lib = compile_c(f"int {stem}_stand_in(void) {{ return 0; }}\n", work / real, "-shared",
                        f"-Wl,-soname,{stem}.so.{major}")
        shutil.copyfile(lib, rt / "lib" / real)
        os.symlink(real, rt / "lib" / f"{stem}.so.{major}")
        links.append({"path": f"lib/{stem}.so.{major}", "target": real})
        files.append(_record(rt, f"lib/{real}", "vendor", str(lib)))
        text = work / f"{stem}-LICENSE.txt"
        text.write_text(f"{stem} stand-in: redistribution allowed with this notice (a test).\n")
        stated.append((f"{stem}.so*", str(text)))
    return tuple(stated)


def tiny_runtime(path: Path, label: str = "x") -> Path:
    """The smallest folder this tool's manifest schema describes exactly: bin/tool holding `label`
    (created_by 'assemble test'), for the output-folder and swap tests."""
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "tool").write_text(label)
    write_raw(path, {"recipe": {"name": "x", "backends": ["cpu"]},
                     "llama_cpp": {"source": {"kind": "local", "verified_by": "nothing (a test)"}},
                     "files": [{"path": "bin/tool", "role": "own", "sha256": sha256_file(path / "bin" / "tool"),
                                "size": len(label), "mode": 0o644}]})
    return path
