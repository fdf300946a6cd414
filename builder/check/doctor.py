"""`assemble doctor`: what this host has, what it means, and whether a recipe can build here.

Two steps, both plain data: `gather` runs every probe (bounded, in parallel) into Facts;
`host_checks` and `recipe_checks` turn Facts into Checks. The checks never run anything,
so tests can feed them hand-made Facts, and the verdict logic is readable in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from builder import interpreter
from builder.check.report import FAIL, INFO as INFO, PASS, SKIP, WARN as WARN, Check  # the CLI reads INFO, WARN here
from builder.config.options import CONTAINER, BuildConfig, CliOptions, UnitConfig, resolve, resolve_places
from builder.config.recipe import Recipe
from builder.config.targets import CudaArch
from builder.errors import AssembleError
from builder.source.fetch import cached_tree
from builder.toolchain import detect as tc
from builder.toolchain import container, provision, rules
from builder.toolchain import gpus as gpu_probes
from builder.toolchain.detect import GlslcProbe, probe_glslc, version_tuple
from builder.toolchain.hints import cublas_hint, install_hint, newer_glslc_hint

OK, MISSING = PASS, FAIL            # what doctor calls them on screen and in JSON: DOCTOR_WORDS
DOCTOR_WORDS = {PASS: "ok", FAIL: "missing", WARN: "warn", INFO: "info", SKIP: "skip"}

@dataclass(frozen=True)
class Facts:
    distro: tc.Distro
    python: tc.Tool
    cmake: tc.Tool | None
    ninja: tc.Tool | None
    patchelf: tc.Tool | None
    git: tc.Tool | None
    cc: tc.Tool | None
    cxx: tc.Tool | None
    cuda: tc.CudaToolkit | None
    driver: gpu_probes.NvidiaDriver | None
    vulkan: tc.VulkanSdk
    glslc: GlslcProbe | None
    rocm: tc.RocmInstall | None
    engines: tuple[tc.ContainerEngine, ...] = ()
    gpus: dict[str, Any] = field(default_factory=dict)          # source -> tuple[Gpu] | None (tool absent)
    pcie: tuple[gpu_probes.PcieLink, ...] | None = None  # None: lspci absent
    provisioned: tuple[tuple[str, str], ...] = ()     # (CUDA version, root) laid out by `assemble toolchain`

    def toolchain(self, launcher_choice: str = "auto") -> tc.Toolchain:
        """The host's toolchain as the rules read it (doctor probes no launcher: auto finds one or none)."""
        return tc.Toolchain("host", self.cmake, self.ninja, self.cc, self.cxx, None, launcher_choice,
                            self.cuda, self.rocm, self.vulkan, self.glslc, self.patchelf, self.git)

    def as_dict(self) -> dict[str, Any]:
        def d(x: Any) -> Any:
            return x.as_dict() if x is not None else None

        return {"distro": self.distro.as_dict(), "python": d(self.python), "cmake": d(self.cmake),
                "ninja": d(self.ninja), "patchelf": d(self.patchelf), "git": d(self.git), "cc": d(self.cc), "cxx": d(self.cxx),
                "cuda": d(self.cuda), "driver": d(self.driver), "vulkan": self.vulkan.as_dict(),
                "glslc": d(self.glslc), "rocm": d(self.rocm),
                "container_engines": {e.name: e.as_dict() for e in self.engines},
                "gpus": {k: ([g.as_dict() for g in v] if v is not None else None) for k, v in self.gpus.items()},
                "pcie": [p.as_dict() for p in self.pcie] if self.pcie is not None else None,
                "provisioned_cuda": [{"version": v, "root": r} for v, r in self.provisioned]}


# --- gathering -----------------------------------------------------------------


