"""The pinned Debian llama.cpp packages download and unpack (slow tier: the download)."""

from __future__ import annotations

from builder.runtime.elf import read_elf
from builder.runtime.manifest import sha256_file
from tests.support.debianllama import BASE, DEBIAN_LLAMA, FACTS, debian_llama_debs, extract_debian_llama
from scripts.support.vendorlibs import MULTIARCH, get_or_skip


def test_the_pinned_debs_download_and_unpack_into_a_debian_llama_tree(tmp_path):
    debs = get_or_skip(debian_llama_debs)
    assert list(debs) == list(BASE)
    for name, path in debs.items():
        if path.name.endswith(".fallback.deb"):
            # sid moved on: apt fetched (and signature-checked) the current file; the pin is stale
            assert path.name.startswith(f"{name}_")
        else:
            assert sha256_file(path) == DEBIAN_LLAMA[name].sha256, path

    root = extract_debian_llama(tmp_path / "root")
    lib = root / MULTIARCH
    base = sorted(lib.glob("libggml-base.so.0*"))
    assert [p.name for p in base] == ["libggml-base.so.0", f"libggml-base.so.{FACTS.ggml_version}"]
    assert (lib / "libggml-base.so.0").resolve() == base[1].resolve()

    modules = root / FACTS.backend_dir.lstrip("/")
    variants = sorted(p.name for p in modules.glob("libggml-cpu-*.so"))
    assert variants == sorted(f"libggml-cpu-{v}.so" for v in FACTS.cpu_variants)
    assert (modules / "libggml-vulkan.so").is_file()

    server = root / "usr/bin/llama-server"
    info = read_elf(server)
    assert info is not None and info.is_program
    # a thin launcher: the server lives in an -impl.so found through an absolute RUNPATH
    assert info.needed[0] == "libllama-server-impl.so"
    assert info.runpath == (f"/{MULTIARCH}/llama",)
    assert (lib / "llama" / "libllama-server-impl.so").is_file()
    assert (root / "usr/share/doc/libllama0/nightly-tag.txt").read_text().strip() == FACTS.build_tag
    assert read_elf(base[1]).max_version("GLIBC_") == FACTS.glibc_floor
