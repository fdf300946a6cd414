"""ELF reading on a large real library (slow tier: the vendor download)."""

from __future__ import annotations

import time

from builder.runtime.elf import read_elf
from scripts.support.vendorlibs import cuda_libs, get_or_skip


def test_headers_only_on_a_large_library():
    libs = get_or_skip(cuda_libs)
    big = libs.libdir / "libcublasLt.so.13"
    assert big.stat().st_size > 300 << 20
    start = time.perf_counter()
    info = read_elf(big)
    elapsed = time.perf_counter() - start
    assert info.soname == "libcublasLt.so.13"
    assert info.bytes_read < 256 << 10, "header parsing must not read the library"
    assert elapsed < 0.5
