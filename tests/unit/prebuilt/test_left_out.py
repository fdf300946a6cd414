"""Nothing of an input is dropped in silence (ISSUE28 items 2 and 6), on real ELF files compiled here
(tests/unit/prebuilt/test_discover.py's build, every CPU level a build declares): a damaged,
foreign or escaping module or executable and an incomplete CPU level set are refused in one line
naming the file and --without; with --without the file is left out and listed, in --dry-run, the
log and the manifest. Later inputs may hold only backend modules; a library in any folder of the
given .debs resolves. Every input tree is byte-identical afterwards."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builder.prebuilt.discover import cpu_level_files
from builder.runtime.manifest import Manifest, ManifestInvalid
from tests.support.common import assemble, one_error_line
from tests.unit.prebuilt.test_discover import _cc, make_build

LIBM = "/lib/x86_64-linux-gnu/libm.so.6"
LS = shutil.which("ls") or "/bin/ls"
STATIC = ("--verify-static", "--accept-loader-risk", "a test: no ggml installed here")


def tree_state(root: Path) -> dict[str, str]:
    """Every entry under root: a file's mode and sha256, a link's target, a folder's mode."""
    out = {}
    for dirpath, dirs, names in os.walk(root):
        for n in sorted(dirs + names):
            p = Path(dirpath) / n
            rel = p.relative_to(root).as_posix()
            st = os.lstat(p)
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_dir():
                out[rel] = f"dir {st.st_mode:o}"
            else:
                out[rel] = f"{st.st_mode:o} {hashlib.sha256(p.read_bytes()).hexdigest()}"
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    return make_build(tmp_path_factory.mktemp("pristine") / "build")


@pytest.fixture(scope="module")
def pristine_flat(tmp_path_factory) -> Path:
    """Upstream's archive layout: one flat folder, each library and its SONAME as two copies."""
    return make_build(tmp_path_factory.mktemp("pristine-flat") / "build", flat=True)


@pytest.fixture
def build(pristine, tmp_path) -> Path:
    dest = tmp_path / "build"
    shutil.copytree(pristine, dest, symlinks=True)
    return dest


