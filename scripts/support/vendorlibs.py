"""Real vendor libraries for the tests and scripts/bench-bundle.py: downloaded once per machine,
cached, partly extracted.

CUDA: libcudart, libcublas and libcublasLt from NVIDIA's wheels on PyPI (pip download).
ROCm: Debian sid packages (librocblas4, libhipblaslt1, libamdhip64-6 and the libraries
they need), fetched from the Debian archive by pinned pool path and sha256; when sid has
moved on and a pinned file is gone, `apt-get download` with a private sid source list
fetches the current version (apt checks the archive signature).

Cache: $ASSEMBLE_TEST_CACHE, else ~/.cache/assemble-tests. Set ASSEMBLE_TEST_OFFLINE=1
to skip (not fail) tests whose downloads are not cached yet.

Sizes (2026-11): CUDA wheels 447 MB download, 600 MB extracted; ROCm debs 500 MB
download, about 1.7 GB extracted with the default arch set (rocBLAS alone is a 1 GB
library; its data for all archs would be 4 GB, so only the requested archs are kept).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import lzma
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from builder.runtime.layout import arch_tokens
from builder.runtime.manifest import sha256_file
from scripts.support.heavy import downloads

MIRROR = os.environ.get("ASSEMBLE_DEBIAN_MIRROR", "https://deb.debian.org/debian").rstrip("/")
MULTIARCH = "usr/lib/x86_64-linux-gnu"


class Unavailable(RuntimeError):
    """A download is needed but not possible (offline, unreachable, wrong platform)."""


class WrongPlatform(Unavailable):
    """These vendor libraries cannot exist here at all (not x86_64 Linux): always a skip."""


def cache_root() -> Path:
    root = Path(os.environ.get("ASSEMBLE_TEST_CACHE") or Path.home() / ".cache" / "assemble-tests")
    root.mkdir(parents=True, exist_ok=True)
    return root


def offline() -> bool:
    return os.environ.get("ASSEMBLE_TEST_OFFLINE", "") not in ("", "0")


def require_x86_64_linux() -> None:
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise WrongPlatform("the vendor test libraries are x86_64 Linux builds")


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """One process per machine builds a cache entry; the others wait (pytest-xdist, parallel CI jobs)."""
    lock = cache_root() / f".{name}.lock"
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --- Debian ------------------------------------------------------------------

@dataclass(frozen=True)
class Deb:
    package: str
    version: str
    filename: str       # pool path in the archive
    sha256: str
    size: int


# Pinned from Debian sid on 2026-11-29 (apt-cache show). Not libc6/libstdc++6/libgcc-s1
# (never bundled) nor libdrm* (never bundled): the bundler records them, it does not need them.
SID: dict[str, Deb] = {d.package: d for d in (
    Deb("librocblas4", "6.4.4-4", "pool/main/r/rocblas/librocblas4_6.4.4-4_amd64.deb", "05613a07d3fba2feaa8b81a86a22bc142dd4fb6630c44c416883a33bf22a1cdb", 280155896),
    Deb("libhipblaslt1", "7.1.1+dfsg-4", "pool/main/h/hipblaslt/libhipblaslt1_7.1.1+dfsg-4_amd64.deb", "05159cd3ce6c5c3914c46a1cafd2be4d288b9ae5e7cda87de1beaff3c0c00542", 158924252),
    Deb("libhipblas2", "6.4.4-1", "pool/main/h/hipblas/libhipblas2_6.4.4-1_amd64.deb", "eacf73ea0ab529df209fe4cdca19675fd5513a656f50d6d9cdcb5438a0d5894c", 161008),
    Deb("libamdhip64-6", "6.4.3-5", "pool/main/r/rocm-hipamd/libamdhip64-6_6.4.3-5_amd64.deb", "0c90c3f0a1f02ab5525a11c5b1879f1cb05bee9c7a2a79aa36863f57c85f7177", 9385096),
    Deb("libhsa-runtime64-1", "6.4.3+dfsg-5", "pool/main/r/rocr-runtime/libhsa-runtime64-1_6.4.3+dfsg-5_amd64.deb", "ca6a3f8a844010ee4ccd0165af5ed21192dbfe58a1ce1f2360037fe797bf27d0", 678348),
    Deb("libamd-comgr3", "7.0.2+dfsg-3", "pool/main/r/rocm-llvm/libamd-comgr3_7.0.2+dfsg-3_amd64.deb", "5e18fa40a84922b5b1ff9815e775ff633b0f7ca6925bea39855ab906c7e08de4", 13933592),
    Deb("libllvm21", "1:21.1.8-14", "pool/main/l/llvm-toolchain-21/libllvm21_21.1.8-14_amd64.deb", "5eaf93b4180c233e20dc537684baa123306d356f2bc9190d39a798bd835a0aec", 28254324),
    Deb("libz3-4", "4.13.3-1.1", "pool/main/z/z3/libz3-4_4.13.3-1.1_amd64.deb", "17a0b6d5dba8db60732334ae3eb6be5f0c58f72a77304311add514a4d55bc434", 8643868),
    Deb("libroctx64-4", "6.4.1-1", "pool/main/r/roctracer/libroctx64-4_6.4.1-1_amd64.deb", "06fa12acc9eb81428231bc0ff98be4c1f1adab57d4d194da36fe697ea214ddec", 4992),
    Deb("libnuma1", "2.0.19-1+b2", "pool/main/n/numactl/libnuma1_2.0.19-1+b2_amd64.deb", "c4175eb2a991806b5f683f7b2a6a9e444f310058763070b30417e1f1021cf04c", 22036),
    Deb("libelf1t64", "0.196-1", "pool/main/e/elfutils/libelf1t64_0.196-1_amd64.deb", "dde2ab88aebdc4dfc017c5309cd17917f7230f1684fb82551390089cf0b7ced1", 61224),
    Deb("libzstd1", "1.5.7+dfsg-4", "pool/main/libz/libzstd/libzstd1_1.5.7+dfsg-4_amd64.deb", "93e7930e4c25b918f1dd980cc1c6d4487654a248f5fa71eacb976ed7bbe954bd", 304040),
    Deb("zlib1g", "1:1.3.dfsg+really1.3.2-4", "pool/main/z/zlib/zlib1g_1.3.dfsg+really1.3.2-4_amd64.deb", "8506ce550a81ac14b047608e0df121037d9cbb10c3cc28446f68cf8c1d9d31ce", 92424),
    Deb("libffi8", "3.8.0-2", "pool/main/libf/libffi/libffi8_3.8.0-2_amd64.deb", "8f52979b2f3831088c419aae858f10fd3ad7e42cc6c1d28967bae996a98223a4", 32472),
    Deb("libedit2", "3.1-20260512-1", "pool/main/libe/libedit/libedit2_3.1-20260512-1_amd64.deb", "85133718b6f81f44c88c4d95162e4e39af1521fbbd97d108d36294a37076a4cd", 93600),
    Deb("libxml2-16", "2.15.4+dfsg-1+b1", "pool/main/libx/libxml2/libxml2-16_2.15.4+dfsg-1+b1_amd64.deb", "f2b4d9acff743ff71f5409ae301452ebbb37d0d8709cf46fc9ec755d7df803ff", 683676),
    Deb("libtinfo6", "6.6+20260608-2", "pool/main/n/ncurses/libtinfo6_6.6+20260608-2_amd64.deb", "14682d1f6e35df22df0fe1eb2c09418aff0e29e2ea5a7bc0aa1bcd37192ba5a7", 352696),
    Deb("libbsd0", "0.12.2-3", "pool/main/libb/libbsd/libbsd0_0.12.2-3_amd64.deb", "0383e47d704a5e58080606cbcafd2f2aa725702767ccf8b877fb224d04ff38c5", 131912),
    Deb("libmd0", "1.3.0-1", "pool/main/libm/libmd/libmd0_1.3.0-1_amd64.deb", "b93615e08319799bedd98a68643d607b06a7713365f829fb3cae131f8a3b81b1", 45420),
)}

# What a HIP backend links (hipBLAS -> rocBLAS, hipBLASLt, HIP -> ROCr) and what those need.
ROCM_PACKAGES = tuple(SID)


def _download(url: str, dest: Path) -> None:
    tmp = dest.with_name(dest.name + ".part")
    with urllib.request.urlopen(url, timeout=120) as resp, open(tmp, "wb") as out:
        shutil.copyfileobj(resp, out, 4 << 20)
    tmp.rename(dest)


def _apt_download(package: str, dest_dir: Path) -> Path:
    """The current sid version through apt-get (signature-checked), without touching apt's state."""
    keyring = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
    if not shutil.which("apt-get") or not keyring.is_file():
        raise Unavailable(f"{package}: the pinned file left the archive and apt-get/debian-archive-keyring "
                          "are not here to fetch the current one; update its pin (SID in scripts/support/vendorlibs.py "
                          "or DEBIAN_LLAMA in tests/support/debianllama.py)")
    with tempfile.TemporaryDirectory() as work:
        w = Path(work)
        (w / "etc").mkdir()
        (w / "lists" / "partial").mkdir(parents=True)
        (w / "cache" / "archives" / "partial").mkdir(parents=True)
        (w / "etc" / "sid.sources").write_text(
            f"Types: deb\nURIs: {MIRROR.replace('https://', 'http://')}\nSuites: sid\nComponents: main contrib\n"
            f"Signed-By: {keyring}\n")
        opts = ["-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={w / 'etc'}",
                "-o", f"Dir::State::Lists={w / 'lists'}", "-o", f"Dir::Cache={w / 'cache'}",
                "-o", "Dir::State::status=/dev/null", "-o", "Debug::NoLocking=1",
                "-o", "Acquire::Check-Valid-Until=false"]
        subprocess.run(["apt-get", *opts, "-qq", "update"], check=True, capture_output=True)
        before = set(dest_dir.glob("*.deb"))
        subprocess.run(["apt-get", *opts, "-qq", "download", package], check=True, cwd=dest_dir,
                       capture_output=True)
        new = [p for p in dest_dir.glob(f"{package}_*.deb") if p not in before]
        if not new:
            raise Unavailable(f"apt-get download {package} produced no file")
        return new[0]


