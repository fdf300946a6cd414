"""One ggml per runtime (issue 49 item 2), on real ELF files compiled here: llama.cpp's own
libraries come only from the inputs, never from --lib-path or the host; a backend-only input's
modules need the base input's ggml base by its SONAME. The issue's case -- a Vulkan module from
another build, its folder given as --lib-path, brought that build's libggml-base.so in as a vendor
library beside the base input's, exit 0 -- is refused in one line naming both files and where
each came from (exit 2, nothing written), in --dry-run as in the real run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from builder.prebuilt import identity
from tests.support.common import assemble, one_error_line
from tests.unit.prebuilt.test_discover import _cc, make_build

STATIC = ("--verify-static", "--accept-loader-risk", "a test: no ggml installed here")
MODULE = "int ggml_init(void);\nint ggml_backend_score(void) { return ggml_init(); }\n"


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> Path:
    """base/: a build without its Vulkan module; other/bin: another build's base (SONAME libggml-base.so,
    the same exports) and its Vulkan module; vk/: that module alone; same/: the base build's own module
    alone; odd/ + its libfoo.so: a module needing a library named otherwise that exports ggml_init."""
    t = tmp_path_factory.mktemp("one-ggml")
    base = make_build(t / "base")
    shutil.move(base / "bin" / "libggml-vulkan.so", t / "own-vulkan.so")
    (t / "same").mkdir()
    shutil.move(t / "own-vulkan.so", t / "same" / "libggml-vulkan.so")
    o = t / "other" / "bin"
    o.mkdir(parents=True)
    _cc(o / "libggml-base.so", "int ggml_init(void) { return 1; }\nint gguf_init(void) { return 3; }\n",
        "-shared", "-Wl,-soname,libggml-base.so")
    _cc(o / "libggml-vulkan.so", MODULE, "-shared", f"-L{o}", "-l:libggml-base.so")
    (t / "vk").mkdir()
    shutil.copyfile(o / "libggml-vulkan.so", t / "vk" / "libggml-vulkan.so")
    (t / "foo").mkdir()
    _cc(t / "foo" / "libfoo.so", "int ggml_init(void) { return 1; }\n", "-shared", "-Wl,-soname,libfoo.so")
    (t / "odd").mkdir()
    _cc(t / "odd" / "libggml-vulkan.so", MODULE, "-shared", f"-L{t / 'foo'}", "-l:libfoo.so")
    return t


def _repair(t: Path, tmp_path: Path, *args: str):
    out = tmp_path / "runtime-t"
    return assemble("repair", *args, "--name", "t", "--out", str(out), *STATIC, cwd=t), out


def test_another_builds_module_with_its_folder_as_lib_path_is_refused(builds, tmp_path):
    """The issue's case: refused naming the module, the base input's base and the other base."""
    lib_path = ("--lib-path", str(builds / "other" / "bin"))
    for dry in ((), ("--dry-run",)):
        proc, out = _repair(builds, tmp_path, "base", "vk", *lib_path, *dry)
        one_error_line(proc, 2, ["vk/libggml-vulkan.so: needs libggml-base.so",
                                 "base/bin/libggml-base.so.0.9.4 (SONAME libggml-base.so.0)",
                                 f"{builds}/other/bin/libggml-base.so (in the --lib-path folder {builds}/other/bin)",
                                 "come only from the inputs", "fix: take libggml-vulkan.so from the same build"])
        assert not out.exists() and "would carry" not in proc.stdout


def test_another_builds_folder_as_a_later_input_is_refused_by_soname(builds, tmp_path):
    """Its base exports the same symbols, but under another SONAME: both base files are named."""
    proc, out = _repair(builds, tmp_path, "base", "other/bin")
    one_error_line(proc, 2, ["carry different ggml bases", "their SONAMEs differ (libggml-base.so.0 vs libggml-base.so)",
                             "base/bin/libggml-base.so.0.9.4: ggml 0.9.4", "other/bin/libggml-base.so: ggml version"])
    assert not out.exists()


def test_a_library_exporting_ggml_symbols_from_lib_path_is_refused(builds, tmp_path):
    """Named otherwise (libfoo.so), it is still llama.cpp's by what it exports."""
    proc, out = _repair(builds, tmp_path, "base", "odd", "--lib-path", str(builds / "foo"))
    one_error_line(proc, 2, ["odd/libggml-vulkan.so needs libfoo.so", f"{builds}/foo/libfoo.so (in the --lib-path",
                             "it exports llama.cpp's symbols (ggml_init)", "come only from the inputs"])
    assert not out.exists()


def test_the_base_builds_own_module_as_a_later_input_is_carried(builds, tmp_path):
    proc, out = _repair(builds, tmp_path, "base", "same", "--lib-path", str(builds / "other" / "bin"))
    assert proc.returncode == 0, proc.stderr
    libs = sorted(p.name for p in (out / "lib").iterdir())
    assert libs == ["libggml-base.so.0", "libggml-base.so.0.9.4", "libggml.so.0", "libggml.so.0.9.4",
                    "libllama.so.0", "libllama.so.0.0.1"]


def test_same_base_compares_sonames(builds):
    ours = identity.base_identity(builds / "base" / "bin" / "libggml-base.so.0.9.4")
    theirs = identity.base_identity(builds / "other" / "bin" / "libggml-base.so")
    assert ours.soname == "libggml-base.so.0" and theirs.soname == "libggml-base.so"
    assert ours.interface == theirs.interface
    assert identity.same_base(ours, theirs) == "their SONAMEs differ (libggml-base.so.0 vs libggml-base.so)"