def gather(timeout: float = tc.PROBE_TIMEOUT, cuda_root: str | None = None, rocm_path: str | None = None,
           cc: str = "cc", cxx: str = "c++") -> Facts:
    """Every probe at once; each is bounded by `timeout`, the slowest chain by about 3x that."""
    def vulkan() -> tuple[tc.VulkanSdk, GlslcProbe | None]:
        sdk = tc.vulkan_sdk(timeout)
        return sdk, (probe_glslc(sdk.glslc.path, timeout) if sdk.glslc else None)

    r = tc.parallel({
        "cmake": lambda: tc.find_tool("cmake", timeout=timeout),
        "ninja": lambda: tc.find_tool("ninja", timeout=timeout),
        "patchelf": lambda: tc.find_tool("patchelf", timeout=timeout),
        "git": lambda: tc.find_tool("git", timeout=timeout),
        "cc": lambda: tc.compiler(cc, timeout),
        "cxx": lambda: tc.compiler(cxx, timeout),
        "cuda": lambda: tc.cuda_toolkit(cuda_root, timeout),
        "driver": lambda: gpu_probes.nvidia_driver(timeout),
        "vulkan": vulkan,
        "rocm": lambda: tc.rocm(rocm_path, timeout),
        "engines": lambda: tc.container_engines(timeout),
        "nvidia-smi": lambda: gpu_probes.nvidia_gpus(timeout),
        "rocminfo": lambda: gpu_probes.rocm_gpus(timeout),
        "vulkaninfo": lambda: gpu_probes.vulkan_devices(timeout),
        "pcie": lambda: gpu_probes.amd_pcie(timeout),
        "provisioned": provision.cached_toolkits,
    }, workers=16)
    sdk, glslc = r["vulkan"]
    gpus = {k: r[k] for k in ("nvidia-smi", "rocminfo", "vulkaninfo")}
    gpus["sysfs"] = gpu_probes.sysfs_gpus()
    return Facts(tc.distro(), tc.python(), r["cmake"], r["ninja"], r["patchelf"], r["git"], r["cc"], r["cxx"], r["cuda"],
                 r["driver"], sdk, glslc, r["rocm"], r["engines"], gpus, r["pcie"], r["provisioned"])


# --- host checks -------------------------------------------------------------------

def _tool_check(name: str, tool: tc.Tool | None, hint: str, meaning: str = "") -> Check:
    if tool is None:
        return _row(name, MISSING, "not found", meaning or "every build needs it", hint)
    return _row(name, OK, f"{tool.version} ({tool.path})", meaning)


def _archs_text(archs: tuple[CudaArch, ...]) -> str:
    return f"sm_{archs[0]} .. sm_{archs[-1]} ({len(archs)})" if archs else "none listed"


def _cuda_checks(f: Facts) -> list[Check]:
    tk, out = f.cuda, []
    if tk is None:
        out.append(_row("CUDA toolkit", INFO, "no nvcc (PATH, CUDAToolkit_ROOT, CUDA_PATH, /usr/local/cuda)",
                         "the CUDA backend cannot build here", install_hint("cuda", f.distro)))
    else:
        out.append(_row("CUDA toolkit", OK, f"nvcc {tk.version} at {tk.root}", f"nvcc: {tk.nvcc}"))
        regression = rules.regression_applies(tk.version, tk.archs)
        meaning = ("can target Blackwell (sm_120/121)" if rules.blackwell(tk.archs)
                   else "cannot target Blackwell (sm_120 needs CUDA >= 12.8)")
        if regression:
            meaning += (f"; CUDA {tk.version} Blackwell builds lose 50-80% generation past 8k context "
                        f"(the build policy refuses them unless CUDA 12.8, the {rules.BLACKWELL_PATCH} patch, "
                        "Vulkan, or an explicit acceptance)")
        out.append(_row("CUDA archs", WARN if regression else OK, _archs_text(tk.archs), meaning))
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
    lacking = rules.header_lacks(v)
    if lacking:
        return MISSING, (f"too old for this llama.cpp: lacks {', '.join(lacking)} "
                         "(ggml-vulkan.cpp fails: 'LayerSettingEXT' is not a member of 'vk')"), lacking
    if not v.has_hpp:
        return MISSING, "vulkan.hpp missing beside vulkan_core.h (ggml-vulkan is C++)", []
    return OK, f"has every extension ggml-vulkan uses unguarded{rules.tested_note(v)}", []


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
        found = rules.glslc_summary(ext)
        lacking = [e for e, ok in ext.items() if ok is False]
        unknown = [e for e, ok in ext.items() if ok is None]
        if lacking:
            out.append(_row("glslc extensions", WARN, found,
                             "builds, but shaders are slower without: " + ", ".join(rules.GLSLC_MEANING.get(e, e) for e in lacking),
                             newer_glslc_hint(f.vulkan.glslc, f.distro)))
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
    old = r.version is not None and version_tuple(r.version)[:2] < rules.MIN_ROCM
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


