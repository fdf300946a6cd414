"""The GPUs and GPU drivers of this host, each probe bounded in time: the one place nvidia-smi,
rocminfo, vulkaninfo, lspci, sysfs, /dev/kfd and /proc/driver/nvidia are read.

doctor lists what every source sees (nvidia_gpus, rocm_gpus, vulkan_devices, sysfs_gpus, amd_pcie,
nvidia_driver); verify compares nvidia_host / amd_host with what the runtime's modules report: a
host with a card whose module reports no device is a failure (the field failure: a driver older
than the CUDA runtime carried), never "not run". The toolchains are builder.toolchain.detect's.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.proc import PROBE_TIMEOUT, probe, run_probe
from builder.toolchain.detect import _first_version

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


def _smi_query(fields: str, timeout: float, smi: str = "nvidia-smi") -> list[list[str]] | None:
    """`nvidia-smi --query-gpu=FIELDS` as one row of stripped fields per GPU; None when it is absent or fails."""
    out = probe([smi, f"--query-gpu={fields}", "--format=csv,noheader"], timeout)
    return [[p.strip() for p in line.split(",")] for line in out.stdout.splitlines()] if out.ok else None


def nvidia_host(smi: str | None = None) -> NvidiaHost | None:
    """The NVIDIA GPUs and driver here, or None when nothing shows an NVIDIA card."""
    smi = smi or shutil.which("nvidia-smi")
    gpus: list[NvidiaGpu] = []
    driver = None
    if smi:
        for parts in _smi_query("name,driver_version,compute_cap", SMI_TIMEOUT, smi) or []:
            if len(parts) != 3 or not re.fullmatch(r"\d+(\.\d+)+", parts[1]):
                continue
            driver = parts[1]
            cap = re.fullmatch(r"(\d+)\.(\d)", parts[2])
            gpus.append(NvidiaGpu(parts[0], int(cap.group(1)) * 10 + int(cap.group(2)) if cap else None))
        if gpus:
            return NvidiaHost(driver, tuple(gpus), "nvidia-smi")
    devices = sorted(glob.glob("/dev/nvidia[0-9]*"))
    kernel = kernel_module_version()
    if devices or kernel:
        return NvidiaHost(kernel, (), devices[0] if devices else str(_PROC_VERSION))
    return None


def kernel_module_version() -> str | None:
    """The NVIDIA kernel module's version: it is loaded even where nvidia-smi is not installed."""
    try:
        text = _PROC_VERSION.read_text(errors="replace")
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


# --- doctor's view: the NVIDIA driver, and every source that lists GPUs -----------------

@dataclass(frozen=True)
class NvidiaDriver:
    version: str | None          # "580.82.07"
    cuda: str | None             # newest CUDA runtime the driver accepts, "13.0"

    def as_dict(self) -> dict[str, Any]:
        return {"version": self.version, "cuda": self.cuda}


def nvidia_driver(timeout: float = PROBE_TIMEOUT) -> NvidiaDriver | None:
    text = run_probe(["nvidia-smi"], timeout)
    if text:
        return NvidiaDriver(_first_version(text, r"Driver Version:\s*([\d.]+)"),
                            _first_version(text, r"CUDA Version:\s*([\d.]+)"))
    kernel = kernel_module_version()
    return NvidiaDriver(kernel, None) if kernel or _PROC_VERSION.is_file() else None


# --- GPUs and PCIe ---------------------------------------------------------

@dataclass(frozen=True)
class Gpu:
    vendor: str                  # nvidia | amd | intel | cpu | other
    name: str
    source: str                  # nvidia-smi | rocminfo | vulkaninfo | sysfs
    arch: str | None = None      # "9.0" (compute capability) or "gfx1100"
    pci: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"vendor": self.vendor, "name": self.name, "source": self.source, "arch": self.arch, "pci": self.pci}


_VENDORS = {"10de": "nvidia", "1002": "amd", "8086": "intel"}


