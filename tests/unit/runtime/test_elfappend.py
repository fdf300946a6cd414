"""runtime.elfappend: DT_RPATH and DT_NEEDED set at the end of a copy, checked by the real ld.so.

A module built with a RUNPATH that points nowhere is edited, then dlopen()ed by a real program
with a decoy of its dependency on LD_LIBRARY_PATH: the RPATH must win, the added NEEDED must
load first, readelf must read the same headers, and place_bundle must take this path for a
large file (the threshold lowered here) and give the same result as patchelf. Every PT_NOTE (the
GNU build-id) stays: the edited file, loaded, still finds its build-id through dl_iterate_phdr,
as crash symbolisers do, and its program header table is mapped by a PT_LOAD.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from builder.runtime import elfappend, place
from builder.runtime.bundle import plan_bundle
from builder.runtime.elf import read_elf
from builder.runtime.layout import OwnFile
from scripts.support.vendorlibs import compile_c, readelf_dynamic

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
    _src, module, _host, _decoys = parts
    exe = compile_c("int main(void) { return 0; }", tmp_path / "static", "-static")
    before = exe.read_bytes()
    assert not elfappend.patch_in_place(exe, "$ORIGIN", ())     # no .dynamic to edit: patchelf's job
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


PT_NULL, PT_LOAD, PT_NOTE, PT_PHDR, PT_GNU_EH_FRAME = 0, 1, 4, 6, 0x6474E550

# Prints the GNU build-id of the executable itself and of the module given (dlopen()ed) from the
# PT_NOTE segments the loader mapped, found through dl_iterate_phdr: what a crash symboliser reads.
SHOW_IDS = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
static const char *module;
static int show(struct dl_phdr_info *info, size_t size, void *data) {
    const char *who = info->dlpi_name[0] == '\0' ? "self" : module && !strcmp(info->dlpi_name, module) ? "module" : 0;
    if (!who) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        size_t step = ph->p_align == 8 ? 8 : 4;
        const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
        while (p + 12 <= end) {
            unsigned namesz, descsz, type;
            memcpy(&namesz, p, 4); memcpy(&descsz, p + 4, 4); memcpy(&type, p + 8, 4);
            const unsigned char *desc = p + 12 + ((namesz + step - 1) & ~(step - 1));
            if (type == 3 && namesz == 4 && !memcmp(p + 12, "GNU", 4)) {
                printf("%s ", who);
                for (unsigned j = 0; j < descsz; j++) printf("%02x", desc[j]);
                printf("\n");
            }
            p = desc + ((descsz + step - 1) & ~(step - 1));
        }
    }
    return 0;
}
int main(int argc, char **argv) {
    if (argc > 1 && !dlopen(module = argv[1], RTLD_NOW)) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 3; }
    dl_iterate_phdr(show, 0);
    return 0;
}
"""


def _headers(path: Path) -> tuple[int, list[tuple[int, ...]]]:
    """(e_phoff, program headers as (type, flags, offset, vaddr, paddr, filesz, memsz, align))."""
    data = path.read_bytes()
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phnum, = struct.unpack_from("<H", data, 0x38)
    return phoff, [struct.unpack_from("<IIQQQQQQ", data, phoff + i * 56) for i in range(phnum)]


def _notes(path: Path) -> list[bytes]:
    """The bytes of every PT_NOTE segment, read through the program headers (no section headers)."""
    data = path.read_bytes()
    return [data[h[2]:h[2] + h[5]] for h in _headers(path)[1] if h[0] == PT_NOTE]


def _build_id(path: Path) -> str:
    """The build-id as binutils reads it (from the section headers: a second opinion)."""
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True, check=True).stdout
    return re.search(r"Build ID: ([0-9a-f]+)", out).group(1)


