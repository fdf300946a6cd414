"""Which GPUs this host has, seen without the runtime: NVIDIA's driver (nvidia-smi, /dev/nvidia*,
/proc/driver/nvidia/version) and AMD's compute driver (/dev/kfd). verify compares this with what
the runtime's modules report: a host with a card whose module reports no device is a failure
(the field failure: a driver older than the CUDA runtime carried), never "not run".
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from builder.proc import probe

SMI_TIMEOUT = 15


@dataclass(frozen=True)
class NvidiaGpu:
    name: str
    capability: int | None            # compute capability x10 (89 = 8.9); None when the driver does not say


@dataclass(frozen=True)
class NvidiaHost:
    driver: str | None                # "570.86.15"
    gpus: tuple[NvidiaGpu, ...]
    evidence: str                     # how we know: "nvidia-smi", "/dev/nvidia0", ...

    def describe(self) -> str:
        cards = f"{len(self.gpus)} NVIDIA GPU(s) ({', '.join(sorted({g.name for g in self.gpus}))})" if self.gpus \
            else "an NVIDIA GPU"
        return f"{cards}, driver {self.driver or 'version unknown'} (from {self.evidence})"


@dataclass(frozen=True)
class AmdHost:
    kernel_driver: str                # amdgpu module version, else the kernel release
    evidence: str


_PROC_VERSION = Path("/proc/driver/nvidia/version")
_KFD = Path("/dev/kfd")


def nvidia_host(smi: str | None = None) -> NvidiaHost | None:
    """The NVIDIA GPUs and driver here, or None when nothing shows an NVIDIA card."""
    smi = smi or shutil.which("nvidia-smi")
    gpus: list[NvidiaGpu] = []
    driver = None
    if smi:
        out = probe([smi, "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"], SMI_TIMEOUT)
        for line in (out.stdout if out.ok else "").splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 3 or not re.fullmatch(r"\d+(\.\d+)+", parts[1]):
                continue
            driver = parts[1]
            cap = re.fullmatch(r"(\d+)\.(\d)", parts[2])
            gpus.append(NvidiaGpu(parts[0], int(cap.group(1)) * 10 + int(cap.group(2)) if cap else None))
        if gpus:
            return NvidiaHost(driver, tuple(gpus), "nvidia-smi")
    devices = sorted(glob.glob("/dev/nvidia[0-9]*"))
    kernel = _proc_driver_version()
    if devices or kernel:
        return NvidiaHost(kernel, (), devices[0] if devices else str(_PROC_VERSION))
    return None


def _proc_driver_version() -> str | None:
    try:
        text = _PROC_VERSION.read_text()
    except OSError:
        return None
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    return m.group(1) if m else None


def amd_host() -> AmdHost | None:
    """AMD's compute driver is loaded here (/dev/kfd exists), or None."""
    if not _KFD.exists():
        return None
    try:
        version = Path("/sys/module/amdgpu/version").read_text().strip()   # set by AMD's amdgpu-dkms
        source = "amdgpu-dkms module version"
    except OSError:
        version, source = f"in-tree amdgpu of Linux {os.uname().release}", "the running kernel"
    return AmdHost(version, f"/dev/kfd; driver from {source}")