@downloads
def fetch_deb(deb: Deb) -> Path:
    """The pinned .deb from the cache, downloading it (sha256-checked) when missing."""
    with _locked(f"deb-{deb.package}"):     # the background prefetch may be fetching it now
        return _fetch_deb(deb)


def _fetch_deb(deb: Deb) -> Path:
    folder = cache_root() / "debs"
    folder.mkdir(exist_ok=True)
    dest = folder / PurePosixPath(deb.filename).name
    if dest.is_file() and dest.stat().st_size == deb.size:
        return dest
    current = sorted(folder.glob(f"{deb.package}_*.fallback.deb"))
    if current:
        return current[-1]
    if offline():
        raise Unavailable(f"{deb.package} is not cached and ASSEMBLE_TEST_OFFLINE is set")
    try:
        _download(f"{MIRROR}/{deb.filename}", dest)
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise
        got = _apt_download(deb.package, folder)     # sid moved on: take the current version
        final = got.with_name(got.stem + ".fallback.deb")
        got.rename(final)
        return final
    except urllib.error.URLError as exc:
        raise Unavailable(f"cannot reach {MIRROR} ({exc.reason})") from None
    if sha256_file(dest) != deb.sha256:
        dest.unlink()
        raise RuntimeError(f"{deb.filename}: sha256 mismatch (corrupt download or a changed mirror)")
    return dest


