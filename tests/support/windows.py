"""Windows inputs made here: the pinned llama.cpp cross-built with mingw-w64 in the sid chroot
(scripts/mingw-build-in-chroot.sh), packed the way upstream packs its Windows releases (one flat
zip per backend, each repeating the executables and the ggml base; the compiler's runtime DLLs in
a zip of their own, as upstream ships cudart), and Wine to run what repair makes of them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.common import REPO, TEST_CACHE
from tests.support.tiers import compiles

WINE = shutil.which("wine64") or "/usr/lib/wine/wine64"      # Debian 12's wine64 package
BUILD = "b7500"                                               # the build number the zips are named with
RUNTIME_DLLS = ("libstdc++-6.dll", "libgcc_s_seh-1.dll", "libwinpthread-1.dll", "libgomp-1.dll")   # gomp: ggml-cpu's OpenMP

# A module planted in the working directory: loading it at all runs DllMain, which leaves a mark;
# its score would beat the real CPU backend's.
PLANTED_C = r"""
#include <windows.h>
#include <stdio.h>
BOOL WINAPI DllMain(HINSTANCE h, DWORD reason, LPVOID r) {
    if (reason == DLL_PROCESS_ATTACH) { FILE *f = fopen("PLANTED-DLL-WAS-LOADED", "w"); if (f) fclose(f); }
    return TRUE;
}
__declspec(dllexport) int ggml_backend_score(void) { return 1000000; }
__declspec(dllexport) void *ggml_backend_init(void) { return NULL; }
"""
PLANTED_MARK = "PLANTED-DLL-WAS-LOADED"


def build_folder(chroot: Path, src: Path, targets: tuple[str, ...], *defines: str) -> Path:
    """Where a cross-build is kept between runs (TEST_CACHE/mingw-builds/): one folder per source tree,
    targets, defines, cross compiler and build scripts, so a warm run's ninja has nothing to do (it took
    44 s of configure, ccache hits and links in a temporary folder) and nothing stale is reused."""
    gxx = (chroot / "usr/bin/x86_64-w64-mingw32-g++-posix").resolve()
    scripts = [REPO / "scripts" / n for n in ("mingw-build-in-chroot.sh", "mingw-w64-x86_64.cmake")]
    made = str(gxx.stat().st_mtime_ns) if gxx.is_file() else "absent"   # absent: the script says how to fix it
    facts = [str(src.resolve()), str(REPO), *targets, "--", *defines, str(gxx), made]
    digest = hashlib.sha256("\0".join(facts).encode() + b"".join(f.read_bytes() for f in scripts)).hexdigest()
    return TEST_CACHE / "mingw-builds" / f"{src.name}-{digest[:16]}"


@compiles
def cross_build(chroot: Path, src: Path, targets: tuple[str, ...], *defines: str, ccache: Path | None = None) -> Path:
    """bin/ of a mingw-w64 build of `src` (every DLL and .exe of the build lands there), in its kept folder."""
    env = {**os.environ, **({"CCACHE_DIR": str(ccache)} if ccache else {})}
    build = build_folder(chroot, src, targets, *defines)
    proc = subprocess.run([str(REPO / "scripts" / "mingw-build-in-chroot.sh"), "--chroot", str(chroot), str(src),
                           str(build), *targets, "--", *defines], capture_output=True, text=True, env=env,
                          timeout=3600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def mingw_runtime(chroot: Path) -> list[Path]:
    """The GCC and winpthread DLLs a mingw-built program imports, from the chroot's cross toolchain."""
    found = []
    for name in RUNTIME_DLLS:
        hits = sorted(chroot.glob(f"usr/lib/gcc/x86_64-w64-mingw32/*-posix/{name}")) + \
               sorted(chroot.glob(f"usr/x86_64-w64-mingw32/lib/{name}"))
        assert hits, f"{name} not found in the chroot's mingw-w64"
        found.append(hits[-1])
    return found