def _assert_table_mapped(path: Path) -> None:
    """The program header table lies inside a PT_LOAD, and PT_PHDR (if any) says where."""
    phoff, phdrs = _headers(path)
    size = len(phdrs) * 56
    covering = [h for h in phdrs if h[0] == PT_LOAD and h[2] <= phoff and phoff + size <= h[2] + h[5]]
    assert covering, f"{path.name}: no PT_LOAD maps the program header table at {phoff:#x}"
    load = covering[0]
    for h in phdrs:
        if h[0] == PT_PHDR:
            assert (h[2], h[3], h[5]) == (phoff, load[3] + phoff - load[2], size)
    loads = [h[3] for h in phdrs if h[0] == PT_LOAD]
    assert loads == sorted(loads)


@pytest.mark.parametrize("shape", ["module", "pie", "no-pie", "pt-null"])
def test_every_note_and_the_build_id_survive_the_edit(tmp_path, shape):
    src = tmp_path / "src"
    src.mkdir()
    compile_c('const char *dep_probe(void) { return "real-dep"; }', src / "libdep.so.1", "-shared",
              "-Wl,-soname,libdep.so.1")
    module = compile_c(MODULE, src / "libmod.so", "-shared", f"-L{src}", "-l:libdep.so.1",
                       "-Wl,--enable-new-dtags,-rpath,/nowhere/at/all", "-Wl,--build-id")
    pie = "-no-pie" if shape == "no-pie" else "-pie"
    exe_edited = shape in ("pie", "no-pie")       # else it finds libdep.so.1 beside itself from the start
    exe = compile_c(SHOW_IDS, src / "show-ids", pie, "-fPIE" if pie == "-pie" else "-fno-PIE", "-Wl,--build-id",
                    f"-L{src}", "-Wl,--no-as-needed", "-l:libdep.so.1", "-ldl",
                    "-Wl,--enable-new-dtags,-rpath," + ("/nowhere/at/all" if exe_edited else "$ORIGIN"))
    if shape == "pt-null":        # a free slot (as some linkers and editors leave): taken, the table stays
        data = bytearray(module.read_bytes())
        phoff, phdrs = _headers(module)
        eh = next(i for i, h in enumerate(phdrs) if h[0] == PT_GNU_EH_FRAME)   # C code needs none
        struct.pack_into("<I", data, phoff + eh * 56, PT_NULL)
        module.write_bytes(bytes(data))
    edited = {"exe": exe} if exe_edited else {"module": module}
    ids = {k: _build_id(p) for k, p in edited.items()}
    notes = {k: _notes(p) for k, p in edited.items()}
    before = {k: _headers(p) for k, p in edited.items()}

    rt = tmp_path / "rt"
    rt.mkdir()
    shutil.copy2(src / "libdep.so.1", rt)
    for name, path in (("module", module), ("exe", exe)):
        shutil.copy2(path, rt / path.name)
        if name in edited:
            assert elfappend.patch_in_place(rt / path.name, "$ORIGIN", ())
            edited[name] = rt / path.name
    for k, path in edited.items():
        assert _notes(path) == notes[k] and len(notes[k]) >= 1, f"{k}: a PT_NOTE was lost"
        assert _build_id(path) == ids[k]
        assert readelf_dynamic(path).get("RPATH") == ["$ORIGIN"]
        _assert_table_mapped(path)
        phoff, phdrs = _headers(path)
        if shape == "pt-null":
            assert phoff == before[k][0] and len(phdrs) == len(before[k][1])
            assert not any(h[0] == PT_NULL for h in phdrs)
        else:
            assert phoff > before[k][0] and len(phdrs) == len(before[k][1]) + 1
        text = subprocess.run(["readelf", "-lW", str(path)], capture_output=True, text=True, check=True).stdout
        assert text.count(" NOTE ") == len(notes[k])

    moved = shutil.move(rt, tmp_path / "elsewhere")
    run = subprocess.run([str(moved / exe.name), str(moved / module.name)], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    loaded = dict(line.split() for line in run.stdout.splitlines())
    assert loaded == {"self": _build_id(exe), "module": _build_id(module)}
