"""Debian sid's prebuilt llama.cpp for tests: the packages `assemble repair` turns into a runtime.

ggml (source package ggml, 0.27.0) ships the loader, libggml-base and the CPU variant modules
in libggml0, and each GPU backend as one module package (libggml0-backend-*, CUDA in contrib);
llama.cpp (1:0.7.0) ships libllama0 (libllama, libllama-common, libmtmd) and llama.cpp-tools,
whose /usr/bin programs are thin launchers over lib/<triplet>/llama/libllama-*-impl.so.
All are fetched by pinned pool path and sha256 through vendorlibs.fetch_deb (cached, with its
apt fallback once sid moves on).

The HIP module's ROCm libraries are not repeated here: vendorlibs.SID pins them and
vendorlibs.rocm_libs() extracts them with rocBLAS data pruned to a few archs (all of it is 4 GB).

Sizes (2026-11-30): 10.9 MB download and 73 MB extracted without HIP/CUDA; the HIP module
adds 115 MB (1.27 GB extracted, code objects for ten gfx archs), the CUDA module 94 MB (575 MB).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from scripts.support.vendorlibs import Deb, _locked, cache_root, extract_deb, fetch_deb, require_x86_64_linux
from tests.support.tiers import downloads

# Pinned from sid's Packages index (main; contrib for CUDA) on 2026-11-30. Not pinned, because
# a host provides them (and must, at these floors): libc6 >= 2.43, libstdc++6, libgcc-s1,
# libgomp1, libvulkan1, libssl3t64 >= 3.3 (libllama-common, llama-server, llama-cli).
DEBIAN_LLAMA: dict[str, Deb] = {d.package: d for d in (
    Deb("libggml0", "0.27.0-1", "pool/main/g/ggml/libggml0_0.27.0-1_amd64.deb", "f621153d6615a8dd1ac4b14e110cbafca34cc66f551367c5f6326f71fb141b0d", 1671168),
    Deb("libggml0-backend-vulkan", "0.27.0-1", "pool/main/g/ggml/libggml0-backend-vulkan_0.27.0-1_amd64.deb", "67d6bd0fdd8f5d562cea3afa455fad686565dae4dcb8b75fc7e8d9b16a484f64", 4293624),
    Deb("libggml0-backend-hip", "0.27.0-1", "pool/main/g/ggml/libggml0-backend-hip_0.27.0-1_amd64.deb", "c8de64eef5de2b7b9faff94e8e7d21a75a1f3092d2377b6d211526b603c31b83", 114978860),
    Deb("libggml0-backend-cuda", "0.27.0-1", "pool/contrib/g/ggml-cuda/libggml0-backend-cuda_0.27.0-1_amd64.deb", "f462a7cfcde19dba22f463fff3a0ab1644dac47a0ee293c49d8032c7693ad823", 93645132),
    Deb("libllama0", "1:0.7.0+dfsg-2", "pool/main/l/llama.cpp/libllama0_0.7.0+dfsg-2_amd64.deb", "7d49cde5582ccdc8c454b379ba627eea8c95813b6a9c70628653101f629204d6", 3259120),
    Deb("llama.cpp-tools", "1:0.7.0+dfsg-2", "pool/main/l/llama.cpp/llama.cpp-tools_0.7.0+dfsg-2_amd64.deb", "3007c170f116891974bd37d5ba802f094c7d020412f2100cc71582fc8530895c", 1642656),
)}

# Every runtime: CPU variants + Vulkan module, libllama, the tools. HIP and CUDA are opt-in
# for their size (CUDA's own libcudart12/libcublas12 are in non-free and not pinned here).
BASE = ("libggml0", "libggml0-backend-vulkan", "libllama0", "llama.cpp-tools")
HIP = "libggml0-backend-hip"
CUDA = "libggml0-backend-cuda"

# What libggml-hip.so NEEDs from ROCm (libamdhip64.so.6, libhipblas.so.2, librocblas.so.4); the
# rest of their closure (HSA, comgr, LLVM, ...) is in vendorlibs.ROCM_PACKAGES.
HIP_ROCM_DEPENDS = ("libamdhip64-6", "libhipblas2", "librocblas4")


@dataclass(frozen=True)
class PinnedFacts:
    """What the pinned files say about themselves (read 2026-11-30), for tests to expect."""
    ggml_version: str           # ggml_version() and the libggml*.so.0.27.0 file names
    llama_version: str          # llama_version(), libllama.so.0.7.0
    build_tag: str              # usr/share/doc/libllama0/nightly-tag.txt (LLAMA_BUILD_NUMBER 11669)
    backend_dir: str            # GGML_BACKEND_DIR compiled into libggml.so.0.27.0
    cpu_variants: tuple[str, ...]
    base_exported: int          # defined global/weak default-visibility dynamic symbols of libggml-base
    glibc_floor: str            # sqrtf@GLIBC_2.43 (libm) in libggml-base, the modules and libllama


FACTS = PinnedFacts(
    ggml_version="0.27.0",
    llama_version="0.7.0",
    build_tag="b11669",
    backend_dir="/usr/lib/x86_64-linux-gnu/ggml/backends0",
    cpu_variants=("alderlake", "cannonlake", "cascadelake", "cooperlake", "haswell", "icelake", "ivybridge",
                  "piledriver", "sandybridge", "sapphirerapids", "skylakex", "sse42", "x64", "zen4"),
    base_exported=722,
    glibc_floor="2.43",
)


def _selected(with_hip: bool, with_cuda: bool) -> tuple[str, ...]:
    return BASE + ((HIP,) if with_hip else ()) + ((CUDA,) if with_cuda else ())


@downloads
def debian_llama_debs(with_hip: bool = False, with_cuda: bool = False) -> dict[str, Path]:
    """The pinned .deb files, package name -> cached path (downloaded and sha256-checked once)."""
    require_x86_64_linux()
    return {name: fetch_deb(DEBIAN_LLAMA[name]) for name in _selected(with_hip, with_cuda)}


@downloads
def extract_debian_llama(dest: Path, with_hip: bool = False, with_cuda: bool = False) -> Path:
    """Unpack the packages into one root as `dpkg -x` of each would (same files, modes and
    symlinks; no maintainer scripts run); returns dest."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in debian_llama_debs(with_hip, with_cuda).values():
        extract_deb(path, dest, lambda _: True)
    return dest


@downloads
def debian_llama_root(with_hip: bool = False, with_cuda: bool = False) -> Path:
    """extract_debian_llama into the test cache, once per machine. Read-only for tests: copy it
    (shutil.copytree(..., symlinks=True)) before changing anything. Holds a `.complete` marker."""
    names = _selected(with_hip, with_cuda)
    key = hashlib.sha256(json.dumps([[n, DEBIAN_LLAMA[n].version] for n in names]).encode()).hexdigest()[:12]
    final = cache_root() / f"debian-llama-{key}"
    if (final / ".complete").is_file():
        return final
    with _locked(f"debian-llama-{key}"):
        if not (final / ".complete").is_file():
            debs = debian_llama_debs(with_hip, with_cuda)
            work = Path(tempfile.mkdtemp(prefix=f"debian-llama-{key}.", dir=cache_root()))
            extract_debian_llama(work, with_hip, with_cuda)
            (work / ".complete").write_text(json.dumps({"packages": [p.name for p in debs.values()]}))
            if final.exists():
                shutil.rmtree(final)
            work.rename(final)
    return final

