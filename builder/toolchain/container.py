"""Build units inside a container (docker or podman), and runtime images.

A container unit runs the same CMake configure + build the host would run, in an
image made from containers/<name>.Containerfile (e.g. cuda12.8-build: CUDA 12.8,
which Blackwell needs). The source, cache and build folders are mounted at the
*same* paths they have on the host, so the build tree that comes out (CMakeCache,
RPATHs, logs) names real host paths and the host's collect/merge/bundle steps read
it exactly as they read a host build. Only the host's tool paths (nvcc, ninja, the
compiler launcher) are swapped for the image's own.

Everything up to the engine call is pure planning (argv + in-container script), so
`assemble show` and the tests can read it without an engine.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from builder import ui
from builder.errors import AssembleError, BuildFailed
from builder.paths import PACKAGE_DIR, PROJECT_DIR, cache_dir, data_dir
from builder.toolchain.detect import CudaToolkit

ENGINES = ("podman", "docker")         # auto picks the first found: podman needs no daemon
ENGINE_ENV = "ASSEMBLE_CONTAINER_ENGINE"
SUFFIX = ".Containerfile"
IMAGE_PREFIX = "assemble-"
# Where the build images keep their tools (containers/cuda12.8-build.Containerfile).
IMAGE_CUDA_ROOT = "/usr/local/cuda"
IMAGE_LAUNCHER = "ccache"
# Host tool paths that mean nothing inside the image; replaced by the image's own.
_HOST_TOOL_DEFINES = re.compile(r"^(CMAKE_MAKE_PROGRAM|CMAKE_(C|CXX|CUDA|HIP)_COMPILER|CUDAToolkit_ROOT|"
                                r"CMAKE_(C|CXX|CUDA|HIP)_COMPILER_LAUNCHER)$")


@dataclass(frozen=True)
class Engine:
    kind: str        # docker | podman (how to spell user mapping)
    path: str

    def as_dict(self) -> dict:
        return {"kind": self.kind, "path": self.path}


@dataclass(frozen=True)
class UnitRun:
    """One unit's build in a container, fully decided."""
    unit: str
    container: str                  # Containerfile name, e.g. cuda12.8-build
    engine: Engine
    image: str                      # content-addressed tag of that Containerfile + project
    source: Path
    build_dir: Path
    cache: Path
    script: str                     # what runs inside (sh -c)
    argv: tuple[str, ...]           # the engine command line
    expect: tuple[str, ...]         # paths under build_dir that must exist afterwards

    def as_dict(self) -> dict:
        return {"unit": self.unit, "container": self.container, "engine": self.engine.as_dict(),
                "image": self.image, "argv": list(self.argv), "script": self.script}




# --- engines and Containerfiles --------------------------------------------

def find_engine(choice: str | None = None) -> Engine:
    """--engine NAME|PATH, else $ASSEMBLE_CONTAINER_ENGINE, else podman or docker on PATH."""
    choice = choice if choice and choice != "auto" else os.environ.get(ENGINE_ENV) or None
    for name in (choice,) if choice else ENGINES:
        path = shutil.which(name)
        if path:
            kind = "podman" if "podman" in Path(name).name else "docker"
            return Engine(kind, path)
    if choice:
        raise AssembleError(f"container engine {choice!r} not found", where="--engine",
                            fix="install docker or podman, or name the engine's path")
    raise AssembleError("no container engine found (podman or docker)", where="--engine",
                        fix="install podman or docker, or build this unit on the host "
                            "(--container none, with a matching toolkit: `assemble toolchain cuda 12.8.1`)")


def available() -> list[str]:
    return sorted(p.name[: -len(SUFFIX)] for p in data_dir("containers").glob(f"*{SUFFIX}"))


def containerfile(name: str) -> Path:
    path = data_dir("containers") / f"{name}{SUFFIX}"
    if not path.is_file():
        raise AssembleError(f"unknown container {name!r}", where=str(path.parent),
                            fix=f"use one of: {', '.join(available()) or '(none shipped)'}")
    return path


def unit_container(unit_container_name: str | None, override: str | None) -> str | None:
    """--container NAME runs units that name none in NAME; --container none runs all on the host."""
    if override == "none":
        return None
    return unit_container_name or override


