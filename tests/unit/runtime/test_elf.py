"""builder.elf: header facts (checked against binutils' readelf) and lookup (checked against the real ld.so)."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builder.runtime.elf import (ElfInfo, ldconfig_dirs, lookup, max_version, read_elf, resolve, section_strings, symlink_chain)
from builder.errors import AssembleError

from scripts.support.vendorlibs import compile_c, loaded_probe, readelf_dynamic

pytestmark = pytest.mark.skipif(shutil.which("readelf") is None, reason="needs binutils' readelf as the oracle")

PROBE = loaded_probe("foo")


def libfoo(folder: Path, tag: str, *args: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return compile_c(f'const char *foo(void) {{ return "{tag}"; }}\nconst char *rocblas_path = "/rocblas/9.9.1/library";\n',
                     folder / "libfoo.so.1", "-shared", "-Wl,-soname,libfoo.so.1", *args)


def readelf_versions(path: Path) -> set[str]:
    out = subprocess.run(["readelf", "-VW", str(path)], capture_output=True, text=True, check=True).stdout
    section = out.split(".gnu.version_r", 1)[1] if ".gnu.version_r" in out else ""
    return set(re.findall(r"Name: (\S+)\s+Flags", section))


def run_probe(exe: Path, ld_library_path: str | None) -> tuple[int, dict[str, str]]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if ld_library_path:
        env["LD_LIBRARY_PATH"] = ld_library_path
    proc = subprocess.run([str(exe)], capture_output=True, text=True, env=env)
    loaded = {Path(p).name: p for p in re.findall(r"^LOADED (.+)$", proc.stdout, re.M)}
    return proc.returncode, loaded


# --- header facts ------------------------------------------------------------

def test_facts_match_readelf(tmp_path):
    lib = libfoo(tmp_path / "a", "A", "-Wl,--disable-new-dtags,-rpath,$ORIGIN/x:/opt/y")
    exe = compile_c(PROBE, tmp_path / "probe", f"-L{lib.parent}", "-l:libfoo.so.1",
                    "-Wl,--enable-new-dtags,-rpath,/nowhere")
    for path in (lib, exe, Path("/bin/ls"), Path(sys.executable).resolve()):
        info = read_elf(path)
        oracle = readelf_dynamic(path)
        assert list(info.needed) == oracle.get("NEEDED", [])
        assert info.soname == (oracle.get("SONAME") or [None])[0]
        assert ":".join(info.rpath) == (oracle.get("RPATH") or [""])[0]
        assert ":".join(info.runpath) == (oracle.get("RUNPATH") or [""])[0]
        assert {v for _, vs in info.version_needs for v in vs} == readelf_versions(path)
    assert read_elf(lib).search_rpath == ("$ORIGIN/x", "/opt/y")
    assert read_elf(exe).runpath == ("/nowhere",) and read_elf(exe).search_rpath == ()
    assert read_elf(exe).is_program and not read_elf(lib).is_program
    assert read_elf(exe).max_version("GLIBC_") is not None


def test_not_elf_and_corrupt(tmp_path):
    text = tmp_path / "libc.so"
    text.write_text("/* GNU ld script */ GROUP ( /lib/libc.so.6 )\n")
    assert read_elf(text) is None
    lib = libfoo(tmp_path / "a", "A")
    cut = tmp_path / "cut.so"
    cut.write_bytes(lib.read_bytes()[:200])
    with pytest.raises(AssembleError) as err:
        read_elf(cut)
    assert str(cut) in err.value.line()


def test_max_version_is_numeric():
    assert max_version(["GLIBC_2.9", "GLIBC_2.17", "GLIBC_2.2.5", "GLIBC_PRIVATE"]) == "GLIBC_2.17"
    assert max_version([]) is None


def test_section_strings_reads_only_named_sections(tmp_path):
    lib = libfoo(tmp_path / "a", "A")
    assert section_strings(lib, rb"rocblas/[0-9][0-9.]*/library") == ("rocblas/9.9.1/library",)
    assert section_strings(lib, rb"rocblas/[0-9.]*/library", sections=(".dynstr",)) == ()


def test_symlink_chain(tmp_path):
    real = tmp_path / "libx.so.1.2.3"
    real.write_bytes(b"x")
    (tmp_path / "libx.so.1").symlink_to("libx.so.1.2.3")
    (tmp_path / "libx.so").symlink_to("libx.so.1")
    names, target = symlink_chain(tmp_path / "libx.so")
    assert names == ["libx.so", "libx.so.1", "libx.so.1.2.3"] and target == real


# --- lookup, checked against ld.so ------------------------------------------

@pytest.fixture
def three_foos(tmp_path):
    return {tag: libfoo(tmp_path / tag, tag).parent for tag in "ABC"}


@pytest.mark.parametrize("dtags,env", [
    ("--disable-new-dtags", None), ("--disable-new-dtags", "B"),
    ("--enable-new-dtags", None), ("--enable-new-dtags", "B"),
])
def test_direct_lookup_agrees_with_ld_so(tmp_path, three_foos, dtags, env):
    exe = compile_c(PROBE, tmp_path / "probe", f"-L{three_foos['A']}", "-l:libfoo.so.1",
                    f"-Wl,{dtags},-rpath,{three_foos['A']}")
    ld_path = str(three_foos[env]) if env else None
    predicted = resolve("libfoo.so.1", read_elf(exe), ld_library_path=ld_path)
    rc, loaded = run_probe(exe, ld_path)
    assert rc == 0
    assert str(predicted) == loaded["libfoo.so.1"]
    # RPATH beats LD_LIBRARY_PATH; RUNPATH does not
    expected = "B" if env and dtags == "--enable-new-dtags" else "A"
    assert predicted.parent == three_foos[expected]


@pytest.mark.parametrize("dtags,env", [
    ("--disable-new-dtags", None), ("--disable-new-dtags", "B"),
    ("--enable-new-dtags", None), ("--enable-new-dtags", "B"),
])
def test_indirect_lookup_agrees_with_ld_so(tmp_path, three_foos, dtags, env):
    """exe -> libbar (no paths of its own) -> libfoo: DT_RPATH is inherited, DT_RUNPATH is not."""
    bar = compile_c('const char *foo(void);\nconst char *bar(void) { return foo(); }\n',
                    three_foos["C"] / "libbar.so.1", "-shared", "-Wl,-soname,libbar.so.1",
                    f"-L{three_foos['C']}", "-l:libfoo.so.1", "-Wl,--disable-new-dtags")
    assert not read_elf(bar).rpath and not read_elf(bar).runpath
    exe = compile_c(loaded_probe("bar"),
                    tmp_path / "probe", f"-L{three_foos['C']}", "-l:libbar.so.1",
                    f"-Wl,{dtags},-rpath,{three_foos['C']}:{three_foos['A']}")
    ld_path = str(three_foos[env]) if env else None
    exe_info = read_elf(exe)
    bar_path = resolve("libbar.so.1", exe_info, ld_library_path=ld_path)
    predicted = resolve("libfoo.so.1", read_elf(bar_path), loaders=(exe_info,), ld_library_path=ld_path)
    rc, loaded = run_probe(exe, ld_path)
    if predicted is None:
        assert rc != 0, "ld.so found a library the model says it cannot"
    else:
        assert rc == 0 and str(predicted) == loaded["libfoo.so.1"]
    if dtags == "--disable-new-dtags":
        assert predicted.parent == three_foos["C"]          # the executable's RPATH reaches libbar's lookups
    elif env:
        assert predicted.parent == three_foos["B"]
    else:
        assert predicted is None                            # RUNPATH is not inherited


def test_origin_expansion_agrees_with_ld_so(tmp_path):
    root = tmp_path / "runtime"
    libfoo(root / "lib", "A")
    exe = compile_c(PROBE, tmp_path / "probe", f"-L{root / 'lib'}", "-l:libfoo.so.1",
                    "-Wl,--disable-new-dtags,-rpath,$ORIGIN/../lib")
    (root / "bin").mkdir()
    moved = root / "bin" / "probe"
    exe.rename(moved)
    predicted = resolve("libfoo.so.1", read_elf(moved))
    rc, loaded = run_probe(moved, None)
    assert rc == 0 and loaded["libfoo.so.1"] == str(predicted)
    assert str(predicted) == f"{root}/bin/../lib/libfoo.so.1"     # as ld.so spells it: not normalised


def test_wrong_machine_and_stubs_are_passed_over(tmp_path, three_foos):
    exe = compile_c(PROBE, tmp_path / "probe", f"-L{three_foos['A']}", "-l:libfoo.so.1")
    # an aarch64 build of the same library first in the search order (e_machine patched: a real
    # ELF of another machine, as ld.so would see it), then a stub, then the right one
    arm = tmp_path / "arm"
    arm.mkdir()
    data = bytearray((three_foos["A"] / "libfoo.so.1").read_bytes())
    data[18:20] = (183).to_bytes(2, "little")               # EM_AARCH64
    (arm / "libfoo.so.1").write_bytes(bytes(data))
    stubs = tmp_path / "cuda" / "stubs"
    libfoo(stubs, "STUB")
    found = lookup("libfoo.so.1", read_elf(exe), extra_dirs=(arm, stubs, three_foos["B"]))
    assert found.path == three_foos["B"] / "libfoo.so.1" and found.via == "extra"
    reasons = dict(found.rejected)
    assert "wrong class" in reasons[arm / "libfoo.so.1"]
    assert "stub" in reasons[stubs / "libfoo.so.1"]


def test_system_dirs_and_nodeflib(tmp_path):
    exe = compile_c("int main(void){return 0;}\n", tmp_path / "plain")
    libc = resolve("libc.so.6", read_elf(exe))
    assert libc is not None and read_elf(libc).soname == "libc.so.6"
    nodef = compile_c("int main(void){return 0;}\n", tmp_path / "nodef", "-Wl,-z,nodefaultlib")
    assert read_elf(nodef).nodeflib
    assert resolve("libc.so.6", read_elf(nodef)) is None


def test_ldconfig_dirs_follow_includes(tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "b.conf").write_text("/opt/b\n# comment\n/opt/c\n")
    (tmp_path / "conf.d" / "a.conf").write_text("/opt/a\n")
    conf = tmp_path / "ld.so.conf"
    conf.write_text(f"/opt/first\ninclude {tmp_path}/conf.d/*.conf\nhwcap 0 nosegneg\n")
    assert ldconfig_dirs(str(conf)) == tuple(Path(p) for p in ("/opt/first", "/opt/a", "/opt/b", "/opt/c"))


def test_elfinfo_is_frozen_plain_data(tmp_path):
    info = read_elf(libfoo(tmp_path / "a", "A"))
    assert isinstance(info, ElfInfo)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.soname = "other"  # type: ignore[misc]