class _Slice(io.RawIOBase):
    """A read-only window onto one member of an ar archive."""

    def __init__(self, f, size: int):
        self._f, self._left = f, size

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self._f.readinto(memoryview(b)[:min(len(b), self._left)]) if self._left else 0
        self._left -= n
        return n


def _tar_stream(deb: Path, use_dpkg: bool | None = None):
    """The data tarball of a .deb as a stream: dpkg-deb when present, else ar + xz/zstd in Python."""
    if use_dpkg is None:
        use_dpkg = shutil.which("dpkg-deb") is not None
    if use_dpkg:
        proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
        return proc.stdout, proc
    f = open(deb, "rb")  # noqa: SIM115 -- the stream returned reads from it
    if f.read(8) != b"!<arch>\n":
        raise RuntimeError(f"{deb}: not a Debian package")
    while header := f.read(60):
        name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58])
        if name.startswith("data.tar"):
            member = io.BufferedReader(_Slice(f, size), 1 << 20)
            if name.endswith(".xz"):
                return lzma.open(member), None
            if name.endswith(".zst") and shutil.which("zstd"):
                proc = subprocess.Popen(["zstd", "-dc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

                def feed() -> None:
                    with proc.stdin:  # noqa: B023 -- feed runs for this member, returned below
                        shutil.copyfileobj(member, proc.stdin, 1 << 20)  # noqa: B023
                threading.Thread(target=feed, daemon=True).start()
                return proc.stdout, proc
            raise Unavailable(f"{deb}: {name} needs dpkg-deb or zstd")
        f.seek(size + (size & 1), 1)
    raise RuntimeError(f"{deb}: no data.tar member")


def extract_deb(deb: Path, dest: Path, keep: Callable[[str], bool], use_dpkg: bool | None = None) -> int:
    """Extract the members `keep` accepts (paths like "usr/lib/x86_64-linux-gnu/libx.so.1"),
    streaming, so a 4 GB package never lands on disk whole. Returns the number extracted."""
    stream, proc = _tar_stream(deb, use_dpkg)
    count = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for m in tar:
                rel = PurePosixPath(*[p for p in PurePosixPath(m.name).parts if p not in (".", "/")])
                if not rel.parts or ".." in rel.parts or not keep(str(rel)):
                    continue
                target = dest / rel
                if m.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                if m.issym():
                    if target.is_symlink() or target.exists():
                        target.unlink()
                    os.symlink(m.linkname, target)
                elif m.isfile():
                    src = tar.extractfile(m)
                    with open(target, "wb") as out:
                        shutil.copyfileobj(src, out, 4 << 20)
                    os.chmod(target, m.mode & 0o777)
                else:
                    continue
                count += 1
    finally:
        stream.close()
        if proc is not None:
            proc.wait()
    return count


@dataclass(frozen=True)
class RocmLibs:
    root: Path                  # extraction root (a Debian file-system tree)
    libdir: Path                # root/usr/lib/x86_64-linux-gnu
    archs: tuple[str, ...]      # GPU archs whose data files were kept
    packages: tuple[str, ...]


# gfx1100: the arch a test recipe targets; gfx1010: a second, small one (11 MB in rocBLAS)
# so that pruning has something to drop. hipBLASLt has no gfx1010 data at all.
DEFAULT_ARCHS = ("gfx1100", "gfx1010")


def _keep_rocm(archs: tuple[str, ...]) -> Callable[[str], bool]:
    def keep(path: str) -> bool:
        if not path.startswith(MULTIARCH + "/"):
            return False
        rel = path[len(MULTIARCH) + 1:]
        if "/" not in rel:
            return ".so" in rel and not rel.endswith(".a")
        top = rel.split("/", 1)[0]
        if top in ("rocblas", "hipblaslt"):
            tokens = arch_tokens(rel)
            return not tokens or bool(tokens & set(archs))
        return False
    return keep


@downloads
def rocm_libs(archs: tuple[str, ...] = DEFAULT_ARCHS, packages: tuple[str, ...] = ROCM_PACKAGES) -> RocmLibs:
    """Debian sid's ROCm runtime libraries in one tree, with data for `archs` plus arch-less files."""
    require_x86_64_linux()
    debs = [SID[p] for p in packages]
    key = hashlib.sha256(json.dumps([[d.package, d.version] for d in debs] + [sorted(archs)]).encode()).hexdigest()[:12]
    final = cache_root() / f"rocm-{key}"
    if (final / ".complete").is_file():
        return RocmLibs(final, final / MULTIARCH, tuple(archs), tuple(packages))
    with _locked(f"rocm-{key}"):
        if not (final / ".complete").is_file():
            paths = [fetch_deb(d) for d in debs]
            work = Path(tempfile.mkdtemp(prefix=f"rocm-{key}.", dir=cache_root()))
            keep = _keep_rocm(tuple(archs))
            for path in paths:
                extract_deb(path, work, keep)
            (work / ".complete").write_text(json.dumps({"packages": [p.name for p in paths], "archs": archs}))
            if final.exists():
                shutil.rmtree(final)
            work.rename(final)
    return RocmLibs(final, final / MULTIARCH, tuple(archs), tuple(packages))


# --- CUDA wheels ---------------------------------------------------------------

# (project, version): cuBLAS + cuBLASLt, and the CUDA runtime, CUDA 13 (wheels put them in nvidia/cu13/lib).
CUDA_WHEELS = (("nvidia-cublas", "13.10.0.20"), ("nvidia-cuda-runtime", "13.5.37"))


@dataclass(frozen=True)
class CudaLibs:
    libdir: Path                # libcudart.so.13, libcublas.so.13, libcublasLt.so.13 (and libnvblas)
    wheels: tuple[str, ...]


def _wheel(project: str, version: str) -> Path:
    with _locked("wheels"):                  # one pip download into the folder at a time
        return _fetch_wheel(project, version)


def _fetch_wheel(project: str, version: str) -> Path:
    folder = cache_root() / "wheels"
    folder.mkdir(exist_ok=True)
    stem = f"{project.replace('-', '_')}-{version}-"
    found = sorted(folder.glob(stem + "*.whl"))
    if found:
        return found[0]
    if offline():
        raise Unavailable(f"{project}=={version} is not cached and ASSEMBLE_TEST_OFFLINE is set")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                           "--disable-pip-version-check", "-q", "-d", str(folder), f"{project}=={version}"],
                          capture_output=True, text=True)
    found = sorted(folder.glob(stem + "*.whl"))
    if proc.returncode != 0 or not found:
        raise Unavailable(f"pip download {project}=={version} failed: {proc.stderr.strip()[-500:]}")
    return found[0]