def _python_check(py: tc.Tool) -> Check:
    """This interpreter against pyproject.toml's requires-python (builder.interpreter, the one home)."""
    need = ".".join(map(str, interpreter.floor()))
    found = f"{py.version} ({py.path}); assemble needs Python {interpreter.requires_python()}"
    if version_tuple(py.version) < interpreter.floor():
        return _row("python", MISSING, found, f"older than {need}: assemble needs tomllib and newer syntax",
                    f"use Python >= {need} (e.g. Debian 12's python3 3.11; Ubuntu 22.04's 3.10 is too old: "
                    "a pyenv, uv or deadsnakes python3.11)")
    meaning = ("tarfile has no extraction filter before 3.11.4: assemble unpacks archives with its own equal one"
               if version_tuple(py.version) < (3, 11, 4) else "")
    return _row("python", OK, found, meaning)


def host_checks(f: Facts) -> list[Check]:
    py = f.python
    out = [_row("system", INFO, f.distro.pretty or f.distro.id or "unknown (no /etc/os-release)",
                 "install hints below use its package names"),
           _python_check(py)]
    cmake_meaning = ""
    if f.cmake and version_tuple(f.cmake.version) < rules.CMAKE_MIN_HIP:
        cmake_meaning = "older than 3.21: the HIP backend cannot configure"
    out.append(_tool_check("cmake", f.cmake, install_hint("cmake", f.distro), cmake_meaning))
    if cmake_meaning:
        out[-1] = _row("cmake", WARN, out[-1].reason, cmake_meaning, install_hint("cmake", f.distro))
    out.append(_tool_check("ninja", f.ninja, install_hint("ninja", f.distro)))
    pe = _tool_check("patchelf", f.patchelf, install_hint("patchelf", f.distro), "bundling sets RPATHs with it")
    if f.patchelf and f.patchelf.version != "unknown" and version_tuple(f.patchelf.version) < rules.MIN_PATCHELF:
        pe = _row("patchelf", WARN, pe.reason, "older than 0.19: 0.17/0.18 have corruption and alignment bugs",
                   install_hint("patchelf", f.distro))
    out.append(pe)
    out.append(_tool_check("git", f.git, install_hint("git", f.distro), "fetches, verifies and patches llama.cpp"))
    out.append(_tool_check("C compiler", f.cc, install_hint("compilers", f.distro)))
    out.append(_tool_check("C++ compiler", f.cxx, install_hint("compilers", f.distro)))
    out += _cuda_checks(f) + _vulkan_checks(f) + _rocm_checks(f) + _engine_checks(f) + _gpu_checks(f) + _pcie_checks(f)
    return out


# --- recipe checks -----------------------------------------------------------------

def _r(name: str, status: str, found: str, meaning: str = "", hint: str = "") -> Check:
    return _row(name, status, found, meaning, hint, section="recipe")


def blackwell_patch(config: BuildConfig, cuda: tc.CudaToolkit | None) -> str | None:
    """Why the build will not apply the Blackwell flash-attention patch, or None when it will: the
    patches' own selection, on the cached tree when there is one (else every condition but the
    tree's features)."""
    from builder.source import patches
    ctx = patches.context_for(config, cuda.version if cuda else None)
    tree = cached_tree(config.recipe.pin.sha)
    try:
        chosen, skipped = patches.select(patches.load_patches(), tree.path if tree else None, config.recipe.pin.sha,
                                         config.recipe, ctx)
    except AssembleError as exc:  # a broken patches/ folder or recipe [patches] table is reported, not fatal
        return exc.what
    return rules.blackwell_patch_state([p.name for p in chosen], skipped)


def _container_checks(unit: UnitConfig, f: Facts) -> list[Check]:
    name = f"unit {unit.name} ({unit.where.image})"
    try:
        container.containerfile(unit.where.image_name())
    except AssembleError as exc:
        return [_r(name, MISSING, "no Containerfile", exc.what, f"{exc.fix}; or build the unit on the host "
                   "(--container none)")]
    usable = [e for e in f.engines if e.usable]
    if usable:
        return [_r(name, OK, f"{usable[0].name} {usable[0].version}",
                   f"builds {', '.join(unit.backends)} inside the image; its toolchain is checked when the image is "
                   "built")]
    if f.engines:
        e = f.engines[0]
        return [_r(name, MISSING, f"{e.name} {e.version}, not answering",
                   "the unit builds in a container and no engine is usable", "start the docker daemon, or use podman")]
    return [_r(name, MISSING, "no podman or docker", "the unit builds in a container",
               install_hint("container", f.distro) + "; or build it on the host (--container none)")]


