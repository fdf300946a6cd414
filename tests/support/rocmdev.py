"""Debian sid's ROCm *development* layout for tests, without a chroot: downloaded once, cached.

On top of tests/vendorlibs.rocm_libs() (the runtime libraries, rocBLAS/hipBLASLt data for
its archs) this adds what a HIP configure reads: hipconfig (hipcc), the unversioned .so
links and CMake packages (lib*-dev), clang-21 and its ROCm device library bitcode, and
rocBLAS's index files (TensileLibrary_lazy_<gfx>.dat) for every arch it ships, so the
tree answers "which archs does sid's rocBLAS cover" exactly as the real one does. Code
objects stay pruned to rocm_libs' archs (all of them would be 4 GB).

The sid binaries (hipconfig, clang) need sid's glibc: on an older host they do not run,
and the probes fall back to reading files (hip-config-version.cmake, lib/llvm-*/bin/clang,
lib/clang/*/amdgcn/bitcode), which is the part of the layout under test here.

Cost: 1.2 MB of extra packages; the index files come out of the cached 280 MB librocblas4
package by one streaming pass (about a minute of CPU, once per machine).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from scripts.support.vendorlibs import MULTIARCH, SID, Deb, _locked, cache_root, extract_deb, fetch_deb, rocm_libs
from tests.support.tiers import downloads

# Pinned from Debian sid on 2026-11-29 (apt-cache show in scripts/rocm-sid-chroot.sh's chroot).
DEV: tuple[Deb, ...] = (
    Deb("hipcc", "7.0.2+dfsg-3", "pool/main/r/rocm-llvm/hipcc_7.0.2+dfsg-3_amd64.deb", "151b8f209534b5cea5bd3fbc7931b0d94498494b3706e72c52ff013adb7f99a1", 101036),
    Deb("libamdhip64-dev", "6.4.3-5", "pool/main/r/rocm-hipamd/libamdhip64-dev_6.4.3-5_amd64.deb", "f2a3a542d41883f87a45e2d0554c1c84ccf350c836b9e8b35473dadbc34ced5e", 225668),
    Deb("librocblas-dev", "6.4.4-4", "pool/main/r/rocblas/librocblas-dev_6.4.4-4_amd64.deb", "b86fdbe87a20759346214cbe961895bd25dea58e2303739de65b71c34eb5b05b", 95136),
    Deb("libhipblas-dev", "6.4.4-1", "pool/main/h/hipblas/libhipblas-dev_6.4.4-1_amd64.deb", "1d5cb2208dc7f4f42d88cb056af7d5158261c65ce79228a960a723023e31658c", 86500),
    Deb("libhipblaslt-dev", "7.1.1+dfsg-4", "pool/main/h/hipblaslt/libhipblaslt-dev_7.1.1+dfsg-4_amd64.deb", "8b6be908ffaf14e5825b85a8ff6156bf85c75128c5992f52e542dea346904bb7", 48512),
    Deb("clang-21", "1:21.1.8-14", "pool/main/l/llvm-toolchain-21/clang-21_21.1.8-14_amd64.deb", "8238f311a68ac02998481306aac51791ff036a557fad26639ac96171e5ea4a8b", 139156),
    Deb("rocm-device-libs-21", "7.0.2+dfsg-3", "pool/main/r/rocm-llvm/rocm-device-libs-21_7.0.2+dfsg-3_amd64.deb", "5b22b3d5acaf1a282a4a6404d387c356899100f389564d7b27c2000885683287", 480056),
)

_INDEX = re.compile(r"rocblas/[^/]+/library/TensileLibrary_lazy_gfx[0-9a-f]+\.dat$")


@dataclass(frozen=True)
class RocmDevTree:
    usr: Path           # what ROCM_PATH would be on sid: <root>/usr
    packages: tuple[str, ...]


def _dev_files(path: str) -> bool:
    return path.startswith("usr/") and not path.startswith(("usr/share/doc/", "usr/share/man/"))


@downloads
def rocm_dev_tree() -> RocmDevTree:
    """Sid's ROCm as `apt install hipcc librocblas-dev libhipblas-dev libhipblaslt-dev` lays it out."""
    base = rocm_libs()
    debs = [*DEV, SID["librocblas4"]]
    pins = [str(base.root)] + [[d.package, d.version] for d in debs]
    key = hashlib.sha256(json.dumps(pins).encode()).hexdigest()[:12]
    final = cache_root() / f"rocm-dev-{key}"
    packages = tuple(d.package for d in debs) + base.packages
    if (final / ".complete").is_file():
        return RocmDevTree(final / "usr", packages)
    with _locked(f"rocm-dev-{key}"):
        if not (final / ".complete").is_file():
            paths = [fetch_deb(d) for d in DEV]
            index_source = fetch_deb(SID["librocblas4"])
            work = Path(tempfile.mkdtemp(prefix=f"rocm-dev-{key}.", dir=cache_root()))
            # hard links: the runtime libraries (rocBLAS is 1 GB) are not copied twice
            shutil.copytree(base.root / "usr", work / "usr", symlinks=True, copy_function=os.link)
            # never write through a hard link into rocm_libs' cache: files it already has are skipped
            def fresh(keep):
                return lambda p: keep(p) and not (work / p).exists()
            for path in paths:
                extract_deb(path, work, fresh(_dev_files))
            extract_deb(index_source, work, fresh(lambda p: p.startswith(MULTIARCH + "/") and bool(_INDEX.search(p))))
            (work / ".complete").write_text(json.dumps({"packages": [p.name for p in paths]}))
            if final.exists():
                shutil.rmtree(final)
            work.rename(final)
    return RocmDevTree(final / "usr", packages)