def mingw_licences(chroot: Path, dlls: list[Path], dest: Path) -> list[Path]:
    """The copyright file of each chroot package those DLLs came from (its dpkg lists), as
    copyright.<package>: the licence texts a vendor zip carries beside its DLLs (upstream's cudart zip
    would carry NVIDIA's)."""
    wanted = {"/" + d.relative_to(chroot).as_posix() for d in dlls}
    packages = set()
    for listing in sorted((chroot / "var/lib/dpkg/info").glob("*.list")):
        if wanted & set(listing.read_text(errors="replace").splitlines()):
            packages.add(listing.stem.partition(":")[0])
    assert packages, "no chroot package owns the mingw runtime DLLs"
    dest.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copyfile(chroot / "usr/share/doc" / pkg / "copyright", dest / f"copyright.{pkg}"))
            for pkg in sorted(packages)]


def planted_dll(chroot: Path, dest: Path) -> Path:
    """ggml-cpu-planted.dll, compiled with the chroot's mingw-w64."""
    work = chroot / "tmp" / f"planted-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    try:
        (work / "planted.c").write_text(PLANTED_C)
        inside = "/" + work.relative_to(chroot).as_posix()
        proc = subprocess.run(["chroot", str(chroot), "x86_64-w64-mingw32-gcc-posix", "-shared", "-O1", "-o",
                               f"{inside}/ggml-cpu-planted.dll", f"{inside}/planted.c"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy(work / "ggml-cpu-planted.dll", dest / "ggml-cpu-planted.dll"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def pack(dest: Path, files: list[Path]) -> Path:
    """A flat zip of these files, as upstream's Windows release zips are."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in files:
            zf.write(f, f.name)
    return dest


@dataclass(frozen=True)
class WindowsInputs:
    cpu_zip: Path           # llama-b7500-bin-win-cpu-x64.zip: executables, ggml base, ggml-cpu.dll (upstream's loader)
    rpc_zip: Path           # llama-b7500-bin-win-rpc-x64.zip: the same plus the ggml-rpc.dll backend
    runtime_zip: Path       # mingw-runtime-win-x64.zip: libstdc++, libgcc_s, winpthread (as upstream's cudart zip)
    patched_zip: Path       # the cpu zip with ggml.dll built from assemble's patched tree (loader patch)
    bins: Path              # the pristine build's bin/
    planted: Path           # ggml-cpu-planted.dll


def wine_env(prefix: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    return {**env, "WINEPREFIX": str(prefix), "WINEDEBUG": "-all", "WINEDLLOVERRIDES": "mscoree,mshtml="}


def wine_output(prefix: Path, exe: Path, *args: str, cwd: Path, until: str, timeout: int = 300) -> str:
    """What the program prints until `until` and the line after it have appeared (or it exits).

    Under Wine 8.0 this mingw build of llama-server does not exit by itself: ExitProcess hangs in
    libllama-server-impl.dll's DLL_PROCESS_DETACH (WINEDEBUG=+module shows the call never
    returning: a static destructor waiting for a thread the exit already ended). So the output is
    read, then the Wine session is stopped."""
    import selectors
    proc = subprocess.Popen([WINE, str(exe), *args], cwd=cwd, env=wine_env(prefix), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    out = b""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if sel.select(timeout=1):
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break                                       # it exited after all
                out += chunk
            text = out.decode(errors="replace")
            if until in text and text.split(until, 1)[1].count("\n") >= 2:
                time.sleep(1)                                   # whatever it prints next
                break
        else:
            raise AssertionError(f"no {until!r} within {timeout} s: {out.decode(errors='replace')[-2000:]}")
    finally:
        _stop(prefix, proc)
    return out.decode(errors="replace")


def _stop(prefix: Path, proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 15)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
    subprocess.run([shutil.which("wineserver") or "/usr/lib/wine/wineserver", "-k"], env=wine_env(prefix),
                   capture_output=True, timeout=60)


@contextmanager
def wine_server(prefix: Path, exe: Path, *args: str, cwd: Path) -> Iterator[tuple[int, subprocess.Popen]]:
    """llama-server.exe under Wine on a free port; (port, process) once /health answers."""
    import urllib.request
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(cwd / "server.log", "w")  # noqa: SIM115 -- the server's output while it runs; closed below
    proc = subprocess.Popen([WINE, str(exe), *args, "--host", "127.0.0.1", "--port", str(port)], cwd=cwd,
                            env=wine_env(prefix), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, (cwd / "server.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, (cwd / "server.log").read_text()[-3000:]
            time.sleep(1)
        yield port, proc
    finally:
        _stop(prefix, proc)
        log.close()
