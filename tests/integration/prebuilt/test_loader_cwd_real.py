"""The loader's current-path import on Debian's libggml and on our patched build (slow tier: downloads, a build)."""

from __future__ import annotations

from builder.check.prebuiltloader import CWD_NAME
from builder.check.report import PASS
from builder.prebuilt.loader import cwd_readers, loader_facts
from tests.support.common import assemble
from tests.unit.prebuilt.test_loader_cwd import _checks  # shared with the quick tier


def test_debians_libggml_imports_current_path():
    from tests.support.debianllama import FACTS, debian_llama_root
    lib = debian_llama_root() / "usr" / "lib" / "x86_64-linux-gnu" / f"libggml.so.{FACTS.ggml_version}"
    facts = loader_facts(lib, (FACTS.backend_dir,))
    assert facts.reads_cwd == ("std::filesystem::current_path",) and facts.backend_dirs == (FACTS.backend_dir,)


def test_the_patched_build_passes_statically(cpu_runtime):
    (libggml,) = [p for p in (cpu_runtime / "lib").glob("libggml.so*") if not p.is_symlink()]
    assert cwd_readers(libggml) == ()
    verified = assemble("verify", str(cpu_runtime), "--static", "--json")
    assert verified.returncode == 0 and _checks(verified)[CWD_NAME]["status"] == PASS
