"""What a runtime's GPU code needs of a host: the CUDA runtime it carries and the driver that
runtime needs, the GPU code objects in its CUDA module, the ROCm release it carries and the
kernel driver AMD pairs with it. Written into the manifest at build time; verify reads it back
and compares it with the host (builder.toolchain.gpus).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from builder.config.drivers import cuda_driver_floor, rocm_driver_expectation
from builder.runtime.cudacode import CudaCode, read_cuda_code
from builder.runtime.cudart import runtime_version


@dataclass(frozen=True)
class CudaModuleCode:
    path: str                         # runtime-relative, e.g. bin/libggml-cuda.so
    sass: tuple[str, ...]             # "sm_86", "sm_120a"
    ptx: tuple[str, ...]              # "compute_75"

    def code(self) -> CudaCode:
        return CudaCode(sass=self.sass, ptx=self.ptx)


@dataclass(frozen=True)
class CudaRuntimeRecord:
    version: str                      # "12.8": the CUDA runtime (libcudart) carried ("" when none is)
    driver_min: str                   # the oldest driver that runs it (minor-version compatibility; "" unknown)
    driver_for_ptx: str               # the toolkit's own driver: needed to JIT its PTX ("" when unknown)
    source: str                       # where the floors come from
    modules: tuple[CudaModuleCode, ...] = ()


@dataclass(frozen=True)
class RocmRecord:
    version: str                      # "6.4"
    kernel_driver: str                # what AMD pairs that user space with
    source: str


@dataclass(frozen=True)
class GpuRuntimes:
    cuda: CudaRuntimeRecord | None = None
    rocm: RocmRecord | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)   # what could not be told, said once here


_CUDART = re.compile(r"libcudart\.so\.(\d+)\.(\d+)(?:\.\d+)*")
_HIP = re.compile(r"libamdhip64\.so\.(\d+)\.(\d+)(?:\.\d+)*")


def _major_minor(text: str | None) -> str | None:
    m = re.search(r"(\d+)\.(\d+)", text or "")
    return f"{m.group(1)}.{m.group(2)}" if m else None


def _carried(names: Iterable[str], pattern: re.Pattern[str]) -> str | None:
    for name in names:
        if m := pattern.fullmatch(name):
            return f"{m.group(1)}.{m.group(2)}"
    return None


def _cudart_in_code(runtime: Path, paths: Iterable[str]) -> str | None:
    """The version the carried libcudart's own code states (NVIDIA's wheels name it libcudart.so.12)."""
    for rel in paths:
        path = runtime / rel
        if Path(rel).name.startswith("libcudart.so") and path.is_file() and not path.is_symlink():
            if version := runtime_version(path):
                return version
    return None


def describe(runtime: Path, file_paths: Iterable[str], toolkits: dict[str, str]) -> GpuRuntimes:
    """file_paths: the runtime's files (relative); toolkits: {"cuda": version, "rocm": version} the units
    were built with (used when neither a carried library's code nor its file name says its version)."""
    paths = list(file_paths)
    names = [Path(p).name for p in paths]
    notes: list[str] = []
    cuda = rocm = None
    modules = []
    for rel in paths:
        if Path(rel).name.startswith("libggml-cuda") and rel.startswith("bin/"):
            code = read_cuda_code(runtime / rel)
            if code is not None:
                modules.append(CudaModuleCode(rel, code.sass, code.ptx))
    cudart = _cudart_in_code(runtime, paths) or _carried(names, _CUDART) or (
        _major_minor(toolkits.get("cuda")) if any(n.startswith("libcudart.so") for n in names) else None)
    if cudart or modules:
        floor = cuda_driver_floor(cudart) if cudart else None
        if floor is None:
            notes.append(f"CUDA runtime {cudart or 'not carried'}: no driver floor known to this assemble")
        cuda = CudaRuntimeRecord(cudart or "", floor.minimum if floor else "", floor.toolkit_driver if floor else "",
                                 floor.source if floor else "", tuple(modules))
    hip = _carried(names, _HIP) or (_major_minor(toolkits.get("rocm")) if any(
        n.startswith("libamdhip64.so") for n in names) else None)
    if hip:
        expectation = rocm_driver_expectation(hip)
        if expectation is None:
            notes.append(f"ROCm {hip}: no kernel-driver pairing known to this assemble")
        else:
            rocm = RocmRecord(hip, expectation.kernel_driver, expectation.source)
    return GpuRuntimes(cuda=cuda, rocm=rocm, notes=tuple(notes))