_STATUS = {rules.OK: OK, rules.SLOWER: WARN, rules.REFUSE: MISSING}


def recipe_checks(config: BuildConfig, f: Facts) -> list[Check]:
    """The build's own rules (builder.toolchain.rules) over this host's toolchain, unit by unit: a
    row per topic, in the words `assemble build` would refuse or warn with."""
    out: list[Check] = []
    host = f.toolchain(config.launcher.value)
    patch = blackwell_patch(config, host.cuda)
    seen: set[tuple[str, str]] = set()
    for unit in config.units:
        rows = _container_checks(unit, f) if unit.where.kind == CONTAINER else [
            _r(x.topic, _STATUS[x.level], x.found, x.means, x.fix)
            for x in rules.evaluate(rules.context(config, unit, host, patch, f.distro, f.provisioned))]
        for row in rows:
            if (row.name, row.reason) not in seen:        # two host units share their build tools
                seen.add((row.name, row.reason))
                out.append(row)
    atomics_off = [p for p in (f.pcie or ()) if p.atomics_requester is False]
    if config.recipe.hip and config.recipe.hip.rccl and atomics_off:
        out.append(_r("RCCL", WARN, f"PCIe atomics off on {', '.join(p.slot for p in atomics_off)}",
                      "no cross-card collectives: run with layer split (-sm layer)"))
    return out


@dataclass(frozen=True)
class Verdict:
    state: str                   # ready | slower | missing
    line: str

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state, "line": self.line}


def _elsewhere_hint(config: BuildConfig, missing: list[Check]) -> str:
    """A split recipe (BuildConfig.split) whose only gaps are a later unit's toolkit can take that
    unit from another machine."""
    if not config.split():
        return ""
    backend_of = {t.name: t.backend for t in rules.TOPICS}
    for unit in config.units[1:]:
        if all(backend_of.get(c.name) in unit.backends for c in missing):
            return (f"; or build its {unit.name} unit on a machine that has them (--only-unit {unit.name}) "
                    f"and merge it here with --unit-from {unit.name}=DIR")
    return ""


def verdict(config: BuildConfig, checks: list[Check]) -> Verdict:
    recipe = config.recipe
    mine = [c for c in checks if c.section == "recipe"]
    missing = [c for c in mine if c.status == MISSING]
    if missing:
        return Verdict("missing", f"{recipe.name}: not buildable here: missing " +
                       "; ".join(f"{c.name} ({c.reason})" for c in missing) + _elsewhere_hint(config, missing))
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
    config: BuildConfig | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "verdict": self.verdict.as_dict() if self.verdict else None,
                "config": self.config.as_dict() if self.config else None,
                "checks": [row_json(c) for c in self.checks], "facts": self.facts.as_dict()}

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict and self.verdict.state == "missing" else 0


def diagnose(recipe: Recipe | None = None, facts: Facts | None = None, cli: CliOptions = CliOptions(),
             timeout: float = tc.PROBE_TIMEOUT) -> Diagnosis:
    """This host's checks, and with a recipe its verdict. The toolkit places come from the same
    resolution `build` uses (command line, then CUDAToolkit_ROOT/ROCM_PATH... in the environment)."""
    config = resolve(recipe, cli) if recipe is not None else None
    places = config.places if config is not None else resolve_places(cli)
    f = facts or gather(timeout=timeout, cuda_root=places.cuda_root.value, rocm_path=places.rocm_path.value,
                        cc=places.cc.value, cxx=places.cxx.value)
    checks = host_checks(f)
    if config is None:
        return Diagnosis(f, tuple(checks))
    checks += recipe_checks(config, f)
    return Diagnosis(f, tuple(checks), config.recipe.name, verdict(config, checks), config)


def _row(name: str, status: str, found: str, meaning: str = "", hint: str = "", section: str = "host") -> Check:
    return Check(name, status, found, hint=hint, meaning=meaning, section=section)


def row_json(c: Check) -> dict[str, Any]:
    return {"name": c.name, "status": DOCTOR_WORDS[c.status], "found": c.reason, "meaning": c.meaning,
            "hint": c.hint, "section": c.section}
