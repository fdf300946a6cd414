"""Plan and run one build unit: a CMake configure + Ninja build at one sha.

`plan_unit` is pure (it only reads toolchain facts) so `assemble show` can print
the exact command lines with no side effects; `run_unit` executes a plan, keeps
the full log in the build folder and draws a progress bar from Ninja's [n/N].
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from builder import locks, ui
from builder.toolchain import detect as toolchain
from builder.errors import AssembleError, BuildFailed
from builder.paths import cache_dir
from builder.config.recipe import Recipe, Unit

# Defaults for a shippable runtime. Why each:
BASE_DEFINES = (
    ("CMAKE_BUILD_TYPE", "Release"),
    ("BUILD_SHARED_LIBS", "ON"),
    ("GGML_BACKEND_DL", "ON"),       # backends as loadable modules: one runtime, many GPUs
    ("GGML_NATIVE", "OFF"),          # never tune for the build host's CPU/GPU
    ("GGML_CCACHE", "OFF"),          # the compiler launcher is chosen explicitly below
    ("LLAMA_BUILD_TESTS", "OFF"),
    ("LLAMA_BUILD_EXAMPLES", "OFF"),
    ("LLAMA_BUILD_TOOLS", "ON"),
    ("LLAMA_BUILD_SERVER", "ON"),
    ("LLAMA_OPENSSL", "ON"),         # HTTPS through the host's OpenSSL, as upstream releases do
    ("LLAMA_BUILD_UI", "OFF"),       # no npm during a build
    ("LLAMA_USE_PREBUILT_UI", "OFF"),  # no network during a build: reproducible, offline-safe
)

# Defines that change what a backend module expects of libggml-base: units merged
# into one runtime must agree on all of these.
ABI_DEFINES = ("CMAKE_BUILD_TYPE", "BUILD_SHARED_LIBS", "GGML_BACKEND_DL", "GGML_SCHED_MAX_COPIES",
               "GGML_MAX_NAME", "GGML_OPENMP", "LLAMA_OPENSSL")


@dataclass(frozen=True)
class Overrides:
    """What the command line changes about a recipe for one build."""
    mirrors: tuple[str, ...] = ()     # extra git mirrors (URL or local repository), tried first
    cuda_archs: tuple[str, ...] = ()
    hip_target: str | None = None
    rocm_path: str | None = None
    cuda_root: str | None = None
    defines: tuple[tuple[str, str], ...] = ()
    jobs: int | None = None
    launcher: str = "auto"            # auto | ccache | sccache | none
    targets: tuple[str, ...] = ()
    container: str | None = None      # --container: units naming none run in this one ("none": all on host)
    engine: str = "auto"              # docker | podman | a path
    accept_blackwell_regression: bool = False
    patches: tuple[str, ...] = ()     # --patch: opt-in patches to apply
    unit_from: tuple[tuple[str, str], ...] = ()  # --unit-from NAME=DIR: units built elsewhere, merged as they are


@dataclass(frozen=True)
class UnitPlan:
    recipe: str
    unit: Unit
    sha: str | None
    source_dir: Path
    build_dir: Path
    defines: tuple[tuple[str, str], ...]
    targets: tuple[str, ...]
    configure: tuple[str, ...]
    build: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    toolchain: dict = field(default_factory=dict)
    key: str = ""
    tree: str = ""                    # the patch set applied to the source ("" = pristine)

    def abi(self) -> dict:
        d = dict(self.defines)
        return {k: d.get(k) for k in ABI_DEFINES}


def _cuda_defines(recipe: Recipe, o: Overrides, tools: dict, strict: bool) -> list[tuple[str, str]]:
    archs = o.cuda_archs or recipe.cuda.architectures
    tk = toolchain.cuda_toolkit(o.cuda_root)
    if tk is None:
        if strict:
            raise AssembleError("no CUDA toolkit found (nvcc)", where=f"{recipe.path}: backends",
                                fix="install the CUDA toolkit, or pass --cuda-root DIR / set CUDAToolkit_ROOT")
        ui.warn("no CUDA toolkit found: the plan shows placeholders for its paths")
        return [("GGML_CUDA", "ON"), ("CMAKE_CUDA_ARCHITECTURES", ";".join(archs)),
                ("CMAKE_CUDA_COMPILER", "<nvcc not found>"), ("CUDAToolkit_ROOT", "<not found>")]
    tools["cuda"] = tk.as_dict()
    return [("GGML_CUDA", "ON"), ("CMAKE_CUDA_ARCHITECTURES", ";".join(archs)),
            ("CMAKE_CUDA_COMPILER", tk.nvcc), ("CUDAToolkit_ROOT", tk.root)]


def _hip_defines(recipe: Recipe, o: Overrides, tools: dict) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """HIP settings from the ROCm tree actually found (AMD's /opt/rocm layout or Debian's /usr)."""
    from builder.toolchain import rocmpolicy

    targets = (o.hip_target,) if o.hip_target else recipe.hip.targets
    rocm = toolchain.rocm(o.rocm_path)
    root = rocm.root if rocm else (o.rocm_path or os.environ.get("ROCM_PATH") or os.environ.get("HIP_PATH") or "/opt/rocm")
    clang = (rocmpolicy.hip_compiler(rocm) if rocm else None) or str(Path(root) / "llvm" / "bin" / "clang")
    libs = rocmpolicy.device_libs(rocm, clang) if rocm else None
    flags = rocmpolicy.hip_flags(rocm, libs) if rocm and libs else []
    tools["rocm"] = {"path": str(root), "version": rocm.version if rocm else None, "hip_clang": clang}
    gpu = ";".join(targets)
    defines = [("GGML_HIP", "ON"), ("GPU_TARGETS", gpu), ("AMDGPU_TARGETS", gpu),
               ("GGML_HIP_RCCL", "ON" if recipe.hip.rccl else "OFF"),
               ("CMAKE_HIP_COMPILER", clang), ("CMAKE_PREFIX_PATH", str(root))]
    if flags:
        defines.append(("CMAKE_HIP_FLAGS", " ".join(flags)))
    return defines, [("ROCM_PATH", str(root)), ("HIP_PATH", str(root))]


def _launcher(choice: str) -> str | None:
    """ccache/sccache in front of every compiler (CUDA and HIP included); auto = whichever is installed."""
    if choice == "none":
        return None
    for name in ("ccache", "sccache") if choice == "auto" else (choice,):
        tool = toolchain.find_tool(name)
        if tool:
            return tool.path
    if choice != "auto":
        raise AssembleError(f"compiler launcher '{choice}' not found on PATH",
                            fix=f"install {choice} or pass --launcher none")
    return None


def plan_unit(recipe: Recipe, unit: Unit, source_dir: Path, sha: str | None, o: Overrides,
              tree_id: str = "", strict: bool = True) -> UnitPlan:
    """Everything needed to configure and build one unit, computed without side effects."""
    cmake_tool, ninja_tool = toolchain.cmake(), toolchain.ninja()
    if cmake_tool is None or ninja_tool is None:
        missing = "cmake" if cmake_tool is None else "ninja"
        raise AssembleError(f"{missing} not found", fix="pip install the project again (it depends on cmake and ninja)")
    tools: dict = {"cmake": cmake_tool.as_dict(), "ninja": ninja_tool.as_dict()}
    for label, tool in (("cc", toolchain.c_compiler()), ("cxx", toolchain.cxx_compiler())):
        if tool is None:
            raise AssembleError(f"no {label} compiler found", fix="install a C/C++ compiler (gcc/g++ or clang)")
        tools[label] = tool.as_dict()

    defines: list[tuple[str, str]] = list(BASE_DEFINES)
    env: list[tuple[str, str]] = []
    backends = set(unit.backends)
    defines.append(("GGML_CUDA", "OFF") if "cuda" not in backends else ("GGML_CUDA", "ON"))
    defines.append(("GGML_HIP", "ON" if "hip" in backends else "OFF"))
    defines.append(("GGML_VULKAN", "ON" if "vulkan" in backends else "OFF"))
    if recipe.cpu.variants == "all":
        defines.append(("GGML_CPU_ALL_VARIANTS", "ON"))
    if "cuda" in backends:
        defines += _cuda_defines(recipe, o, tools, strict)
    if "hip" in backends:
        hip_defines, hip_env = _hip_defines(recipe, o, tools)
        defines += hip_defines
        env += hip_env
    if "vulkan" in backends:
        tools["vulkan"] = toolchain.vulkan_sdk().as_dict()
    defines += list(recipe.defines) + list(unit.defines) + list(o.defines)
    launcher = _launcher(o.launcher)
    if launcher:
        for lang in ("C", "CXX") + (("CUDA",) if "cuda" in backends else ()) + (("HIP",) if "hip" in backends else ()):
            defines.append((f"CMAKE_{lang}_COMPILER_LAUNCHER", launcher))
        tools["launcher"] = launcher
    merged = dict(defines)  # later entries win: recipe < unit < command line
    final = tuple(merged.items())
    targets = o.targets or recipe.targets

    key_material = json.dumps({"recipe": recipe.name, "unit": unit.name, "sha": sha, "tree": tree_id,
                               "source": str(source_dir),  # two checkouts at one sha: two build folders
                               "defines": final, "env": env, "tools": tools}, sort_keys=True)
    key = hashlib.sha256(key_material.encode()).hexdigest()[:12]
    name = f"{recipe.name}-{unit.name}-{(sha or 'local')[:12]}-{key}"
    # Beside a prepared tree (<cache>/trees/<id>/src) the build folder is <id>/build/<name>: the
    # same relative path to the sources for every tree variant, so ccache hits across them.
    trees = cache_dir() / "trees"
    beside = source_dir.name == "src" and source_dir.parent.parent == trees
    build_dir = (source_dir.parent / "build" / name) if beside else (cache_dir() / "build" / name)
    cmake_bin = cmake_tool.path
    configure = (cmake_bin, "-S", str(source_dir), "-B", str(build_dir), "-G", "Ninja",
                 f"-DCMAKE_MAKE_PROGRAM={ninja_tool.path}", *(f"-D{k}={v}" for k, v in final))
    jobs = o.jobs or os.cpu_count() or 2
    # Backend modules need no target of their own: under GGML_BACKEND_DL ggml depends on each.
    build = (cmake_bin, "--build", str(build_dir), "-j", str(jobs), "--target", *targets)
    return UnitPlan(recipe=recipe.name, unit=unit, sha=sha, source_dir=source_dir, build_dir=build_dir, defines=final,
                    targets=tuple(targets), configure=configure, build=build, env=tuple(env), toolchain=tools,
                    key=key, tree=tree_id)


def command_line(argv: tuple[str, ...]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


def _run_logged(argv: tuple[str, ...], log: Path, env: dict, label: str, progress: bool) -> None:
    """Run a command, append everything to log, show [n/N] as a bar; fail with the last lines."""
    tail: deque[str] = deque(maxlen=25)
    bar = ui.Progress(label, None, unit="steps") if progress else None
    with open(log, "a", encoding="utf-8", errors="replace", buffering=1) as out:  # tail -f works
        out.write(f"\n$ {command_line(argv)}\n")
        out.flush()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                                errors="replace", bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            tail.append(line.rstrip("\n"))
            ui.detail(line.rstrip("\n"))
            m = _STEP.match(line)
            if bar and m:
                bar.update(int(m.group(1)), int(m.group(2)), note=line[m.end():].strip()[-40:] if ui._tty() else "")
        rc = proc.wait()
    if bar:
        bar.finish("done" if rc == 0 else "")
    if rc != 0:
        raise BuildFailed(f"{label} failed (exit {rc}); full log: {log}", where=argv[0],
                          fix="read the log above; a missing toolchain shows in `assemble doctor`",
                          details="\n".join(tail))


BUILT_STAMP = "assemble-built.json"    # a finished build: what it was built from, and what it left in bin/


def _tool_stats(tools: dict) -> dict:
    """Size and mtime of every tool binary the plan names: an upgraded compiler is a changed toolchain
    even when its --version line is not."""
    out = {}
    for name, tool in sorted(tools.items()):
        values = tool.values() if isinstance(tool, dict) else [tool]
        for v in values:
            if isinstance(v, str) and v.startswith("/") and os.path.isfile(v):
                st = os.stat(v)
                out[f"{name}:{v}"] = [st.st_size, st.st_mtime_ns]
    return out


def _outputs(build_dir: Path) -> dict:
    """bin/ as the build left it; a file deleted or touched since means the stamp no longer holds."""
    out = {}
    bindir = build_dir / "bin"
    for entry in sorted(bindir.iterdir()) if bindir.is_dir() else ():
        st = entry.lstat()
        out[entry.name] = os.readlink(entry) if entry.is_symlink() else [st.st_size, st.st_mtime_ns]
    return out


def _fingerprint(plan: UnitPlan) -> dict:
    # plan.key already hashes recipe, unit, sha, patches, defines (flags, launcher) and tool versions.
    return {"key": plan.key, "targets": list(plan.targets), "configure": list(plan.configure),
            "tools": _tool_stats(plan.toolchain)}


def _fixed_source(plan: UnitPlan) -> bool:
    """Only a tree the cache holds at a sha is known not to change under us; a --source folder may."""
    return plan.sha is not None and plan.source_dir.resolve().is_relative_to(cache_dir())


def _unchanged(plan: UnitPlan, stamp: Path, fingerprint: dict) -> bool:
    try:
        data = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    return (_fixed_source(plan) and data.get("fingerprint") == fingerprint
            and data.get("outputs") == _outputs(plan.build_dir) and bool(data.get("outputs")))


def _unit_lock(build_dir: Path):
    """One configure/build per build folder at a time: two builds of one recipe share it."""
    return locks.exclusive(build_dir / ".assemble.lock", f"waiting for another assemble run building in {build_dir} ...")


def run_unit(plan: UnitPlan) -> Path:
    """Configure (once per build folder) and build; returns the build folder. A unit whose stamp shows
    nothing changed (same sha, patches, flags, toolchain, and bin/ as left) is not touched at all."""
    plan.build_dir.mkdir(parents=True, exist_ok=True)
    with _unit_lock(plan.build_dir):
        return _run_unit_locked(plan)


def _run_unit_locked(plan: UnitPlan) -> Path:
    log = plan.build_dir / "assemble-build.log"
    built = plan.build_dir / BUILT_STAMP
    fingerprint = _fingerprint(plan)
    if _unchanged(plan, built, fingerprint):
        ui.step(f"build {plan.unit.name}: unchanged since its last build, reusing {plan.build_dir}")
        return plan.build_dir
    built.unlink(missing_ok=True)  # from here until the build ends, nothing vouches for the tree
    env = dict(os.environ, NINJA_STATUS="[%f/%t] ", **dict(plan.env))
    env.setdefault("CCACHE_BASEDIR", str(cache_dir()))  # relative paths: hits across build folders
    stamp = plan.build_dir / "assemble-configured.json"
    start = time.monotonic()
    if not stamp.is_file():
        ui.step(f"configure {plan.unit.name}: {plan.build_dir}")
        _run_logged(plan.configure, log, env, f"configure {plan.unit.name}", progress=False)
        stamp.write_text(json.dumps({"key": plan.key, "configure": plan.configure}, indent=1))
    else:
        ui.step(f"configure {plan.unit.name}: reusing {plan.build_dir}")
    ui.step(f"build {plan.unit.name}: {', '.join(plan.targets)}")
    _run_logged(plan.build, log, env, f"build {plan.unit.name}", progress=True)
    tmp = built.with_name(BUILT_STAMP + ".tmp")
    tmp.write_text(json.dumps({"fingerprint": fingerprint, "outputs": _outputs(plan.build_dir)}, indent=1))
    os.replace(tmp, built)
    ui.info(f"unit {plan.unit.name} ready in {ui.fmt_seconds(time.monotonic() - start)} (log: {log})")
    return plan.build_dir