# NCCL and NVRTC as well: what a CUDA runtime with GGML_CUDA_NCCL carries (the benchmark's tree).
CUDA_WHEELS_FULL = CUDA_WHEELS + (("nvidia-nccl-cu13", "2.32.3"), ("nvidia-cuda-nvrtc", "13.5.37"))


@downloads
def cuda_libs(wheel_pins: tuple[tuple[str, str], ...] = CUDA_WHEELS) -> CudaLibs:
    """CUDA 13 shared libraries from NVIDIA's PyPI wheels, all in one folder."""
    require_x86_64_linux()
    key = hashlib.sha256(json.dumps(wheel_pins).encode()).hexdigest()[:12]
    final = cache_root() / f"cuda-{key}"
    if (final / ".complete").is_file():
        return CudaLibs(final / "lib", tuple(f"{p}=={v}" for p, v in wheel_pins))
    with _locked(f"cuda-{key}"):
        if not (final / ".complete").is_file():
            wheels = [_wheel(p, v) for p, v in wheel_pins]
            work = Path(tempfile.mkdtemp(prefix=f"cuda-{key}.", dir=cache_root()))
            (work / "lib").mkdir()
            for whl in wheels:
                with zipfile.ZipFile(whl) as z:
                    for info in z.infolist():
                        p = PurePosixPath(info.filename)
                        if len(p.parts) >= 2 and p.parts[-2] == "lib" and ".so" in p.name:
                            target = work / "lib" / p.name
                            with z.open(info) as src, open(target, "wb") as out:
                                shutil.copyfileobj(src, out, 4 << 20)
                            os.chmod(target, 0o755)
            (work / ".complete").write_text(json.dumps([w.name for w in wheels]))
            if final.exists():
                shutil.rmtree(final)
            work.rename(final)
    return CudaLibs(final / "lib", tuple(f"{p}=={v}" for p, v in wheel_pins))


