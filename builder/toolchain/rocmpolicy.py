"""Decide, before CMake runs, whether a HIP unit may build with the ROCm it found.

Refusals (AssembleError, exit 2), each naming what was found and where:
- no ROCm at all (the error lists every place that was searched);
- ROCm older than 6.1: ggml-hip's configure stops with a fatal error below it;
- no HIP compiler: AMD's <rocm>/llvm/bin/clang, or the clang hipconfig names
  (Debian: /usr/lib/llvm-N/bin/clang with ROCM_PATH=/usr);
- no ROCm device library (ockl.bc ...): CMake's HIP compiler check fails without it;
- no hipBLAS/rocBLAS library: ggml-hip's find_package calls need both;
- a gfx target rocBLAS has no kernel data for: the runtime would abort at its first
  GEMM (after /health said ok), so this is a refusal, not a warning;
- more than one target without multi_arch_risk: a sibling arch loads, then segfaults.
hipBLASLt without data for a target only falls back to slower kernels: a note.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from builder.errors import AssembleError
from builder.toolchain.detect import PROBE_TIMEOUT, RocmInstall, run_probe, version_tuple

MIN_ROCM = (6, 1)
_GFX = re.compile(r"gfx[0-9a-f]{3,4}")
_TARGET = re.compile(r"^gfx[0-9a-f]{3,4}(:(xnack|sramecc)[+-])*$")


def searched_places(rocm_path: str | None = None) -> list[str]:
    """Where toolchain.rocm() looks, in its order, as the error names them."""
    if rocm_path:
        return [f"--rocm-path {rocm_path}"]
    places = []
    for var in ("ROCM_PATH", "HIP_PATH"):
        places.append(f"{var}={os.environ[var]}" if os.environ.get(var) else f"{var} (unset)")
    places.append("hipconfig -R" if shutil.which("hipconfig") else "hipconfig (not on PATH)")
    return places + ["/opt/rocm", "/usr"]


def gfx_base(target: str) -> str:
    """"gfx90a:xnack-" -> "gfx90a": the feature suffix names no other data files."""
    return target.split(":", 1)[0]


def hip_compiler(rocm: RocmInstall, timeout: float = PROBE_TIMEOUT) -> str | None:
    """The clang that compiles HIP for this ROCm, or None.

    AMD's packages put it in <root>/llvm/bin. Debian's use a versioned system LLVM
    (/usr/lib/llvm-N/bin) that its hipconfig names (--hipclangpath); with no hipconfig
    answer, a single /usr/lib/llvm-*/bin/clang under the root is taken, never a guess
    among several (one of them may lack the ROCm device libraries).
    """
    root = Path(rocm.root)
    amd = root / "llvm" / "bin" / "clang"
    if _executable(amd):
        return str(amd)
    if rocm.hipconfig:
        said = run_probe([rocm.hipconfig, "--hipclangpath"], timeout)
        line = said.strip().splitlines()[-1].strip() if said and said.strip() else ""
        if line and _executable(Path(line) / "clang"):
            return str(Path(line) / "clang")
    found = [p for p in sorted(root.glob("lib/llvm-*/bin/clang")) if _executable(p)]
    return str(found[0]) if len(found) == 1 else None


def device_libs(rocm: RocmInstall, clang: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """The folder of the ROCm device library bitcode (ockl.bc, ocml.bc) this clang can use.

    <rocm>/amdgcn/bitcode (AMD's layout), else clang's resource dir (Debian's
    rocm-device-libs-N: /usr/lib/llvm-N/lib/clang/N/amdgcn/bitcode; AMD >= 6.2 also keeps
    them there, under lib/)."""
    candidates = [Path(rocm.root) / "amdgcn" / "bitcode"]
    said = run_probe([clang, "-print-resource-dir"], timeout)
    line = said.strip().splitlines()[-1].strip() if said and said.strip() else ""
    resources = [Path(line)] if line else sorted(Path(clang).resolve().parent.parent.glob("lib/clang/*"))
    for res in resources:
        candidates += [res / "amdgcn" / "bitcode", res / "lib" / "amdgcn" / "bitcode"]
    return next((str(c) for c in candidates if (c / "ockl.bc").is_file()), None)


def hip_flags(rocm: RocmInstall, libs: str) -> list[str]:
    """Extra HIP compiler flags for this install. With ROCM_PATH set (the plan sets it), clang
    looks for the device library only under $ROCM_PATH/amdgcn/bitcode: Debian's clang-21 then
    fails ("cannot find ROCm device library") although it has them in its resource dir."""
    if Path(libs) == Path(rocm.root) / "amdgcn" / "bitcode":
        return []
    return [f"--rocm-device-lib-path={libs}"]


def _executable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def kernel_archs(folder: str | Path | None) -> tuple[str, ...]:
    """gfx archs a rocBLAS/hipBLASLt data folder can serve: those with an index file
    (TensileLibrary_lazy_<gfx>.dat / TensileLibrary_<gfx>.dat, flat or in a <gfx>[-xnack]
    subfolder); with an arch-less TensileLibrary.dat, every arch its code objects name."""
    if folder is None or not Path(folder).is_dir():
        return ()
    folder = Path(folder)
    archs: set[str] = set()
    for p in folder.iterdir():
        if p.is_file():
            m = re.fullmatch(r"TensileLibrary(?:_lazy)?_(gfx[0-9a-f]{3,4})\.dat", p.name)
            if m:
                archs.add(m.group(1))
        elif p.is_dir() and _GFX.match(p.name) and any(p.glob("TensileLibrary*.dat")):
            archs.add(_GFX.match(p.name).group(0))
    if (folder / "TensileLibrary.dat").is_file():
        archs |= {t for p in folder.iterdir() if p.suffix in (".co", ".hsaco") for t in _GFX.findall(p.name)}
    return tuple(sorted(archs, key=_arch_order))


def _arch_order(gfx: str) -> tuple[int, str]:
    digits = gfx[3:]
    return (len(digits), digits)   # gfx803 < gfx90a < gfx1010 < gfx1100


def check_hip_unit(rocm: RocmInstall | None, targets: Sequence[str], *, multi_arch_risk: str | None,
                   where: str, rocm_path: str | None = None) -> dict:
    """Refuse (AssembleError, exit 2) a HIP unit that must not build; else the manifest record.

    rocm: toolchain.rocm(rocm_path) (None when nothing was found); rocm_path: the
    --rocm-path given, only to name where the search looked. What the configure must use
    comes back in the record: "path" (ROCM_PATH, HIP_PATH, CMAKE_PREFIX_PATH),
    "hip_compiler" (CMAKE_HIP_COMPILER) and "hip_flags" (CMAKE_HIP_FLAGS).
    """
    targets = tuple(targets)
    if not targets:
        raise AssembleError("no gfx target for the HIP unit", where=where,
                            fix='name the card\'s arch: [hip] targets = ["gfx1100"] or --hip-target gfx1100')
    for t in targets:
        if not _TARGET.match(t):
            raise AssembleError(f"{t!r} is not a gfx target", where=where,
                                fix='use the arch rocminfo shows, e.g. "gfx1100" or "gfx90a:xnack-"')
    if len(targets) > 1 and not multi_arch_risk:
        raise AssembleError(f"{len(targets)} gfx targets in one HIP unit ({', '.join(targets)}): a sibling arch "
                            "links, loads and then segfaults", where=where,
                            fix="build one runtime per card arch, or state the risk in [hip] multi_arch_risk")
    if rocm is None:
        raise AssembleError(f"no ROCm found (looked at: {', '.join(searched_places(rocm_path))})", where=where,
                            fix="install ROCm >= 6.1 (AMD's packages, or Debian's hipcc + librocblas-dev + "
                                "libhipblas-dev) and pass --rocm-path DIR or set ROCM_PATH")
    label = f"ROCm at {rocm.root}"
    if rocm.version is None:
        raise AssembleError(f"{label}: cannot tell its version (no hipconfig, .info/version or "
                            "hip-config-version.cmake answered)", where=where,
                            fix="install the HIP development package (hipcc / hip-devel), or point --rocm-path "
                                "at a complete ROCm")
    label = f"ROCm {rocm.version} at {rocm.root} (version from {rocm.version_source})"
    if version_tuple(rocm.version)[:2] < MIN_ROCM:
        raise AssembleError(f"{label} is older than 6.1; llama.cpp's HIP backend stops at configure below it",
                            where=where, fix="install ROCm >= 6.1 and pass --rocm-path DIR (Debian 12 ships 5.2: "
                                             "use sid's packages, scripts/rocm-sid-chroot.sh)")
    clang = hip_compiler(rocm)
    if clang is None:
        raise AssembleError(f"{label}: no HIP compiler (looked for {Path(rocm.root) / 'llvm/bin/clang'}, "
                            f"the clang `hipconfig --hipclangpath` names, and one {rocm.root}/lib/llvm-*/bin/clang)",
                            where=where, fix="install the HIP compiler (AMD: rocm-llvm; Debian: hipcc, which "
                                             "pulls its clang)")
    libs = device_libs(rocm, clang)
    if libs is None:
        raise AssembleError(f"{label}: no ROCm device library (ockl.bc) for {clang} (looked in "
                            f"{Path(rocm.root) / 'amdgcn/bitcode'} and its resource dir); CMake's HIP compiler "
                            "check fails without it", where=where,
                            fix="install the device libraries (AMD: rocm-device-libs; Debian: rocm-device-libs-N "
                                "matching the clang-N that hipcc uses)")
    for name, lib in (("hipBLAS", rocm.hipblas), ("rocBLAS", rocm.rocblas)):
        if lib is None:
            raise AssembleError(f"{label}: no {name} library (ggml-hip's configure needs it)", where=where,
                                fix=f"install {name} development files (AMD: {name.lower()}-dev; Debian: "
                                    f"lib{name.lower()}-dev)")
    rocblas_archs = kernel_archs(rocm.rocblas_data)
    if not rocblas_archs:
        raise AssembleError(f"{label}: rocBLAS has no kernel data (no TensileLibrary files found"
                            f"{' in ' + rocm.rocblas_data if rocm.rocblas_data else ''})", where=where,
                            fix="install rocBLAS with its data files (librocblas0/librocblas4 on Debian, "
                                "rocblas on AMD's repositories)")
    uncovered = [t for t in targets if gfx_base(t) not in rocblas_archs]
    if uncovered:
        raise AssembleError(f"rocBLAS in {rocm.rocblas_data} has no kernels for {', '.join(uncovered)} "
                            f"(it has: {', '.join(rocblas_archs)}); the runtime would abort at its first "
                            "matrix multiply", where=where,
                            fix=f"use a ROCm whose rocBLAS ships TensileLibrary_lazy_{gfx_base(uncovered[0])}.dat "
                                "(pass --rocm-path DIR), or target an arch from that list")
    lt_archs = kernel_archs(rocm.hipblaslt_data)
    notes = [f"hipBLASLt has no kernels for {gfx_base(t)}: it falls back to slower ones"
             for t in targets if rocm.hipblaslt_data and gfx_base(t) not in lt_archs]
    return {"rocm": rocm.version, "path": rocm.root, "version_source": rocm.version_source,
            "hip_compiler": clang, "device_libs": libs, "hip_flags": hip_flags(rocm, libs),
            "targets": list(targets), "rocblas_data": rocm.rocblas_data,
            "rocblas_archs": list(rocblas_archs), "hipblaslt_archs": list(lt_archs),
            "multi_arch_risk": multi_arch_risk, "notes": notes}
