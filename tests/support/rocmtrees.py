"""Stand-in ROCm trees in both real layouts (AMD's /opt/rocm with llvm/bin/clang, and Debian's /usr
with a versioned LLVM and a versioned rocBLAS data folder), for the real detect.rocm() probe."""

from __future__ import annotations

from pathlib import Path

from builder.toolchain.detect import _multiarch


SID_ROCBLAS = ("gfx803", "gfx900", "gfx906", "gfx908", "gfx90a", "gfx1010", "gfx1030", "gfx1100", "gfx1101",
               "gfx1102")


def _exe(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _clang(path: Path, resource: Path, bitcode: Path | None) -> Path:
    """A clang that answers -print-resource-dir like the real one; bitcode: where ockl.bc goes."""
    if bitcode is not None:
        bitcode.mkdir(parents=True, exist_ok=True)
        (bitcode / "ockl.bc").write_bytes(b"BC")
    return _exe(path, f'#!/bin/sh\n[ "$1" = -print-resource-dir ] && printf \'{resource}\'\nexit 0\n')


def _data(folder: Path, archs, lazy: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "TensileLibrary_fallback.dat").write_text("arch-less")
    for gfx in archs:
        (folder / (f"TensileLibrary_lazy_{gfx}.dat" if lazy else f"TensileLibrary_{gfx}.dat")).write_text("i")
        (folder / f"Kernels.so-000-{gfx}.hsaco").write_text("k")


def amd_rocm(root: Path, version: str = "6.4.1", rocblas=("gfx1030", "gfx1100"), hipblaslt=("gfx1100",),
             clang: bool = True, hipconfig: bool = True, bitcode: str | None = "amdgcn/bitcode") -> Path:
    """AMD's layout: <root>/llvm/bin/clang, lib/, lib/rocblas/library, .info/version;
    device libraries in <root>/amdgcn/bitcode (or where `bitcode` says, relative to root)."""
    lib = root / "lib"
    lib.mkdir(parents=True)
    for name in ("libamdhip64.so", "libhipblas.so", "librocblas.so"):
        (lib / name).write_bytes(b"\x7fELF")
    if hipconfig:
        # AMD's hipconfig prints HIP's major.minor.<build>-<hash>, no newline
        hip = ".".join(version.split(".")[:2]) + ".43484-a1b2c3"
        _exe(root / "bin" / "hipconfig", f"""#!/bin/sh
case "$1" in
  --version) printf '{hip}' ;;
  -R|--rocmpath) printf '{root}' ;;
  --hipclangpath) printf '{root}/llvm/bin' ;;
  *) exit 1 ;;
esac
""")
    (root / ".info").mkdir()
    (root / ".info" / "version").write_text(f"{version}-123\n")
    if clang:
        _clang(root / "llvm" / "bin" / "clang", root / "llvm" / "lib" / "clang" / "19",
               root / bitcode if bitcode else None)
    if rocblas is not None:
        _data(lib / "rocblas" / "library", rocblas)
    if hipblaslt is not None:
        _data(lib / "hipblaslt" / "library", hipblaslt)
    return root


def debian_rocm(root: Path, llvms=("17",), hipclangpath: str | None = "17", rocblas=SID_ROCBLAS) -> Path:
    """Debian's layout under a /usr-like root: lib/<multiarch>/, rocblas/<version>/library,
    clang in lib/llvm-N/bin, hipconfig in bin/ naming it; version from hip-config-version.cmake."""
    lib = root / "lib" / _multiarch()
    lib.mkdir(parents=True)
    for name in ("libamdhip64.so", "libhipblas.so", "librocblas.so"):
        (lib / name).write_bytes(b"\x7fELF")
    (lib / "cmake" / "hip").mkdir(parents=True)
    (lib / "cmake" / "hip" / "hip-config-version.cmake").write_text('set(PACKAGE_VERSION "6.4.43484")\n')
    # Debian's hipconfig: answers --hipclangpath, but (here) not --version, so the cmake file is read
    answer = f"printf '{root}/lib/llvm-{hipclangpath}/bin'" if hipclangpath else "exit 1"
    _exe(root / "bin" / "hipconfig", f'#!/bin/sh\ncase "$1" in --hipclangpath) {answer} ;; *) exit 1 ;; esac\n')
    for n in llvms:   # Debian's rocm-device-libs-N: bitcode in clang-N's resource dir
        res = root / "lib" / f"llvm-{n}" / "lib" / "clang" / n
        _clang(root / "lib" / f"llvm-{n}" / "bin" / "clang", res, res / "amdgcn" / "bitcode")
    _data(lib / "rocblas" / "4.4.1" / "library", rocblas)
    _data(lib / "hipblaslt" / "library", ("gfx1100", "gfx1101", "gfx1200", "gfx1201"))
    return root