@dataclass(frozen=True)
class CudaSite:
    site: Path                  # a site-packages folder the wheels are installed into (RECORD, .dist-info)
    libdir: Path                # site/nvidia/cu13/lib: libcudart.so.13, libcublas.so.13, libcublasLt.so.13


@downloads
def cuda_site(wheel_pins: tuple[tuple[str, str], ...] = CUDA_WHEELS) -> CudaSite:
    """The same wheels installed by pip (not unpacked by hand): their .dist-info and RECORD say which wheel
    a library came from, and hold NVIDIA's License.txt."""
    require_x86_64_linux()
    key = hashlib.sha256(json.dumps(wheel_pins).encode()).hexdigest()[:12]
    final = cache_root() / f"cuda-site-{key}"
    site = final / "site-packages"
    if not (final / ".complete").is_file():
        with _locked(f"cuda-site-{key}"):
            if not (final / ".complete").is_file():
                wheels = [_wheel(p, v) for p, v in wheel_pins]
                work = Path(tempfile.mkdtemp(prefix=f"cuda-site-{key}.", dir=cache_root()))
                proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                                       "--disable-pip-version-check", "--target", str(work / "site-packages"),
                                       *map(str, wheels)], capture_output=True, text=True)
                if proc.returncode != 0:
                    raise RuntimeError(f"pip install of the cached wheels failed: {proc.stderr[-500:]}")
                (work / ".complete").write_text(json.dumps([w.name for w in wheels]))
                if final.exists():
                    shutil.rmtree(final)
                work.rename(final)
    libdir = next(p.parent for p in sorted(site.glob("nvidia/*/lib/libcudart.so.*")))
    return CudaSite(site, libdir)


