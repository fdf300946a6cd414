"""The Debian sid llama.cpp pins (tests/support/debianllama.py) that `assemble repair` tests stand on:
well-formed without a download; downloaded, they match their sha256 and unpack into the layout
and the facts the repair code expects."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

import pytest

from builder.runtime.elf import read_elf
from builder.runtime.manifest import sha256_file
from tests.support.debianllama import (BASE, CUDA, DEBIAN_LLAMA, FACTS, HIP, HIP_ROCM_DEPENDS, debian_llama_debs,
                                       extract_debian_llama)
from scripts.support.vendorlibs import MULTIARCH, SID, get_or_skip


def test_pins_name_their_package_and_version_and_the_rocm_ones_are_pinned_in_vendorlibs():
    for name, deb in DEBIAN_LLAMA.items():
        assert deb.package == name
        component = "contrib" if name == CUDA else "main"
        upstream = deb.version.split(":", 1)[-1]      # the epoch is not in the file name
        assert deb.filename.startswith(f"pool/{component}/")
        assert PurePosixPath(deb.filename).name == f"{name}_{upstream}_amd64.deb"
        assert re.fullmatch(r"[0-9a-f]{64}", deb.sha256) and deb.size > 0
    assert set(BASE) | {HIP, CUDA} == set(DEBIAN_LLAMA)
    assert set(HIP_ROCM_DEPENDS) <= set(SID)


@pytest.mark.slow
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