def add_build_options(parser) -> None:
    """The options `assemble build` offers for container units."""
    parser.add_argument("--container", metavar="NAME",
                        help=f"build units that name no container in this one ({', '.join(available())}); "
                             "'none' builds every unit on the host")
    parser.add_argument("--engine", metavar="ENGINE", default="auto",
                        help="docker, podman or a path (default: $ASSEMBLE_CONTAINER_ENGINE, else podman, else docker)")


def _stage_context(name: str, into: Path) -> Path:
    """The build context: the Containerfile plus the project itself (builder/ and its data folders)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "_data")  # _data: a wheel's copy of the folders
    shutil.copytree(PACKAGE_DIR, into / "builder", ignore=ignore)
    for part in ("recipes", "patches", "containers"):
        if data_dir(part).is_dir():
            shutil.copytree(data_dir(part), into / part, ignore=ignore)
    pyproject = PROJECT_DIR / "pyproject.toml"
    if pyproject.is_file():
        shutil.copy2(pyproject, into / "pyproject.toml")
    shutil.copy2(containerfile(name), into / "Containerfile")
    return into


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def image_tag(name: str) -> str:
    """assemble-<name>:<digest of Containerfile + project>: a change to either means a new image."""
    with tempfile.TemporaryDirectory(prefix="assemble-ctx-") as tmp:
        return f"{IMAGE_PREFIX}{name}:{_tree_digest(_stage_context(name, Path(tmp)))[:12]}"


def ensure_image(engine: Engine, name: str, log: Path | None = None) -> str:
    """Build the image for containers/<name>.Containerfile unless the engine already has it."""
    with tempfile.TemporaryDirectory(prefix="assemble-ctx-") as tmp:
        ctx = _stage_context(name, Path(tmp))
        tag = f"{IMAGE_PREFIX}{name}:{_tree_digest(ctx)[:12]}"
        probe = subprocess.run([engine.path, "image", "inspect", tag], capture_output=True, text=True)
        if probe.returncode == 0:
            ui.detail(f"image {tag} already built")
            return tag
        ui.step(f"container image {tag} ({engine.kind})")
        log = log or cache_dir() / "containers" / f"{name}.log"
        run_logged([engine.path, "build", "-f", str(ctx / "Containerfile"), "-t", tag, str(ctx)], log,
                    f"image {name}", fix=f"read {log}; the image needs network access to its base and packages")
    return tag


# --- build units -----------------------------------------------------------

def _split_args(cmake_args: Sequence[str]) -> tuple[list[str], bool]:
    """Drop the executable, -S/-B/-G (the plan sets its own) and the host's tool paths.

    Returns the remaining arguments (each -D joined to its value) and whether the
    host used a compiler launcher, which the image then replaces with its ccache.
    """
    args = list(cmake_args)
    if args and not args[0].startswith("-"):
        args = args[1:]  # a full argv from cmake.plan_unit: the host's cmake path
    out, i, launcher = [], 0, False
    while i < len(args):
        a = args[i]
        if a in ("-S", "-B", "-G"):
            i += 2
            continue
        if re.match(r"^-[SBG].", a):
            i += 1
            continue
        if a == "-D" and i + 1 < len(args):
            a, i = "-D" + args[i + 1], i + 1
        key = a[2:].split("=", 1)[0].split(":", 1)[0] if a.startswith("-D") else None
        if key and _HOST_TOOL_DEFINES.match(key):
            launcher = launcher or key.endswith("_LAUNCHER")
        else:
            out.append(a)
        i += 1
    return out, launcher


def _refuse_host_paths(args: Sequence[str], mounted: Sequence[Path], where: str) -> None:
    for a in args:
        if not a.startswith("-D") or "=" not in a:
            continue
        key, value = a[2:].split("=", 1)
        for part in value.split(";"):
            if part.startswith("/") and not any(_inside(Path(part), m) for m in mounted):
                raise AssembleError(f"-D{key} names the host path {part}, which the container cannot see",
                                    where=where, fix="drop that define for container units, or build the unit "
                                                     "on the host (--container none)")


def _inside(p: Path, root: Path) -> bool:
    try:
        p.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def expected_outputs(backends: Sequence[str], targets: Sequence[str], args: Sequence[str]) -> tuple[str, ...]:
    """What a finished unit leaves in its build tree (modules only exist with GGML_BACKEND_DL)."""
    out = ["CMakeCache.txt"] + [f"bin/{t}" for t in targets]
    if any(a in ("-DGGML_BACKEND_DL=ON", "-DGGML_BACKEND_DL:BOOL=ON") for a in args):
        out += [f"bin/libggml-{b}.so" for b in backends if b != "cpu"] + ["bin/libggml-cpu*.so"]
    return tuple(out)


def plan_unit(unit: str, container: str, cmake_args: Sequence[str], *, backends: Sequence[str],
              targets: Sequence[str], source: Path, build_dir: Path, jobs: int | None = None,
              cache: Path | None = None, engine: Engine | None = None,
              uid_gid: tuple[int, int] | None = None) -> UnitRun:
    """The engine command that configures and builds one unit in `container`, with the given cmake args."""
    where = f"unit {unit} (container {container})"
    containerfile(container)  # unknown names fail here, before anything runs
    engine = engine or find_engine()
    source, build_dir = Path(source).resolve(), Path(build_dir).resolve()
    cache = Path(cache or cache_dir()).resolve()
    if not (source / "CMakeLists.txt").is_file():
        raise AssembleError("not a llama.cpp source tree (no CMakeLists.txt)", where=str(source),
                            fix="pass the prepared source tree of the pinned sha")
    args, launcher = _split_args(cmake_args)
    _refuse_host_paths(args, (source, build_dir, cache), where)
    langs = ("C", "CXX") + (("CUDA",) if "cuda" in backends else ())
    image_defs = ["-DCMAKE_MAKE_PROGRAM=ninja"]
    if "cuda" in backends:
        image_defs += [f"-DCMAKE_CUDA_COMPILER={IMAGE_CUDA_ROOT}/bin/nvcc", f"-DCUDAToolkit_ROOT={IMAGE_CUDA_ROOT}"]
    if launcher:
        image_defs += [f"-DCMAKE_{lang}_COMPILER_LAUNCHER={IMAGE_LAUNCHER}" for lang in langs]
    configure = ["cmake", "-S", str(source), "-B", str(build_dir), "-G", "Ninja", *args, *image_defs]
    build = ["cmake", "--build", str(build_dir), "-j", str(jobs or os.cpu_count() or 2), "--target", *targets]
    script = f"set -eu\n{shlex.join(configure)}\n{shlex.join(build)}\n"

    uid, gid = uid_gid if uid_gid is not None else (os.getuid(), os.getgid())
    argv = [engine.path, "run", "--rm", "--network=none"]
    if engine.kind == "podman" and uid != 0:
        argv += ["--userns=keep-id"]  # rootless podman: files come out owned by the caller
    argv += ["--user", f"{uid}:{gid}"]
    mounts = [(cache, ""), (source, ":ro"), (build_dir, "")]
    for path, mode in mounts:
        argv += ["-v", f"{path}:{path}{mode}"]
    env = {"HOME": "/tmp", "CCACHE_DIR": str(cache / "ccache" / container), "CCACHE_BASEDIR": str(cache),
           # the source is owned by another uid inside: let llama.cpp's build-info read its git sha
           "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*",
           "NINJA_STATUS": "[%f/%t] "}
    for k, v in env.items():
        argv += ["-e", f"{k}={v}"]
    image = image_tag(container)
    argv += ["-w", str(build_dir), image, "sh", "-c", script]
    return UnitRun(unit=unit, container=container, engine=engine, image=image, source=source,
                   build_dir=build_dir, cache=cache, script=script, argv=tuple(argv),
                   expect=expected_outputs(backends, targets, args))


def plan_for(plan, *, container: str | None = None, engine: Engine | None = None) -> UnitRun:
    """Adapter from cmake.UnitPlan: its configure argv, targets, folders and -j."""
    build = list(plan.build)
    jobs = int(build[build.index("-j") + 1]) if "-j" in build else None
    return plan_unit(plan.unit.name, container or plan.unit.container, plan.configure,
                     backends=plan.unit.backends, targets=plan.targets, source=plan.source_dir,
                     build_dir=plan.build_dir, jobs=jobs, engine=engine)


def run_unit(run: UnitRun) -> Path:
    """Build the image if needed, run the unit in it, check its build tree came out; returns build_dir."""
    tag = ensure_image(run.engine, run.container)
    if tag != run.image:
        raise BuildFailed(f"image {tag} is not the planned {run.image}", where=f"unit {run.unit}",
                          fix="the project or Containerfile changed during the build; run again")
    run.build_dir.mkdir(parents=True, exist_ok=True)
    (run.cache / "ccache" / run.container).mkdir(parents=True, exist_ok=True)
    log = run.build_dir / "assemble-build.log"
    ui.step(f"build {run.unit} in container {run.container} ({run.engine.kind})")
    run_logged(list(run.argv), log, f"unit {run.unit} in {run.container}",
                fix=f"read {log}; the exact command is in it", progress=True)
    missing = [e for e in run.expect if not list(run.build_dir.glob(e))]
    if missing:
        raise BuildFailed(f"the container finished but the build tree lacks {', '.join(missing)}",
                          where=str(run.build_dir), fix=f"read {log}; check the unit's targets and backends")
    (run.build_dir / "assemble-container.json").write_text(json.dumps(run.as_dict(), indent=1))
    return run.build_dir


_PROBE = ('n=$(command -v nvcc || echo {root}/bin/nvcc); "$n" --version; echo @@archs; "$n" --list-gpu-arch; '
          'echo @@libs; d=$(dirname "$n")/..; ls "$d"/lib64 "$d"/targets/*/lib 2>/dev/null; '
          'echo @@root; cd "$d" && pwd -P')


def probe_cuda(engine: Engine, image: str) -> CudaToolkit | None:
    """The CUDA toolkit inside an image, read the way toolchain.cuda_toolkit reads the host's."""
    proc = subprocess.run([engine.path, "run", "--rm", "--network=none", image, "sh", "-c",
                           _PROBE.format(root=IMAGE_CUDA_ROOT)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return None
    text = proc.stdout
    version = re.search(r"release (\d+\.\d+)", text)
    if not version or "@@archs" not in text:
        return None
    archs_text = text.split("@@archs", 1)[1].split("@@libs", 1)[0]
    libs_text = text.split("@@libs", 1)[1].split("@@root", 1)[0] if "@@libs" in text else ""
    root = text.rsplit("@@root", 1)[1].strip() if "@@root" in text else IMAGE_CUDA_ROOT
    archs = tuple(sorted(set(re.findall(r"compute_(\d+[af]?)", archs_text)), key=lambda a: int(re.sub(r"\D", "", a))))
    return CudaToolkit(root=root or IMAGE_CUDA_ROOT, nvcc=f"{root}/bin/nvcc", version=version.group(1),
                       archs=archs, has_cublas="libcublas.so" in libs_text)


# --- runtime images --------------------------------------------------------





# --- running ---------------------------------------------------------------

def run_logged(argv: list[str], log: Path, label: str, fix: str, progress: bool = False) -> None:
    """Run, append all output to log, show Ninja's [n/N] as a bar; fail with the last lines."""
    log.parent.mkdir(parents=True, exist_ok=True)
    tail: deque[str] = deque(maxlen=25)
    bar = ui.Progress(label, None, unit="steps") if progress else None
    with open(log, "a", encoding="utf-8", errors="replace") as out:
        out.write(f"\n$ {shlex.join(argv)}\n")
        out.flush()
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    errors="replace", bufsize=1)
        except OSError as exc:
            raise BuildFailed(f"cannot start {argv[0]} ({exc})", where=label, fix="check --engine") from None
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            tail.append(line.rstrip("\n"))
            ui.detail(line.rstrip("\n"))
            m = re.match(r"^\[(\d+)/(\d+)\]", line)
            if bar and m:
                bar.update(int(m.group(1)), int(m.group(2)))
        rc = proc.wait()
    if bar:
        bar.finish("done" if rc == 0 else "")
    if rc != 0:
        raise BuildFailed(f"{label} failed (exit {rc}); full log: {log}", where=argv[0], fix=fix,
                          details="\n".join(tail))
