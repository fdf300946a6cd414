"""A finished build unit as a folder another machine can use.

A multi-unit recipe (rocm-cuda128, rocm-cuda-units) needs each backend compiled where
its toolkit lives: HIP on a ROCm host or chroot, CUDA on an NVIDIA host or in a
container. `assemble build --only-unit NAME` builds one unit and leaves, beside its
bin/, an assemble-unit.json saying exactly what it was built from. Copy bin/ and that
file anywhere; `assemble build --unit-from NAME=DIR` then merges it instead of
compiling, after checking it is the same recipe unit, sha, patch set and ABI flags.
"""

from __future__ import annotations

import json
import platform
import re
from pathlib import Path

from builder.build.cmake import UnitPlan
from builder.errors import AssembleError
from builder.config.recipe import Recipe

UNIT_FILE = "assemble-unit.json"
FORMAT = 1


def describe(plan: UnitPlan, container: str | None) -> dict:
    """What a finished unit was built from: enough to refuse it in the wrong runtime."""
    libc, version = platform.libc_ver()
    return {"format": FORMAT, "recipe": plan.recipe, "unit": plan.unit.name, "backends": list(plan.unit.backends),
            "sha": plan.sha, "tree": plan.tree, "defines": dict(plan.defines),
            "targets": list(plan.targets), "configure": list(plan.configure), "build": list(plan.build),
            "env": dict(plan.env), "toolchain": plan.toolchain, "key": plan.key, "container": container,
            "built_on": {"machine": platform.machine(), "libc": f"{libc} {version}".strip()}}


def write(plan: UnitPlan, container: str | None) -> Path:
    path = plan.build_dir / UNIT_FILE
    tmp = path.with_name(UNIT_FILE + ".tmp")
    tmp.write_text(json.dumps(describe(plan, container), indent=1))
    tmp.replace(path)
    return path


def parse_specs(items: list[str] | tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """--unit-from NAME=DIR, repeatable; each unit at most once."""
    out: dict[str, str] = {}
    for item in items:
        m = re.match(r"^([A-Za-z0-9_.-]+)=(.+)$", item)
        if not m:
            raise AssembleError(f"--unit-from {item!r} is not NAME=DIR", where="--unit-from",
                                fix="write e.g. --unit-from cuda=/srv/units/cuda")
        if m.group(1) in out:
            raise AssembleError(f"--unit-from names unit {m.group(1)!r} twice", where="--unit-from",
                                fix="give each unit one folder")
        out[m.group(1)] = m.group(2)
    return tuple(out.items())


def check_names(recipe: Recipe, names) -> None:
    known = [u.name for u in recipe.units]
    for name in names:
        if name not in known:
            raise AssembleError(f"recipe {recipe.name} has no unit {name!r}", where=str(recipe.path),
                                fix=f"use one of: {', '.join(known)}")


def _rebuild(recipe: Recipe, unit_name: str) -> str:
    return f"build it again there: assemble build --recipe {recipe.name} --only-unit {unit_name}"


def read(folder: str | Path, recipe: Recipe, unit_name: str) -> dict:
    """The description of a unit folder, or one line saying why it is not one."""
    folder = Path(folder).resolve()
    where = f"--unit-from {unit_name}={folder}"
    rebuild = _rebuild(recipe, unit_name)
    if not folder.is_dir():
        raise AssembleError("no such folder", where=where, fix="pass the folder holding the unit's bin/ and "
                            f"{UNIT_FILE}")
    try:
        desc = json.loads((folder / UNIT_FILE).read_text())
    except FileNotFoundError:
        raise AssembleError(f"no {UNIT_FILE}: not a unit folder made by `assemble build --only-unit`", where=where,
                            fix=f"{rebuild}, then copy its bin/ and {UNIT_FILE}") from None
    except (OSError, ValueError) as exc:
        raise AssembleError(f"{UNIT_FILE} is unreadable ({exc})", where=where, fix=rebuild) from None
    if not isinstance(desc, dict) or desc.get("format") != FORMAT:
        raise AssembleError(f"{UNIT_FILE} has format {desc.get('format') if isinstance(desc, dict) else '?'}, "
                            f"this assemble reads {FORMAT}", where=where, fix=f"{rebuild} with this assemble version")
    return dict(desc, folder=str(folder))


def recorded_cuda(desc: dict):
    """The CUDA toolkit a unit folder was compiled with, and its architectures."""
    from builder.toolchain.detect import CudaToolkit
    tk = (desc.get("toolchain") or {}).get("cuda")
    archs = tuple(a for a in str((desc.get("defines") or {}).get("CMAKE_CUDA_ARCHITECTURES", "")).split(";") if a)
    return (CudaToolkit.from_dict(tk) if tk else None), archs


def recorded_hip_targets(desc: dict) -> tuple[str, ...]:
    return tuple(t for t in str((desc.get("defines") or {}).get("GPU_TARGETS", "")).split(";") if t)


def adopt(desc: dict, recipe: Recipe, unit_name: str, sha: str | None, tree: str) -> UnitPlan:
    """The plan of a unit built elsewhere, after checking it belongs in this build."""
    folder = Path(desc["folder"])
    where = f"--unit-from {unit_name}={folder}"
    rebuild = _rebuild(recipe, unit_name)
    unit = next(u for u in recipe.units if u.name == unit_name)
    mismatch = []
    if desc.get("recipe") != recipe.name or desc.get("unit") != unit.name:
        mismatch.append(f"it is unit {desc.get('unit')!r} of recipe {desc.get('recipe')!r}")
    if sorted(desc.get("backends") or []) != sorted(unit.backends):
        mismatch.append(f"it has backends {', '.join(desc.get('backends') or [])}, the recipe's unit "
                        f"{', '.join(unit.backends)}")
    if desc.get("sha") != sha:
        mismatch.append(f"it was built at {desc.get('sha')}, this build is at {sha}")
    if desc.get("tree", "") != tree:
        mismatch.append(f"its source was patched with [{desc.get('tree') or 'nothing'}], "
                        f"this build's with [{tree or 'nothing'}]")
    if mismatch:
        raise AssembleError(f"that unit does not belong in this build: {'; '.join(mismatch)}", where=where,
                            fix=rebuild)
    defines = desc.get("defines") if isinstance(desc.get("defines"), dict) else {}
    missing = [k for k in ("GGML_BACKEND_DL", "BUILD_SHARED_LIBS") if k not in defines]
    if missing or not isinstance(desc.get("targets"), list):
        raise AssembleError(f"{UNIT_FILE} lacks {', '.join(missing) or 'targets'}", where=where, fix=rebuild)
    configure = tuple(desc.get("configure") or ())
    source = configure[configure.index("-S") + 1] if "-S" in configure else ""
    return UnitPlan(recipe=recipe.name, unit=unit, sha=sha, source_dir=Path(source), build_dir=folder,
                    defines=tuple(defines.items()), targets=tuple(desc["targets"]), configure=configure,
                    build=tuple(desc.get("build") or ()), env=tuple((desc.get("env") or {}).items()),
                    toolchain=desc.get("toolchain") or {}, key=str(desc.get("key", "")), tree=tree)


def origin(desc: dict) -> dict:
    """For the manifest: where an adopted unit was built."""
    return {"folder": desc["folder"], "built_on": desc.get("built_on"), "container": desc.get("container")}

