"""Reading a prebuilt llama.cpp and deciding whether parts may share a process, on real ELF files
compiled here: a tiny ggml base, libggml with a compiled-in module folder, a llama library, an
executable and modules, laid out as a build folder, as upstream's flat archive (copies instead of
links) and as a base from another build."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from builder.config import cpulevels
from builder.config.cpulevels import SELF_REPORT
from builder.errors import AssembleError
from builder.prebuilt import identity
from builder.prebuilt.discover import cpu_level_files, discover
from builder.prebuilt.loader import loader_facts

CC = shutil.which("cc") or shutil.which("gcc") or "cc"   # the project requires one: none here fails, never skips
BACKENDS0 = "/usr/lib/x86_64-linux-gnu/ggml/backends0"


def _cc(out: Path, source: str, *args: str) -> Path:
    src = out.parent / (out.name.replace(".", "_") + ".c")
    src.write_text(source)
    subprocess.run([CC, "-fPIC", "-O0", "-o", str(out), str(src), *args], check=True, capture_output=True)
    src.unlink()
    return out


@functools.cache
def _cpu_module(needs: str, level: str) -> bytes:
    """A CPU level module that says what it was compiled with as ggml's do (builder.check.cpulevel reads
    its ggml_cpu_has_*() constants); compiled once per session: it depends on nothing else."""
    reported = cpulevels.level(level).reported()
    has = "".join(f"int ggml_cpu_has_{n}(void) {{ return {int(f in reported)}; }}\n" for n, f in SELF_REPORT.items())
    with tempfile.TemporaryDirectory() as d:       # linked as make_build's are: NEEDED libggml-base.so.0
        _cc(Path(d) / "libggml-base.so.0.9.4", f"int {needs}(void) {{ return 1; }}\n", "-shared",
            "-Wl,-soname,libggml-base.so.0")
        out = _cc(Path(d) / f"libggml-cpu-{level}.so", f"int {needs}(void);\nint ggml_backend_score(void) "
                  f"{{ return {needs}(); }}\n" + has, "-shared", f"-L{d}", "-l:libggml-base.so.0.9.4")
        return out.read_bytes()


def make_build(folder: Path, *, extra_base_symbol: str = "", module_needs: str = "ggml_init",
               backend_dir: str | None = None, flat: bool = False) -> Path:
    """bin/ of a CMake build (or one flat folder with copies, upstream's archive style)."""
    b = folder / "bin"
    b.mkdir(parents=True)
    extra = f"int {extra_base_symbol}(void) {{ return 2; }}\n" if extra_base_symbol else ""
    _cc(b / "libggml-base.so.0.9.4", "int ggml_init(void) { return 1; }\nint gguf_init(void) { return 3; }\n" + extra,
        "-shared", "-Wl,-soname,libggml-base.so.0")
    loader = f'const char *ggml_dir(void) {{ return "{backend_dir}"; }}\n' if backend_dir else ""
    _cc(b / "libggml.so.0.9.4", "int ggml_init(void);\nint ggml_backend_load_all(void) { return ggml_init(); }\n"
        + loader, "-shared", "-Wl,-soname,libggml.so.0", f"-L{b}", "-l:libggml-base.so.0.9.4")
    _cc(b / "libllama.so.0.0.1", "int ggml_backend_load_all(void);\nint llama_init(void) { return "
        "ggml_backend_load_all(); }\n", "-shared", "-Wl,-soname,libllama.so.0", f"-L{b}", "-l:libggml.so.0.9.4")
    _cc(b / "libggml-extra.so", "int extra(void) { return 0; }\n", "-shared")
    for soname, real in (("libggml-base.so.0", "libggml-base.so.0.9.4"), ("libggml.so.0", "libggml.so.0.9.4"),
                         ("libllama.so.0", "libllama.so.0.0.1")):
        if flat:
            shutil.copyfile(b / real, b / soname)          # a zip has no symlinks: two copies
        else:
            os.symlink(real, b / soname)
    _cc(b / "llama-server", "int llama_init(void);\nint main(void) { return llama_init(); }\n",
        f"-L{b}", "-l:libllama.so.0.0.1", "-l:libggml.so.0.9.4", "-l:libggml-base.so.0.9.4")
    for name in ("libggml-vulkan.so",):
        _cc(b / name, f"int {module_needs}(void);\nint ggml_backend_score(void) {{ return {module_needs}(); }}\n",
            "-shared", f"-L{b}", "-l:libggml-base.so.0.9.4")
    for level in cpulevels.LEVELS:                      # every level a build declares, as ggml builds them
        (b / f"libggml-cpu-{level.name}.so").write_bytes(_cpu_module(module_needs, level.name))
    (folder / "CMakeFiles").mkdir()
    (folder / "CMakeFiles" / "junk.o").write_bytes(b"\x7fELF not really")
    return folder


def test_a_build_folder_is_read_by_its_headers(tmp_path):
    f = discover(make_build(tmp_path / "build"))
    assert [x.source.name for x in f.executables] == ["llama-server"]
    assert sorted(x.source.name for x in f.modules) == sorted([*cpu_level_files(), "libggml-vulkan.so"])
    libs = {x.source.name: x for x in f.libraries}
    assert sorted(libs) == ["libggml-base.so.0.9.4", "libggml.so.0.9.4", "libllama.so.0.0.1"]   # not libunused
    assert libs["libggml.so.0.9.4"].links == ("libggml.so.0",) and libs["libggml.so.0.9.4"].dest == "lib/libggml.so.0.9.4"
    assert [(x.path.relative_to(f.root).as_posix(), x.reason) for x in f.left_out] == [
        ("bin/libggml-extra.so", "nothing carried needs it")] and f.base.source.name == "libggml-base.so.0.9.4"


def test_upstreams_flat_copies_are_one_library(tmp_path):
    f = discover(make_build(tmp_path / "flat", flat=True))
    libs = {x.source.name: x.links for x in f.libraries}
    assert libs == {"libggml-base.so.0.9.4": ("libggml-base.so.0",), "libggml.so.0.9.4": ("libggml.so.0",),
                    "libllama.so.0.0.1": ("libllama.so.0",)}


def test_two_different_files_with_one_soname_are_refused(tmp_path):
    root = make_build(tmp_path / "b")
    (root / "bin" / "libggml.so.0").unlink()             # another build's libggml under the same SONAME
    _cc(root / "bin" / "libggml.so.0", "int other(void) { return 9; }\n", "-shared", "-Wl,-soname,libggml.so.0")
    with pytest.raises(AssembleError) as err:
        discover(root)
    assert "two different files claim SONAME libggml.so.0" in err.value.what


def test_targets_and_an_input_without_executables(tmp_path):
    root = make_build(tmp_path / "b")
    with pytest.raises(AssembleError) as err:
        discover(root, ("llama-cli",))
    assert "llama-cli" in err.value.what and "llama-server" in err.value.fix
    (root / "bin" / "llama-server").unlink()
    with pytest.raises(AssembleError) as err:
        discover(root)
    assert "no llama.cpp executable" in err.value.what


def test_the_same_build_is_one_base_and_another_is_refused(tmp_path):
    a = discover(make_build(tmp_path / "a")).base.source
    same = discover(make_build(tmp_path / "a2", flat=True)).base.source
    other = discover(make_build(tmp_path / "c", extra_base_symbol="ggml_new_api")).base.source
    ia, isame, iother = (identity.base_identity(p) for p in (a, same, other))
    assert ia.version == "0.9.4" and ia.exported == 2 and identity.same_base(ia, isame) is None
    assert identity.same_base(ia, iother) == "their exported interfaces differ"
    assert "version" in identity.same_base(ia, identity.BaseIdentity(ia.file, "0.9.5", None, ia.interface, 2))
    assert "build tags" in identity.same_base(identity.base_identity(a, "b7416"), identity.base_identity(same, "b7417"))


def test_a_module_built_against_another_base_is_named(tmp_path):
    root = make_build(tmp_path / "m", module_needs="ggml_new_api")
    provided = identity.exported(root / "bin" / "libggml-base.so.0.9.4")
    assert identity.missing_imports(root / "bin" / "libggml-vulkan.so", provided) == ["ggml_new_api"]
    good = make_build(tmp_path / "g")
    assert identity.missing_imports(good / "bin" / "libggml-vulkan.so", provided) == []


def test_a_compiled_in_module_folder_is_read(tmp_path):
    plain = discover(make_build(tmp_path / "plain")).ggml.source
    debian = discover(make_build(tmp_path / "deb", backend_dir=BACKENDS0)).ggml.source
    assert loader_facts(plain).backend_dirs == ()
    assert loader_facts(debian).backend_dirs == (BACKENDS0,)
