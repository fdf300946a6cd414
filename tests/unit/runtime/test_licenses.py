"""builder.runtime.licenses with real libraries and real package databases: every carried file's
licence text lands in licenses/<component>/, the manifest maps it, and what has none is refused.

- host: a library built with -fopenmp carries the host's libgomp; dpkg names its package and
  Debian's copyright file (GCC's runtime library exception) is carried with it;
- a stated text (the recipe's [bundle.licenses]) and a toolkit root's EULA cover a library no
  package owns; without either it stays uncovered;
- NVIDIA's PyPI wheels (slow: a download): the wheel's own License.txt, NVIDIA's EULA by LicenseRef;
- Debian sid's ROCm packages given to repair (slow: a download): each library's package read from the
  .deb's own md5sums, its copyright file from the .deb, MIT/NCSA read from copyright-format 1.0.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.runtime import licenses
from builder.runtime.bundle import plan_bundle
from builder.runtime.layout import OwnFile
from builder.runtime.manifest import (Manifest, ManifestInvalid, Provenance, RecipeRecord, SourceRecord,
                                      check_files)
from builder.runtime.place import BundleResult, place_bundle
from tests.support.common import SHA
from scripts.support.vendorlibs import compile_c

GCC_EXCEPTION = "GPL-3.0-or-later WITH GCC-exception-3.1"


def _tree(tmp_path: Path) -> Path:
    """A stand-in llama.cpp tree: LICENSE and the notices under licenses/, as the pinned tree has them."""
    tree = tmp_path / "llama.cpp"
    (tree / "licenses").mkdir(parents=True)
    (tree / "LICENSE").write_text("MIT License\n\nCopyright (c) 2023-2026 The ggml authors\n")
    (tree / "licenses" / "LICENSE-jsonhpp").write_text("MIT License\n\nCopyright (c) 2013-2025 Niels Lohmann\n")
    return tree


def _bundle(tmp_path: Path, libs: list[tuple[str, str]], search: list[Path] = ()) -> tuple[Path, BundleResult]:
    """bin/app -> lib/libllama.so.0 (own) -> the libraries named by link flags, and ggml's CPU module,
    bundled into runtime/."""
    build = tmp_path / "build"
    build.mkdir()
    flags = [f for _, f in libs]
    lib = compile_c("int llama_init(void) { return 0; }\n" + "".join(src for src, _ in libs),
                    build / "libllama.so.0.0.1", "-shared", "-Wl,-soname,libllama.so.0", *flags)
    (build / "libllama.so.0").symlink_to(lib.name)
    exe = compile_c("int llama_init(void);\nint main(void) { return llama_init(); }\n", build / "app",
                    f"-L{build}", "-l:libllama.so.0", *[f"-Wl,-rpath-link,{d}" for d in search])
    cpu = compile_c("int ggml_backend_score(void) { return 1; }\n", build / "libggml-cpu.so", "-shared")
    plan = plan_bundle([OwnFile(exe, "bin/app", "executable"), OwnFile(lib, "lib/libllama.so.0.0.1", "library"),
                        OwnFile(cpu, "bin/libggml-cpu.so", "module")], search_dirs=search)
    staged = tmp_path / "runtime"
    staged.mkdir()
    return staged, place_bundle(plan, staged)


def _manifest(result: BundleResult) -> Manifest:
    m = Manifest(recipe=RecipeRecord("cpu", "licence test", ("cpu",), ("app",), "cpu.toml"),
                 llama_cpp=SourceRecord(SHA, 1761900000, Provenance(kind="local", verified_by="a test"), {}, ()),
                 files=result.files, symlinks=result.symlinks, licenses=result.licenses,
                 system_libs=result.system_libs, glibc_min=result.glibc_min, glibcxx_min=result.glibcxx_min,
                 size_by_role=dict(result.size_by_role))
    return Manifest.from_json(m.to_json())          # what every reader sees: written, parsed, validated


OMP = ("#include <omp.h>\nint threads(void) { return omp_get_max_threads(); }\n", "-fopenmp")


def test_the_hosts_libgomp_carries_debians_copyright_with_gccs_exception(tmp_path):
    if not shutil.which("dpkg-query"):
        pytest.skip("not a Debian host: no package database to name libgomp's owner")
    staged, placed = _bundle(tmp_path, [OMP])
    gomp = next(f for f in placed.files if f.role == "vendor" and f.path.startswith("lib/libgomp.so"))
    owner = subprocess.run(["dpkg-query", "-S", gomp.origin], capture_output=True, text=True).stdout.split(":")[0]
    result = licenses.add_licenses(placed, staged, licenses.tree_license(_tree(tmp_path), ()))
    m = _manifest(result)
    assert m.unlicensed() == []                                  # every carried file has its licence
    assert check_files(staged, m) == []                          # the texts are hashed like every file
    by = {r.component: r for r in m.licenses}
    llama = by["llama.cpp"]
    assert llama.spdx == "MIT" and llama.covers == ("bin/app", "bin/libggml-cpu.so", "lib/libllama.so.0.0.1")
    assert llama.texts == ("licenses/llama.cpp/LICENSE", "licenses/llama.cpp/LICENSE-jsonhpp")
    gcc = by[owner]
    assert gcc.covers == (gomp.path,) and gcc.spdx == GCC_EXCEPTION and gcc.texts == (f"licenses/{owner}/copyright",)
    text = (staged / gcc.texts[0]).read_text()
    assert "GCC RUNTIME LIBRARY EXCEPTION" in text
    assert text == (Path("/usr/share/doc") / owner / "copyright").read_text()
    assert {f.role for f in m.files if f.path.startswith("licenses/")} == {"license"}


def test_the_sbom_of_a_runtime_carrying_libgomp_validates_with_its_licences(tmp_path):
    """CycloneDX 1.5's schema, with an SPDX id (MIT), an expression (GCC's exception) and the texts."""
    validation = pytest.importorskip("cyclonedx.validation.json", reason="the test extra: "
                                     "cyclonedx-python-lib[json-validation]")
    from cyclonedx.schema import SchemaVersion
    from builder.release import package
    if not shutil.which("dpkg-query"):
        pytest.skip("not a Debian host: no package database to name libgomp's owner")
    staged, placed = _bundle(tmp_path, [OMP])
    _manifest(licenses.add_licenses(placed, staged, licenses.tree_license(_tree(tmp_path), ()))).write(staged)
    bom_text = package.package(staged, tmp_path / "dist").sbom.read_text()
    assert validation.JsonStrictValidator(SchemaVersion.V1_5).validate_str(bom_text) is None
    comps = {c["bom-ref"]: c for c in json.loads(bom_text)["components"]}
    gomp = next(c for ref, c in comps.items() if ref.startswith("file:lib/libgomp.so"))
    assert gomp["licenses"] == [{"expression": GCC_EXCEPTION}]
    texts = next(p["value"] for p in gomp["properties"] if p["name"] == "assemble:license.texts")
    assert texts.startswith("licenses/") and texts.endswith("/copyright") and f"file:{texts}" in comps
    assert comps["file:bin/app"]["licenses"] == [{"license": {"id": "MIT", "url": "licenses/llama.cpp/LICENSE"}}]


def _vendor_bundle(tmp_path: Path):
    """A vendor library in a folder no package owns (a toolkit unpacked by hand), bundled."""
    root = tmp_path / "toolkit"
    (root / "lib64").mkdir(parents=True)
    compile_c("int vendor_fn(void) { return 7; }\n", root / "lib64" / "libvendor.so.1", "-shared",
              "-Wl,-soname,libvendor.so.1")
    staged, placed = _bundle(tmp_path, [("int vendor_fn(void);\nint use(void) { return vendor_fn(); }\n",
                                         f"-L{root / 'lib64'}"), ("", "-l:libvendor.so.1")], search=[root / "lib64"])
    return root, staged, placed


def test_a_library_no_package_owns_stays_uncovered_until_its_text_is_stated(tmp_path):
    root, staged, placed = _vendor_bundle(tmp_path)
    own = licenses.tree_license(_tree(tmp_path), ())
    bare = licenses.add_licenses(placed, staged, own)
    assert _manifest(bare).unlicensed() == ["lib/libvendor.so.1"]
    # the recipe's [bundle.licenses] names its text: the same bundle, placed again, is covered
    shutil.rmtree(staged / "licenses")
    text = root / "VENDOR-LICENSE.txt"
    text.write_text("Vendor licence: redistribution allowed with this notice.\n")
    stated = licenses.add_licenses(placed, staged, own, stated=(("libvendor.so.*", str(text)),))
    m = _manifest(stated)
    assert m.unlicensed() == []
    (rec,) = [r for r in m.licenses if r.component != "llama.cpp"]
    assert rec.covers == ("lib/libvendor.so.1",) and rec.spdx is None and "bundle.licenses" in rec.source
    assert (staged / rec.texts[0]).read_bytes() == text.read_bytes()


def test_a_toolkit_roots_eula_covers_what_came_from_it(tmp_path):
    root, staged, placed = _vendor_bundle(tmp_path)
    (root / "EULA.txt").write_text("End User License Agreement\n")
    result = licenses.add_licenses(placed, staged, licenses.tree_license(_tree(tmp_path), ()), roots=[root])
    m = _manifest(result)
    assert m.unlicensed() == []
    (rec,) = [r for r in m.licenses if r.component == "toolkit"]
    assert rec.texts == ("licenses/toolkit/EULA.txt",) and rec.spdx.startswith("LicenseRef-NVIDIA")


def test_the_manifest_refuses_a_licence_naming_a_file_it_does_not_list(tmp_path):
    staged, placed = _bundle(tmp_path, [])
    m = _manifest(licenses.add_licenses(placed, staged, licenses.tree_license(_tree(tmp_path), ())))
    text = m.to_json().replace('"lib/libllama.so.0.0.1"\n', '"lib/libelsewhere.so"\n', 1)
    assert "libelsewhere" in text
    with pytest.raises(ManifestInvalid, match=r"licenses\[0\] names lib/libelsewhere.so"):
        Manifest.from_json(text)


def test_debian_short_names_become_spdx_only_when_spdx_spells_them():
    zlib = Path("/usr/share/doc/zlib1g/copyright")
    if not zlib.is_file():
        pytest.skip("not a Debian host")
    assert licenses.debian_spdx(zlib) == "Zlib"          # Files: * / License: Zlib (copyright-format 1.0)
    gcc = Path("/usr/share/doc/gcc-12-base/copyright")
    if gcc.is_file():
        assert licenses.debian_spdx(gcc) is None        # free-form text: the known table names it instead
    assert licenses.spdx_for("libgomp1") == GCC_EXCEPTION and licenses.spdx_for("libfoo1") is None


# --- NVIDIA's wheels (slow: the download; cached per machine) ----------------------------------


def test_place_refuses_to_overwrite_a_text(tmp_path):
    """Texts go through place's copy (O_EXCL): a runtime folder is never written over."""
    tree = _tree(tmp_path)
    src = licenses.tree_license(tree, ("bin/app",))
    (tmp_path / "rt" / "licenses" / "llama.cpp").mkdir(parents=True)
    with pytest.raises(FileExistsError):
        licenses.place_licenses([src], tmp_path / "rt")
    assert list((tmp_path / "rt" / "licenses" / "llama.cpp").iterdir()) == []


