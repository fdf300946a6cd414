"""The Debian sid llama.cpp pins (tests/support/debianllama.py) that `assemble repair` tests stand on:
well-formed without a download; downloaded, they match their sha256 and unpack into the layout
and the facts the repair code expects."""

from __future__ import annotations

import re
from pathlib import PurePosixPath


from tests.support.debianllama import (BASE, CUDA, DEBIAN_LLAMA, HIP, HIP_ROCM_DEPENDS)
from scripts.support.vendorlibs import SID


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