# --- small C programs ------------------------------------------------------------

def cc() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise Unavailable("no C compiler (cc/gcc/clang) to build the test programs")


def loaded_probe(symbol: str) -> str:
    """C source of a program that calls `const char *symbol(void)` from a library it links, prints
    "<symbol>=<its answer>", then "LOADED <path>" for every object ld.so mapped."""
    return r"""
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
const char *SYM(void);
static int cb(struct dl_phdr_info *i, size_t s, void *d) {
    if (i->dlpi_name && i->dlpi_name[0]) printf("LOADED %s\n", i->dlpi_name);
    return 0;
}
int main(void) { printf("SYM=%s\n", SYM()); dl_iterate_phdr(cb, 0); return 0; }
""".replace("SYM", symbol)


def compile_c(source: str, out: Path, *args: str) -> Path:
    """Build a small C program or library (args: -shared, -L..., -l..., -Wl,...)."""
    src = out.with_suffix(out.suffix + ".c") if out.suffix else out.with_name(out.name + ".c")
    src.write_text(source)
    proc = subprocess.run([cc(), "-O1", "-fPIC", str(src), "-o", str(out), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"compiling {src.name} failed:\n{proc.stderr}")
    return out


def get_or_skip(fetch: Callable):
    """Call a fetcher; skip the test when the platform cannot have the libraries or when
    offline mode says so; otherwise a failed download fails the test (CI must notice)."""
    import pytest
    try:
        return fetch()
    except WrongPlatform as exc:
        pytest.skip(str(exc))
    except Unavailable as exc:
        if offline():
            pytest.skip(str(exc))
        raise


def readelf_dynamic(path: Path) -> dict[str, list[str]]:
    """NEEDED/SONAME/RPATH/RUNPATH as binutils reads them: a second opinion on builder.runtime.elf."""
    out = subprocess.run(["readelf", "-dW", str(path)], capture_output=True, text=True, check=True).stdout
    facts: dict[str, list[str]] = {}
    for tag, value in re.findall(r"\((NEEDED|SONAME|RPATH|RUNPATH)\)\s+[^\[]*\[(.*)\]", out):
        facts.setdefault(tag, []).append(value)
    return facts