# --- Debian sid's ROCm packages, as repair's .deb inputs (slow: the download; cached per machine) -------


# --- the real cpu runtime (slow: the llama.cpp build, shared through the test cache) ------------------


@pytest.mark.parametrize("name, text", [
    ("LICENSE", True), ("LICENSE-jsonhpp", True), ("License.txt", True), ("COPYING.LIB", True),
    ("copyright", True), ("LICENSE.md", True), ("EULA.txt", True),
    # a vendor zip's Debian texts, named by package (found by the cold CI run: the mingw runtime zip's)
    ("copyright.gcc-mingw-w64-x86-64-posix-runtime", True), ("copyright.mingw-w64-x86-64-dev", True),
    ("license.hpp", False), ("LICENSE.json", False),
    ("license.cpp", False), ("licence.h", False), ("license.o", False), ("copyright.py", False)])
def test_a_licence_text_is_told_by_its_name_and_a_source_file_is_not_one(name, text):
    assert licenses.is_text(name) is text


def test_a_build_folder_gives_its_source_trees_license_not_its_generated_license_cpp(tmp_path):
    """llama.cpp's build folder holds a generated license.cpp: the LICENSE comes from the tree that
    CMakeCache.txt names (found by the cold CI run: the repaired build folder carried license.cpp)."""
    tree, build = tmp_path / "src", tmp_path / "build"
    tree.mkdir()
    build.mkdir()
    (tree / "LICENSE").write_text("MIT License\n")
    (build / "license.cpp").write_text("const char * LICENSES[] = {};\n")
    (build / "CMakeCache.txt").write_text(f"CMAKE_HOME_DIRECTORY:INTERNAL={tree}\n")
    found = licenses.input_license([build / "bin", build], ["bin/llama-server"], "build")
    assert found is not None and [p.name for p in found.texts] == ["LICENSE"]
    assert found.texts[0].parent == tree
