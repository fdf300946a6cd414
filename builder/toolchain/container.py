"""Container engines and build images: the parts of a container unit that are not the build.

A container unit runs the same CMake configure + build the host would (builder.units.plan
renders it with the image's tool paths), in an image made from containers/<name>.Containerfile
(e.g. cuda12.8-build: CUDA 12.8, which Blackwell needs). Here: finding the engine, building
and tagging images by content, reading the image's CUDA toolkit for the rules, and the
engine's `run` command line with every folder mounted at the same path it has on the host.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder import ui
from builder.errors import AssembleError
from builder.paths import PACKAGE_DIR, PROJECT_DIR, cache_dir, data_dir, scratch
from builder.proc import run, run_logged
from builder.config.targets import CudaArch
from builder.toolchain.detect import CudaToolkit

ENGINES = ("podman", "docker")         # auto picks the first found: podman needs no daemon
SUFFIX = ".Containerfile"
IMAGE_PREFIX = "assemble-"


@dataclass(frozen=True)
class Engine:
    kind: str        # docker | podman (how to spell user mapping)
    path: str

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path}


# --- engines and Containerfiles --------------------------------------------

def find_engine(choice: str | None = None) -> Engine:
    """The resolved engine (--engine NAME|PATH, else $ASSEMBLE_CONTAINER_ENGINE: builder.config.options),
    else podman or docker on PATH."""
    choice = choice if choice and choice != "auto" else None
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
    from builder.config.recipe import CONTAINER_RE          # the one grammar of a container name
    path = data_dir("containers") / f"{name}{SUFFIX}"
    if not CONTAINER_RE.fullmatch(name) or not path.is_file():
        raise AssembleError(f"unknown container {name!r}", where=str(path.parent),
                            fix=f"use one of: {', '.join(available()) or '(none shipped)'}")
    return path


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
    with scratch("ctx-") as tmp:
        return f"{IMAGE_PREFIX}{name}:{_tree_digest(_stage_context(name, tmp))[:12]}"


def ensure_image(engine: Engine, name: str, log: Path | None = None) -> str:
    """Build the image for containers/<name>.Containerfile unless the engine already has it."""
    with scratch("ctx-") as ctx:
        _stage_context(name, ctx)
        tag = f"{IMAGE_PREFIX}{name}:{_tree_digest(ctx)[:12]}"
        if run([engine.path, "image", "inspect", tag]).returncode == 0:
            ui.detail(f"image {tag} already built")
            return tag
        ui.step(f"container image {tag} ({engine.kind})")
        log = log or cache_dir() / "containers" / f"{name}.log"
        run_logged([engine.path, "build", "-f", str(ctx / "Containerfile"), "-t", tag, str(ctx)], log,
                   f"image {name}", fix=f"read {log}; the image needs network access to its base and packages")
    return tag


_PROBE = ('n=$(command -v nvcc || echo {root}/bin/nvcc); "$n" --version; echo @@archs; "$n" --list-gpu-arch; '
          'echo @@libs; d=$(dirname "$n")/..; ls "$d"/lib64 "$d"/targets/*/lib 2>/dev/null; '
          'echo @@root; cd "$d" && pwd -P')


def probe_cuda(engine: Engine, image: str, root: str = "/usr/local/cuda") -> CudaToolkit | None:
    """The CUDA toolkit inside an image, read the way detect.cuda_toolkit reads the host's."""
    proc = run([engine.path, "run", "--rm", "--network=none", image, "sh", "-c", _PROBE.format(root=root)],
               timeout=300)
    if proc.returncode != 0:
        return None
    text = proc.stdout
    version = re.search(r"release (\d+\.\d+)", text)
    if not version or "@@archs" not in text:
        return None
    archs_text = text.split("@@archs", 1)[1].split("@@libs", 1)[0]
    libs_text = text.split("@@libs", 1)[1].split("@@root", 1)[0] if "@@libs" in text else ""
    found = (text.rsplit("@@root", 1)[1].strip() if "@@root" in text else "") or root
    return CudaToolkit(root=found, nvcc=f"{found}/bin/nvcc", version=version.group(1),
                       archs=CudaArch.from_nvcc(archs_text), has_cublas="libcublas.so" in libs_text)


def run_argv(engine: Engine, image: str, script: str, *, mounts: Sequence[tuple[Path, bool]], env: dict[str, str],
             workdir: Path, uid_gid: tuple[int, int] | None = None) -> tuple[str, ...]:
    """`engine run` for a script: no network, the caller's uid (so files come out owned by them),
    each folder mounted at its own path ((path, read_only) pairs), the given environment."""
    uid, gid = uid_gid if uid_gid is not None else (os.getuid(), os.getgid())
    argv = [engine.path, "run", "--rm", "--network=none"]
    if engine.kind == "podman" and uid != 0:
        argv += ["--userns=keep-id"]  # rootless podman: files come out owned by the caller
    argv += ["--user", f"{uid}:{gid}"]
    for path, read_only in mounts:
        argv += ["-v", f"{path}:{path}" + (":ro" if read_only else "")]
    for k, v in env.items():
        argv += ["-e", f"{k}={v}"]
    return tuple(argv + ["-w", str(workdir), image, "sh", "-c", script])


