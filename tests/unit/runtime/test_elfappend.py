"""runtime.elfappend: DT_RPATH and DT_NEEDED set at the end of a copy, checked by the real ld.so.

A module built with a RUNPATH that points nowhere is edited, then dlopen()ed by a real program
with a decoy of its dependency on LD_LIBRARY_PATH: the RPATH must win, the added NEEDED must
load first, readelf must read the same headers, and place_bundle must take this path for a
large file (the threshold lowered here) and give the same result as patchelf.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.runtime import elfappend, place
from builder.runtime.bundle import plan_bundle
from builder.runtime.elf import read_elf
from builder.runtime.layout import OwnFile
from tests.support.vendorlibs import compile_c, readelf_dynamic

MODULE = r"""
const char *dep_probe(void);
const char *module_probe(void) { return dep_probe(); }
"""
EXTRA = r"""
#include <stdio.h>
__attribute__((constructor)) static void hello(void) { fputs("EXTRA loaded\n", stdout); fflush(stdout); }
"""
HOST = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 3; }
    const char *(*f)(void) = (const char *(*)(void))dlsym(h, "module_probe");
    puts(f());
    return 0;
}
"""


@pytest.fixture
def parts(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    compile_c('const char *dep_probe(void) { return "real-dep"; }', src / "libdep.so.1", "-shared",
              "-Wl,-soname,libdep.so.1")
    compile_c(EXTRA, src / "libextra.so.1", "-shared", "-Wl,-soname,libextra.so.1")
    module = compile_c(MODULE, src / "libggml-cpu.so", "-shared", f"-L{src}", "-l:libdep.so.1",
                       "-Wl,--enable-new-dtags,-rpath,/nowhere/at/all", "-Wl,--build-id")
    host = compile_c(HOST, tmp_path / "host", "-ldl")
    decoys = tmp_path / "decoys"
    decoys.mkdir()
    compile_c('const char *dep_probe(void) { return "DECOY"; }', decoys / "libdep.so.1", "-shared",
              "-Wl,-soname,libdep.so.1")
    return src, module, host, decoys


def _run(host: Path, module: Path, decoys: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(host), str(module)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(decoys)})


def test_append_sets_rpath_and_needed_that_ld_so_obeys(tmp_path, parts):
    src, module, host, decoys = parts
    before = _run(host, module, decoys)
    assert before.stdout.strip() == "DECOY", "the decoy is real: LD_LIBRARY_PATH beats the RUNPATH"

    rt = tmp_path / "rt"
    (rt / "lib").mkdir(parents=True)
    for name in ("libdep.so.1", "libextra.so.1"):
        shutil.copy2(src / name, rt / "lib" / name)
    copy = rt / "libggml-cpu.so"
    shutil.copy2(module, copy)
    size_before = copy.stat().st_size
    assert elfappend.patch_in_place(copy, "$ORIGIN/lib", ("libextra.so.1",))
    assert copy.stat().st_size > size_before
    with open(module, "rb") as a, open(copy, "rb") as b:
        # the code and data before the end are the module's own bytes, but for the headers
        assert a.read()[4096:size_before - 4096] == b.read()[4096:size_before - 4096]

    facts = readelf_dynamic(copy)
    assert facts.get("RPATH") == ["$ORIGIN/lib"] and "RUNPATH" not in facts
    info = read_elf(copy)
    assert info.needed[0] == "libextra.so.1" and "libdep.so.1" in info.needed
    assert info.rpath == ("$ORIGIN/lib",) and info.runpath == ()
    assert subprocess.run(["readelf", "-lSW", str(copy)], capture_output=True).returncode == 0

    moved = tmp_path / "elsewhere"
    shutil.move(rt, moved)
    after = _run(host, moved / "libggml-cpu.so", decoys)
    assert after.returncode == 0, after.stderr
    assert after.stdout.splitlines() == ["EXTRA loaded", "real-dep"]


def test_shapes_it_does_not_handle_are_left_untouched(tmp_path, parts):
    _src, module, host, _decoys = parts
    exe = tmp_path / "host-copy"
    shutil.copy2(host, exe)
    before = exe.read_bytes()
    assert not elfappend.patch_in_place(exe, "$ORIGIN", ())     # an executable: patchelf's job
    assert exe.read_bytes() == before
    text = tmp_path / "notelf"
    text.write_bytes(b"not an ELF file at all" * 10)
    assert not elfappend.patch_in_place(text, "$ORIGIN", ())
    cut = tmp_path / "cut.so"                    # headers cut short: no exception, nothing written
    cut.write_bytes(module.read_bytes()[:100])
    assert not elfappend.patch_in_place(cut, "$ORIGIN", ()) and cut.read_bytes() == module.read_bytes()[:100]


def test_place_bundle_appends_to_large_files_with_the_same_result_as_patchelf(tmp_path, parts, monkeypatch):
    src, module, host, decoys = parts
    own = [OwnFile(src / "libdep.so.1", "lib/libdep.so.1", "library"),
           OwnFile(src / "libextra.so.1", "lib/libextra.so.1", "library"),
           OwnFile(module, "lib/libggml-other.so", "library")]
    plan = plan_bundle(own)
    results = {}
    real = elfappend.patch_in_place
    for label, threshold in (("patchelf", 1 << 62), ("append", 0)):
        monkeypatch.setattr(elfappend, "MIN_SIZE", threshold)
        calls = []
        monkeypatch.setattr(elfappend, "patch_in_place", lambda *a: calls.append(a) or real(*a))  # noqa: B023 -- used in this iteration
        out = tmp_path / label
        out.mkdir()
        result = place.place_bundle(plan, out)
        assert bool(calls) == (label == "append")
        results[label] = read_elf(out / "lib/libggml-other.so")
        rec = {f.path: f for f in result.files}["lib/libggml-other.so"]
        assert rec.size == (out / "lib/libggml-other.so").stat().st_size
        run = _run(host, out / "lib/libggml-other.so", decoys)
        assert run.stdout.strip() == "real-dep", run.stderr
        assert os.access(out / "lib/libggml-other.so", os.R_OK)
    a, b = results["append"], results["patchelf"]
    assert (a.rpath, a.runpath, set(a.needed)) == (b.rpath, b.runpath, set(b.needed))
