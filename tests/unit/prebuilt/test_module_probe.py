"""verify's module probe loads a backend module as llama-server does (issue 49 item 3). ggml dlopen()s
a module by its full path, so ld.so looks for the module's own dependencies in the module's DT_RPATH
and then in the executable's -- llama-server's, the runtime's lib/. The probe runs in a copy of this
Python given llama-server's DT_RPATH, so it finds what the server finds, and never reads the host's
LD_LIBRARY_PATH. The case: Debian's BLAS module needs libblas.so.3, carried in lib/; a bare dlopen()
from `python -c` did not find it and verify failed a runtime whose llama-server lists BLAS.

On real ELF files compiled here: a ggml base with the registry calls, a module with no DT_RPATH of
its own (as repair leaves one) needing a library that lies only in lib/, a llama-server linked as
build and repair link it (DT_RPATH $ORIGIN/../lib) or with DT_RUNPATH, which lends its modules nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from builder.check.dynamic import probe_module, server_search_dirs
from tests.unit.prebuilt.test_discover import _cc

BASE = r"""
#include <stddef.h>
struct reg { int n; const char *names[2]; };
size_t ggml_backend_reg_dev_count(struct reg *r) { return r->n; }
void *ggml_backend_reg_dev_get(struct reg *r, size_t i) { return (void *) r->names[i]; }
const char *ggml_backend_dev_name(void *d) { return d; }
int ggml_backend_dev_type(void *d) { (void) d; return 2; }
"""
BLAS_MODULE = r"""
int blas_dot(void);
struct reg { int n; const char *names[2]; };
static struct reg r = {1, {"BLAS", 0}};
void *ggml_backend_init(void) { return blas_dot() == 7 ? &r : 0; }
"""


def make_runtime(root: Path, *, server_tags: str = "--disable-new-dtags") -> Path:
    lib, bin_ = root / "lib", root / "bin"
    lib.mkdir(parents=True)
    bin_.mkdir()
    _cc(lib / "libggml-base.so.0", BASE, "-shared", "-Wl,-soname,libggml-base.so.0")
    _cc(lib / "libblas.so.3", "int blas_dot(void) { return 7; }\n", "-shared", "-Wl,-soname,libblas.so.3")
    _cc(bin_ / "libggml-blas.so", BLAS_MODULE, "-shared", f"-L{lib}", "-l:libblas.so.3")
    _cc(bin_ / "llama-server", "int main(void) { return 0; }\n", f"-Wl,{server_tags}", "-Wl,-rpath,$ORIGIN/../lib")
    return root


@pytest.fixture
def runtime(tmp_path) -> Path:
    return make_runtime(tmp_path / "runtime-blas")


def test_a_dependency_carried_in_lib_is_found_as_llama_server_finds_it(runtime):
    assert server_search_dirs(runtime) == (runtime / "bin" / ".." / "lib",)
    probe = probe_module(runtime, runtime / "bin" / "libggml-blas.so", {})
    assert (probe.error, probe.devices, probe.unsupported) == (None, ("BLAS",), False)


def test_a_server_with_runpath_lends_its_modules_nothing(tmp_path):
    """DT_RUNPATH serves only the executable's own NEEDED: the server would not find libblas.so.3 for
    the module, and the probe says so, as a bare `python -c` did for every runtime."""
    rt = make_runtime(tmp_path / "runtime-runpath", server_tags="--enable-new-dtags")
    assert server_search_dirs(rt) == ()
    probe = probe_module(rt, rt / "bin" / "libggml-blas.so", {})
    assert probe.error == "libblas.so.3: cannot open shared object file: No such file or directory"


def test_the_hosts_ld_library_path_is_never_read(runtime, tmp_path, monkeypatch):
    """The dependency moved to a folder only the host's LD_LIBRARY_PATH names: the probe, given the
    check's own environment, fails as llama-server would, naming what dlopen() could not find."""
    elsewhere = tmp_path / "host-libs"
    elsewhere.mkdir()
    os.rename(runtime / "lib" / "libblas.so.3", elsewhere / "libblas.so.3")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(elsewhere))
    probe = probe_module(runtime, runtime / "bin" / "libggml-blas.so", {})
    assert probe.error == "libblas.so.3: cannot open shared object file: No such file or directory"


def test_a_score_of_zero_no_registry_and_no_init_are_told_apart(runtime):
    b = runtime / "bin"
    _cc(b / "libggml-cpu-zen9.so", "int ggml_backend_score(void) { return 0; }\nvoid *ggml_backend_init(void);\n",
        "-shared")
    _cc(b / "libggml-rpc.so", "void *ggml_backend_init(void) { return 0; }\n", "-shared")
    _cc(b / "libggml-opencl.so", "int not_a_backend(void) { return 0; }\n", "-shared")
    assert probe_module(runtime, b / "libggml-cpu-zen9.so", {}).unsupported
    none = probe_module(runtime, b / "libggml-rpc.so", {})
    assert (none.error, none.devices) == (None, ())
    assert probe_module(runtime, b / "libggml-opencl.so", {}).error == "no ggml_backend_init symbol"
