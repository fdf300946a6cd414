"""A finished build unit as a folder another machine can use.

A multi-unit recipe (rocm-cuda128, rocm-cuda-units) needs each backend compiled where
its toolkit lives: HIP on a ROCm host or chroot, CUDA on an NVIDIA host or in a
container. `assemble build --only-unit NAME` builds one unit and leaves, beside its
bin/, an assemble-unit.json saying exactly what it was built from. Copy bin/ and that
file anywhere; `assemble build --unit-from NAME=DIR` then merges it instead of
compiling, after checking it is the same recipe unit, sha, patch set and ABI flags.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.units.plan import UnitPlan
from builder.config.options import BuildConfig, Define, UnitConfig
from builder.config.recipe import Recipe
from builder.config.targets import CudaArch, GfxTarget
from builder.errors import AssembleError
from builder.toolchain.detect import CudaToolkit

UNIT_FILE = "assemble-unit.json"
FORMAT = 2        # 2: structured fields (cmake, folders, jobs) instead of command lines to parse back


@dataclass(frozen=True)
class UnitDescription:
    """What a finished unit was built from: enough to refuse it in the wrong runtime."""
    recipe: str
    unit: str
    backends: tuple[str, ...]
    sha: str | None
    tree: str                                 # the patch set
    defines: tuple[tuple[str, str], ...]      # every define, so the ABI flags too
    targets: tuple[str, ...]
    cmake: str
    source_dir: str                           # as it was on the machine that built it
    build_dir: str
    jobs: int
    env: tuple[tuple[str, str], ...] = ()
    toolchain: dict[str, Any] = field(default_factory=dict)
    key: str = ""
    container: str | None = None
    built_on: dict[str, Any] = field(default_factory=dict)   # machine, libc
    folder: str = ""                          # where it is now (not written: the reader fills it in)

    def define(self, key: str) -> str | None:
        return dict(self.defines).get(key)

    def cuda_toolkit(self) -> CudaToolkit | None:
        tk = self.toolchain.get("cuda")
        return CudaToolkit.from_dict(tk) if isinstance(tk, dict) else None

    def cuda_archs(self) -> tuple[CudaArch, ...]:
        return tuple(CudaArch.parse(a) for a in (self.define("CMAKE_CUDA_ARCHITECTURES") or "").split(";") if a)

    def hip_targets(self) -> tuple[GfxTarget, ...]:
        return tuple(GfxTarget.parse(t) for t in (self.define("GPU_TARGETS") or "").split(";") if t)

    def to_json(self) -> str:
        body = {"format": FORMAT, **dataclasses.asdict(self)}
        body.pop("folder")
        body["defines"], body["env"] = dict(self.defines), dict(self.env)
        return json.dumps(body, indent=1)

    def origin(self) -> dict[str, Any]:
        """For the manifest: where an adopted unit was built."""
        return {"folder": self.folder, "built_on": self.built_on, "container": self.container}


def describe(plan: UnitPlan) -> UnitDescription:
    libc, version = platform.libc_ver()
    return UnitDescription(recipe=plan.recipe, unit=plan.unit.name, backends=tuple(plan.unit.backends), sha=plan.sha,
                           tree=plan.tree, defines=plan.defines, targets=plan.targets, cmake=plan.cmake,
                           source_dir=str(plan.source_dir), build_dir=str(plan.build_dir), jobs=plan.jobs,
                           env=plan.env, toolchain=plan.toolchain, key=plan.key, container=plan.unit.where.image,
                           built_on={"machine": platform.machine(), "libc": f"{libc} {version}".strip()})


def write(plan: UnitPlan) -> Path:
    path = plan.build_dir / UNIT_FILE
    tmp = path.with_name(UNIT_FILE + ".tmp")
    tmp.write_text(describe(plan).to_json())
    tmp.replace(path)
    return path


def parse_specs(items: list[str] | tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """--unit-from NAME=DIR, repeatable; each unit at most once."""
    out: dict[str, str] = {}
    for item in items:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)=(.+)", item)
        if not m:
            raise AssembleError(f"--unit-from {item!r} is not NAME=DIR", where="--unit-from",
                                fix="write e.g. --unit-from cuda=/srv/units/cuda")
        if m.group(1) in out:
            raise AssembleError(f"--unit-from names unit {m.group(1)!r} twice", where="--unit-from",
                                fix="give each unit one folder")
        out[m.group(1)] = m.group(2)
    return tuple(out.items())


def _rebuild(recipe: Recipe, unit_name: str) -> str:
    return f"build it again there: assemble build --recipe {recipe.name} --only-unit {unit_name}"


def read(folder: str | Path, recipe: Recipe, unit_name: str) -> UnitDescription:
    """The description of a unit folder, or one line saying why it is not one."""
    folder = Path(folder).resolve()
    where = f"--unit-from {unit_name}={folder}"
    rebuild = _rebuild(recipe, unit_name)
    if not folder.is_dir():
        raise AssembleError("no such folder", where=where, fix="pass the folder holding the unit's bin/ and "
                            f"{UNIT_FILE}")
    try:
        raw = json.loads((folder / UNIT_FILE).read_text())
    except FileNotFoundError:
        raise AssembleError(f"no {UNIT_FILE}: not a unit folder made by `assemble build --only-unit`", where=where,
                            fix=f"{rebuild}, then copy its bin/ and {UNIT_FILE}") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise AssembleError(f"{UNIT_FILE} is unreadable ({type(exc).__name__})", where=where, fix=rebuild) from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise AssembleError(f"{UNIT_FILE} has format {raw.get('format') if isinstance(raw, dict) else '?'}, "
                            f"this assemble reads {FORMAT}", where=where, fix=f"{rebuild} with this assemble version")
    return _parse(raw, str(folder), where, rebuild)


def _parse(raw: dict[str, Any], folder: str, where: str, rebuild: str) -> UnitDescription:
    kinds = {"recipe": str, "unit": str, "backends": list, "tree": str, "defines": dict, "targets": list,
             "cmake": str, "source_dir": str, "build_dir": str, "jobs": int, "env": dict, "toolchain": dict,
             "key": str, "built_on": dict}
    for key, kind in kinds.items():
        if not isinstance(raw.get(key), kind) or (kind is int and isinstance(raw.get(key), bool)):
            raise AssembleError(f"{UNIT_FILE} key {key} is missing or not {kind.__name__}", where=where, fix=rebuild)
    for key in ("sha", "container"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise AssembleError(f"{UNIT_FILE} key {key} is not a string", where=where, fix=rebuild)
    defines, env = raw["defines"], raw["env"]
    if not all(isinstance(v, str) for v in [*defines.values(), *env.values(), *raw["targets"], *raw["backends"]]):
        raise AssembleError(f"{UNIT_FILE} has a non-string define, target or backend", where=where, fix=rebuild)
    missing = [k for k in ("GGML_BACKEND_DL", "BUILD_SHARED_LIBS") if k not in defines]
    if missing:
        raise AssembleError(f"{UNIT_FILE} lacks {', '.join(missing)}", where=where, fix=rebuild)
    return UnitDescription(recipe=raw["recipe"], unit=raw["unit"], backends=tuple(raw["backends"]), sha=raw.get("sha"),
                           tree=raw["tree"], defines=tuple(defines.items()), targets=tuple(raw["targets"]),
                           cmake=raw["cmake"], source_dir=raw["source_dir"], build_dir=raw["build_dir"],
                           jobs=raw["jobs"], env=tuple(env.items()), toolchain=raw["toolchain"], key=raw["key"],
                           container=raw.get("container"), built_on=raw["built_on"], folder=folder)


def check_belongs(desc: UnitDescription, recipe: Recipe, unit: UnitConfig, sha: str | None, tree: str) -> None:
    """Refuse, in one line, a unit folder from another recipe or unit, other backends, sha or patches."""
    where = f"--unit-from {unit.name}={desc.folder}"
    mismatch = []
    if desc.recipe != recipe.name or desc.unit != unit.name:
        mismatch.append(f"it is unit {desc.unit!r} of recipe {desc.recipe!r}")
    if sorted(desc.backends) != sorted(unit.backends):
        mismatch.append(f"it has backends {', '.join(desc.backends)}, the recipe's unit {', '.join(unit.backends)}")
    if desc.sha != sha:
        mismatch.append(f"it was built at {desc.sha}, this build is at {sha}")
    if desc.tree != tree:
        mismatch.append(f"its source was patched with [{desc.tree or 'nothing'}], this build's with [{tree or 'nothing'}]")
    if mismatch:
        raise AssembleError(f"that unit does not belong in this build: {'; '.join(mismatch)}", where=where,
                            fix=_rebuild(recipe, unit.name))


def as_configured(unit: UnitConfig, desc: UnitDescription) -> UnitConfig:
    """The unit as its folder says it was built: its targets and defines, not this machine's wishes."""
    return dataclasses.replace(unit, cuda_archs=desc.cuda_archs(), hip_targets=desc.hip_targets(),
                               defines=tuple(Define(k, v, "built elsewhere") for k, v in desc.defines))


def adopt(desc: UnitDescription, config: BuildConfig, unit: UnitConfig) -> UnitPlan:
    """The plan of a unit built elsewhere (after check_belongs): its folder is its build tree."""
    return UnitPlan(recipe=config.recipe.name, unit=unit, sha=desc.sha, source_dir=Path(desc.source_dir),
                    build_dir=Path(desc.folder), defines=desc.defines, targets=desc.targets, jobs=desc.jobs,
                    cmake=desc.cmake, env=desc.env, toolchain=desc.toolchain, key=desc.key, tree=desc.tree)


def export(build_dir: Path, dest: Path) -> None:
    """What --unit-from needs of a finished unit, copied into `dest` (empty): bin/ with its links
    as they are, and the description. Nothing else of the build folder leaves the machine."""
    shutil.copytree(build_dir / "bin", dest / "bin", symlinks=True)
    shutil.copy2(build_dir / UNIT_FILE, dest / UNIT_FILE)