def _repair(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "runtime-t"
    return assemble("repair", *args, "--name", "t", "--out", str(out), *STATIC), out


def _refused_then_left_out(tmp_path: Path, build: Path, name: str, words: list[str]) -> Manifest:
    """Refused (exit 2, one line naming the file and --without), then repaired with --without: the
    file is listed as left out in --dry-run, the log and the manifest; the input never changes."""
    before = tree_state(build)
    proc, out = _repair(tmp_path, str(build))
    one_error_line(proc, 2, [name, f"--without {name}", *words])
    assert not out.exists() and tree_state(build) == before

    dry = assemble("repair", str(build), "--without", name, "--dry-run", *STATIC, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "left out\n" in dry.stdout and f"{name}  (--without)" in dry.stdout, dry.stdout

    proc, out = _repair(tmp_path, str(build), "--without", name)
    assert proc.returncode == 0, proc.stderr
    assert f"warning: left out {build}/bin/{name} (--without)" in proc.stderr, proc.stderr
    m = Manifest.load(out)
    assert (f"{build}/bin/{name}", "--without") in {(x.path, x.reason) for x in m.left_out}
    assert f"bin/{name}" not in m.paths() and tree_state(build) == before
    return m


def test_a_truncated_cpu_variant_is_refused_or_left_out_by_name(tmp_path, build):
    module = build / "bin" / "libggml-cpu-haswell.so"
    module.write_bytes(module.read_bytes()[: module.stat().st_size // 2])
    _refused_then_left_out(tmp_path, build, "libggml-cpu-haswell.so", ["truncated"])


def test_a_module_cut_inside_its_elf_header_is_refused(tmp_path, build):
    module = build / "bin" / "libggml-cpu-zen4.so"
    module.write_bytes(module.read_bytes()[:40])
    _refused_then_left_out(tmp_path, build, "libggml-cpu-zen4.so", ["damaged"])


def test_the_x64_variant_as_a_symlink_to_libm_is_refused(tmp_path, build):
    x64 = build / "bin" / "libggml-cpu-x64.so"
    x64.unlink()
    x64.symlink_to(LIBM)
    m = _refused_then_left_out(tmp_path, build, "libggml-cpu-x64.so", ["a symlink leaving the input", LIBM])
    assert "bin/libggml-cpu-haswell.so" in m.paths()


def test_a_module_copied_from_another_library_is_not_a_ggml_module(tmp_path, build):
    shutil.copyfile(os.path.realpath(LIBM), build / "bin" / "libggml-vulkan.so")
    _refused_then_left_out(tmp_path, build, "libggml-vulkan.so", ["not a ggml backend module"])


def test_an_executable_replaced_by_ls_is_foreign(tmp_path, build):
    shutil.copyfile(build / "bin" / "llama-server", build / "bin" / "llama-cli")
    shutil.copyfile(LS, build / "bin" / "llama-server")
    m = _refused_then_left_out(tmp_path, build, "llama-server", ["not llama.cpp's"])
    assert m.recipe.targets == ("llama-cli",)
    # named by --target, it is refused; left aside by --target, it is listed, not refused
    proc, _ = _repair(tmp_path, str(build), "--target", "llama-server")
    one_error_line(proc, 2, ["llama-server", "not llama.cpp's"])
    dry = assemble("repair", str(build), "--target", "llama-cli", "--dry-run", *STATIC, cwd=tmp_path)
    assert dry.returncode == 0 and f"{build}/bin/llama-server  (not llama.cpp's" in dry.stdout, dry.stderr


def test_a_missing_cpu_level_is_refused_unless_left_out(tmp_path, build):
    (build / "bin" / "libggml-cpu-x64.so").unlink()
    before = tree_state(build)
    proc, out = _repair(tmp_path, str(build))
    one_error_line(proc, 2, ["libggml-cpu-x64.so missing from the CPU variants", "13 of 14", str(build),
                             "--without libggml-cpu-x64.so"])
    proc, out = _repair(tmp_path, str(build), "--without", "libggml-cpu-x64.so")
    assert proc.returncode == 0, proc.stderr
    assert "bin/libggml-cpu-sse42.so" in Manifest.load(out).paths() and tree_state(build) == before


def test_a_without_naming_nothing_is_refused(tmp_path, build):
    proc, _ = _repair(tmp_path, str(build), "--without", "libggml-cpu-x46.so")
    one_error_line(proc, 2, ["--without libggml-cpu-x46.so", "no executable or backend module named"])


def test_an_archive_member_is_named_as_the_user_knows_it(tmp_path, build):
    """By the archive's file name and the member path (the same inputs elsewhere give the same words)."""
    import tarfile
    (build / "bin" / "libggml-cpu-sse42.so").write_bytes(b"\x7fELF")
    archive = tmp_path / "llama-b7416-bin-ubuntu-x64.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(build / "bin", arcname="build/bin")
    proc, _ = _repair(tmp_path, str(archive))
    one_error_line(proc, 2, [f"{archive.name}:build/bin/libggml-cpu-sse42.so", "--without libggml-cpu-sse42.so"])


def test_programs_that_need_llama_and_unneeded_libraries_are_listed(tmp_path, build):
    (build / "bin" / "llama-env").write_text("#!/bin/sh\nexec ./llama-server \"$@\"\n")
    (build / "bin" / "libggml-old.so.1").write_bytes(b"")
    _cc(build / "bin" / "test-tokenizer", "int llama_init(void);\nint main(void) { return llama_init(); }\n",
        f"-L{build / 'bin'}", "-l:libllama.so.0.0.1", f"-Wl,-rpath-link,{build / 'bin'}")
    proc, out = _repair(tmp_path, str(build))
    assert proc.returncode == 0, proc.stderr
    reasons = {x.path: x.reason for x in Manifest.load(out).left_out}
    assert reasons == {f"{build}/bin/libggml-extra.so": "nothing carried needs it",
                       f"{build}/bin/llama-env": "a script, not a program",
                       f"{build}/bin/libggml-old.so.1": "not an ELF file; nothing carried needs it",
                       f"{build}/bin/test-tokenizer": "not a llama-* executable or a backend module; "
                                                      "it needs libllama.so.0"}


def test_manifests_without_left_out_still_load_and_bad_records_are_refused(tmp_path, build):
    proc, out = _repair(tmp_path, str(build))
    assert proc.returncode == 0, proc.stderr
    raw = json.loads((out / "manifest.json").read_text())
    assert raw["left_out"] == [{"path": f"{build}/bin/libggml-extra.so", "reason": "nothing carried needs it"}]
    old = dict(raw)
    del old["left_out"]
    assert Manifest.from_json(json.dumps(old)).left_out == ()
    for bad, key in (([{"path": "x"}], "left_out[0].reason"), ([{"path": "a\nb", "reason": "r"}], "left_out[0].path"),
                     ({"path": "x"}, "left_out")):
        with pytest.raises(ManifestInvalid) as err:
            Manifest.from_json(json.dumps({**raw, "left_out": bad}))
        assert key in str(err.value)


# --- merges: later inputs of backend modules only; libraries in any folder of the .debs ----------

def _backend_only(folder: Path, base_from: Path, needs: str = "ggml_init") -> Path:
    """A folder holding one Vulkan module and nothing else (Debian's libggml0-backend-vulkan)."""
    d = folder / "usr/lib/x86_64-linux-gnu/ggml/backends0"
    d.mkdir(parents=True)
    _cc(d / "libggml-vulkan.so", f"int {needs}(void);\nint ggml_backend_init(void) {{ return {needs}(); }}\n",
        "-shared", f"-L{base_from / 'bin'}", "-l:libggml-base.so.0.9.4")
    return folder


def test_a_later_input_of_backend_modules_only_merges(tmp_path, build):
    (build / "bin" / "libggml-vulkan.so").unlink()
    vulkan = _backend_only(tmp_path / "vulkan-only", build)
    before = tree_state(vulkan)
    proc, out = _repair(tmp_path, str(build), str(vulkan))
    assert proc.returncode == 0, proc.stderr
    m = Manifest.load(out)
    assert "vulkan" in m.recipe.backends and "bin/libggml-vulkan.so" in m.paths()
    assert m.inputs[1].contributed == ("vulkan",) and "backend modules only" in m.inputs[1].base
    assert tree_state(vulkan) == before


def test_a_backend_only_input_of_another_base_names_the_base(tmp_path, build):
    (build / "bin" / "libggml-vulkan.so").unlink()
    other = make_build(tmp_path / "other", extra_base_symbol="ggml_new_api")
    vulkan = _backend_only(tmp_path / "vulkan-only", other, needs="ggml_new_api")
    proc, _ = _repair(tmp_path, str(build), str(vulkan))
    one_error_line(proc, 2, ["libggml-vulkan.so", str(vulkan), "another ggml base", "ggml_new_api"])


def test_an_input_with_nothing_of_llama_is_refused(tmp_path, build):
    (tmp_path / "empty").mkdir()
    proc, _ = _repair(tmp_path, str(build), str(tmp_path / "empty"))
    one_error_line(proc, 2, [str(tmp_path / "empty"), "no llama.cpp executable (llama-*) or backend module"])


def _deb(folder: Path, package: str, out: Path) -> Path:
    """A package as Debian's tools write one: control and md5sums (which say what file is whose)."""
    sums = "".join(f"{hashlib.md5(p.read_bytes(), usedforsecurity=False).hexdigest()}  {p.relative_to(folder).as_posix()}\n"
                   for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink())
    (folder / "DEBIAN").mkdir(parents=True, exist_ok=True)
    (folder / "DEBIAN" / "md5sums").write_text(sums)
    (folder / "DEBIAN" / "control").write_text(f"Package: {package}\nVersion: 1.0-1\nArchitecture: amd64\n"
                                               f"Maintainer: t <t@example.org>\nDescription: test\n")
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(folder), str(out)],
                   check=True, capture_output=True)
    return out


def test_a_library_in_a_subfolder_of_a_given_deb_resolves(tmp_path, build):
    """libblas3 puts libblas.so.3 in usr/lib/<triplet>/blas/ (update-alternatives points hosts there)."""
    blas = tmp_path / "blas-pkg" / "usr/lib/x86_64-linux-gnu/blas"
    blas.mkdir(parents=True)
    _cc(blas / "libblas.so.3", "double ddot_(void) { return 1.0; }\n", "-shared", "-Wl,-soname,libblas.so.3")
    llama = tmp_path / "llama-pkg" / "usr/lib/x86_64-linux-gnu"
    shutil.copytree(build / "bin", llama, symlinks=True)
    _cc(llama / "libggml-blas.so", "int ggml_init(void);\ndouble ddot_(void);\n"
        "int ggml_backend_init(void) { return ggml_init() + (int) ddot_(); }\n", "-shared",
        f"-L{llama}", "-l:libggml-base.so.0.9.4", f"-L{blas}", "-l:libblas.so.3")
    debs = [_deb(tmp_path / "llama-pkg", "llama-test", tmp_path / "llama-test_1.0-1_amd64.deb"),
            _deb(tmp_path / "blas-pkg", "libblas-test", tmp_path / "libblas-test_1.0-1_amd64.deb")]
    proc, out = _repair(tmp_path, *map(str, debs))
    assert proc.returncode == 0, proc.stderr
    m = Manifest.load(out)
    assert "bin/libggml-blas.so" in m.paths() and any(p.endswith("/libblas.so.3") for p in m.paths()), m.paths()
    assert "libblas.so.3" not in m.host_sonames()
    # a member is named by the .deb that holds it, never by the scratch folder it was unpacked into
    assert {(x.path, x.reason) for x in m.left_out} == {
        ("llama-test_1.0-1_amd64.deb:usr/lib/x86_64-linux-gnu/libggml-extra.so", "nothing carried needs it")}


# --- Debian's real packages (cached; the fixture's name marks these slow: a cold cache downloads) ----


# --- the property: damage any files, and repair refuses naming one or lists every one it dropped ----

_LIBS = ("libggml-base.so.0.9.4", "libggml.so.0.9.4", "libllama.so.0.0.1", "libggml-extra.so")
_FILES = ("llama-server", "libggml-vulkan.so", *_LIBS, *cpu_level_files())
_DAMAGE = ("truncate", "cut in the header", "emptied", "another ELF", "remove")


def _damage(path: Path, how: str) -> None:
    if how == "remove":
        path.unlink()
    elif how == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    elif how == "cut in the header":
        path.write_bytes(path.read_bytes()[:40])
    elif how == "emptied":
        path.write_bytes(b"")
    else:
        path.unlink()
        shutil.copyfile(LS if path.name.startswith("llama-") else os.path.realpath(LIBM), path)


def _aliases(name: str) -> set[str]:
    """A file is named by itself or, a library, by its SONAME (libggml-base.so.0.9.4: libggml-base.so.0)."""
    stem, _, version = name.partition(".so")
    return {name, f"{stem}.so{version[:2]}"}


@settings(max_examples=int(os.environ.get("LEFT_OUT_EXAMPLES", "20")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(damaged=st.dictionaries(st.sampled_from(_FILES), st.sampled_from(_DAMAGE), min_size=1, max_size=4),
       leave_out=st.booleans(), flat=st.booleans())
def test_any_damage_is_refused_by_name_or_listed(pristine, pristine_flat, tmp_path_factory, damaged, leave_out, flat):
    """leave_out: the user names every damaged executable and module with --without (a removed one only
    when it is a CPU level, the one kind of absence the build's declared set reveals)."""
    from builder.check import verify
    from builder.errors import AssembleError
    from builder.prebuilt.request import RepairRequest
    from builder.flows.platforms import linux
    from builder.flows.repair import repair
    work = tmp_path_factory.mktemp("damage")
    root = work / "build"
    shutil.copytree(pristine_flat if flat else pristine, root, symlinks=True)
    for name, how in damaged.items():
        _damage(root / "bin" / name, how)
    before = tree_state(root)
    out = work / "runtime-p"
    without = tuple(n for n, how in damaged.items() if leave_out and n not in _LIBS
                    and (how != "remove" or n in cpu_level_files()))
    try:
        repair(RepairRequest(inputs=(str(root),), name="p", out=out, without=without, verify_static=True,
                             accept_loader_risk="a test: no ggml installed here"), linux)
    except AssembleError as exc:
        said = f"{exc.where or ''} {exc.what}"
        names = {a for n in damaged for a in _aliases(n)}
        if damaged.get("llama-server") == "remove":
            names.add("no llama.cpp executable (llama-*)")      # a file that is gone cannot be named
        assert exc.code == 2 and any(n in said for n in names), (damaged, exc.line())
        assert not out.exists()
    else:
        assert verify.verify_runtime(out, static=True).passed
        listed = {x.path for x in Manifest.load(out).left_out}
        dropped = {n for n, how in damaged.items() if how != "remove"}
        assert {f"{root}/bin/{n}" for n in dropped} <= listed, (damaged, listed)
    assert tree_state(root) == before