def nvidia_gpus(timeout: float = PROBE_TIMEOUT) -> tuple[Gpu, ...] | None:
    """None when nvidia-smi is absent or fails (no driver)."""
    rows = _smi_query("name,compute_cap,pci.bus_id", timeout)
    if rows is None:
        return None
    out = []
    for parts in rows:
        if len(parts) >= 3 and parts[0]:
            out.append(Gpu("nvidia", parts[0], "nvidia-smi", parts[1], parts[2]))
    return tuple(out)


def rocm_gpus(timeout: float = PROBE_TIMEOUT) -> tuple[Gpu, ...] | None:
    text = run_probe(["rocminfo"], timeout)
    if text is None:
        return None
    out = []
    for block in re.split(r"\n\*{5,}\s*\n", text):
        if not re.search(r"Device Type:\s*GPU", block):
            continue
        arch = _first_version(block, r"^\s*Name:\s*(gfx[0-9a-f]+)")
        name = _first_version(block, r"Marketing Name:\s*(.+)") or arch or "AMD GPU"
        out.append(Gpu("amd", name.strip(), "rocminfo", arch))
    return tuple(out)


def vulkan_devices(timeout: float = PROBE_TIMEOUT) -> tuple[Gpu, ...] | None:
    text = run_probe(["vulkaninfo", "--summary"], timeout)
    if text is None:
        return None
    out = []
    for block in re.split(r"\n(?=GPU\d+:)", text):
        name = _first_version(block, r"deviceName\s*=\s*(.+)")
        if not name:
            continue
        kind = _first_version(block, r"deviceType\s*=\s*(\S+)") or ""
        vendor_id = (_first_version(block, r"vendorID\s*=\s*0x([0-9a-fA-F]+)") or "").lower().rjust(4, "0")
        vendor = "cpu" if "CPU" in kind else _VENDORS.get(vendor_id, "other")
        out.append(Gpu(vendor, name.strip(), "vulkaninfo", kind.replace("PHYSICAL_DEVICE_TYPE_", "").lower() or None))
    return tuple(out)


def sysfs_gpus(root: str = "/sys/bus/pci/devices") -> tuple[Gpu, ...]:
    """Display-class PCI functions (VGA 0x0300, 3D 0x0302, other 0x0380): works with no driver at all."""
    out = []
    for dev in sorted(Path(root).glob("*")):
        try:
            cls = (dev / "class").read_text().strip().lower()
            vendor = (dev / "vendor").read_text().strip().lower().removeprefix("0x")
            device = (dev / "device").read_text().strip().lower().removeprefix("0x")
        except OSError:
            continue
        if cls[:6] not in ("0x0300", "0x0302", "0x0380"):
            continue
        out.append(Gpu(_VENDORS.get(vendor, "other"), f"PCI {vendor}:{device}", "sysfs", None, dev.name))
    return tuple(out)


@dataclass(frozen=True)
class PcieLink:
    """One AMD display device as `lspci -vvv` sees it."""
    slot: str
    name: str
    atomics_cap: str | None = None     # DevCap2 AtomicOpsCap, e.g. "32bit+ 64bit+ 128bitCAS-"
    atomics_requester: bool | None = None  # DevCtl2 AtomicOpsCtl ReqEn+; None: not visible
    link_cap: str | None = None        # "16GT/s x16"
    link_status: str | None = None     # "8GT/s x4"
    downgraded: bool = False
    access_denied: bool = False        # lspci without root hides capabilities

    def as_dict(self) -> dict[str, Any]:
        return {"slot": self.slot, "name": self.name, "atomics_cap": self.atomics_cap,
                "atomics_requester": self.atomics_requester, "link_cap": self.link_cap,
                "link_status": self.link_status, "downgraded": self.downgraded,
                "access_denied": self.access_denied}


def _speed_width(line: str | None) -> str | None:
    if not line:
        return None
    speed = _first_version(line, r"Speed ([\d.]+GT/s)")
    width = _first_version(line, r"Width (x\d+)")
    return " ".join(x for x in (speed, width) if x) or None


def parse_lspci(text: str) -> tuple[PcieLink, ...]:
    """AMD display devices in `lspci -vvv -nn` output, with their AtomicOps and link state."""
    out = []
    for block in re.split(r"\n(?=[0-9a-f]{2,4}:[0-9a-f]{2}[:.])", text.strip()):
        head = block.splitlines()[0] if block.strip() else ""
        m = re.match(r"^(\S+)\s+.*?\[(03[0-9a-f]{2})\]:\s*(.*?)\s*\[([0-9a-f]{4}):([0-9a-f]{4})\]", head)
        if not m or m.group(4) != "1002":
            continue
        cap = re.search(r"AtomicOpsCap:\s*([^\n]*?)\s*$", block, re.M)
        ctl = re.search(r"AtomicOpsCtl:\s*ReqEn([+-])", block)
        lnkcap = re.search(r"LnkCap:\s*([^\n]*)", block)
        lnksta = re.search(r"LnkSta:\s*([^\n]*)", block)
        out.append(PcieLink(m.group(1), m.group(3), cap.group(1) if cap else None,
                            (ctl.group(1) == "+") if ctl else None,
                            _speed_width(lnkcap.group(1) if lnkcap else None),
                            _speed_width(lnksta.group(1) if lnksta else None),
                            bool(lnksta and "downgraded" in lnksta.group(1)),
                            "<access denied>" in block))
    return tuple(out)


def amd_pcie(timeout: float = PROBE_TIMEOUT) -> tuple[PcieLink, ...] | None:
    """None when lspci is missing or fails."""
    text = run_probe(["lspci", "-vvv", "-nn", "-d", "1002:"], timeout)
    return None if text is None else parse_lspci(text)


# --- memory per card: what a split's placement check reads beside the server's own log ------------

@dataclass(frozen=True)
class CardMemory:
    """One card's memory as its driver reports it (the whole card: every process on it counts)."""
    pci: str                     # "0000:00:06.0", as ggml's log names a device's card
    total_mib: int
    used_mib: int
    source: str                  # nvidia-smi | sysfs (amdgpu mem_info_vram_*)


def pci_id(text: str) -> str:
    """A PCI address in one spelling (4-digit domain, lower case): nvidia-smi writes "00000000:06:00.0",
    ggml and sysfs "0000:06:00.0"."""
    text = text.strip().lower()
    domain, _, rest = text.rpartition(":")[0].partition(":")
    if not rest:
        return text
    return f"{int(domain, 16):04x}:{rest}:{text.rpartition(':')[2]}"


def parse_smi_memory(rows: list[list[str]]) -> tuple[CardMemory, ...]:
    """`nvidia-smi --query-gpu=pci.bus_id,memory.total,memory.used --format=csv,noheader` rows
    ("00000000:06:00.0", "143771 MiB", "1133 MiB"), or the same with nounits."""
    out = []
    for parts in rows:
        if len(parts) != 3:
            continue
        total, used = (re.match(r"(\d+)", p) for p in parts[1:])
        if total and used:
            out.append(CardMemory(pci_id(parts[0]), int(total.group(1)), int(used.group(1)), "nvidia-smi"))
    return tuple(out)


def amd_card_memory(root: str = "/sys/bus/pci/devices") -> tuple[CardMemory, ...]:
    """amdgpu's VRAM counters in sysfs (what rocm-smi reads): bytes, per PCI device."""
    out = []
    for dev in sorted(Path(root).glob("*")):
        try:
            total = int((dev / "mem_info_vram_total").read_text())
            used = int((dev / "mem_info_vram_used").read_text())
        except (OSError, ValueError):
            continue
        out.append(CardMemory(pci_id(dev.name), total >> 20, used >> 20, "sysfs"))
    return tuple(out)


def card_memory(smi: str | None = None, sysfs: str = "/sys/bus/pci/devices",
                timeout: float = SMI_TIMEOUT) -> tuple[CardMemory, ...]:
    """Every card whose driver reports its memory here (NVIDIA through nvidia-smi, AMD through sysfs);
    empty when none does (lavapipe, a container without the tools)."""
    smi = smi or shutil.which("nvidia-smi")
    rows = _smi_query("pci.bus_id,memory.total,memory.used", timeout, smi) if smi else None
    return parse_smi_memory(rows or []) + amd_card_memory(sysfs)
