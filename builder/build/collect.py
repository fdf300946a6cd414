"""Find what a build unit produced, and merge several units into one set of files.

The set of libraries changes with the sha (libllama-common, libmtmd, the
libllama-*-impl.so of the tools...), so nothing here is a fixed list: the build
tree's bin/ is read and each ELF file is classified by its headers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from builder.runtime.layout import OwnFile, module_backend
from builder.build.cmake import UnitPlan
from builder.runtime.elf import read_elf
from builder.errors import AssembleError, BuildFailed





@dataclass(frozen=True)
class UnitOutput:
    plan: UnitPlan
    executables: tuple[OwnFile, ...]
    libraries: tuple[OwnFile, ...]
    modules: tuple[OwnFile, ...]


def collect_unit(plan: UnitPlan) -> UnitOutput:
    bindir = plan.build_dir / "bin"
    if not bindir.is_dir():
        raise BuildFailed("the build produced no bin/ folder", where=str(plan.build_dir),
                          fix="read assemble-build.log in that folder")
    links: dict[str, list[str]] = {}
    for entry in sorted(bindir.iterdir()):
        if entry.is_symlink():
            links.setdefault(os.path.realpath(entry), []).append(entry.name)
    executables, libraries, modules = [], [], []
    for target in plan.targets:
        exe = bindir / target
        if not exe.is_file():
            raise BuildFailed(f"target {target} was not built", where=str(bindir),
                              fix="check the target name in the recipe's targets list")
        executables.append(OwnFile(exe, f"bin/{target}", "executable"))
    for entry in sorted(bindir.iterdir()):
        if entry.is_symlink() or not entry.is_file() or entry.name in plan.targets:
            continue
        info = read_elf(entry)
        if info is None or info.etype != "ET_DYN":
            continue  # other tools built as dependencies, scripts, licences
        if module_backend(entry.name):
            modules.append(OwnFile(entry, f"bin/{entry.name}", "module"))
        elif entry.name.startswith("lib"):
            names = tuple(sorted(links.get(str(entry.resolve()), [])))
            libraries.append(OwnFile(entry, f"lib/{entry.name}", "library", names))
    if not any(module_backend(m.source.name) == "cpu" for m in modules) and "cpu" in plan.unit.backends:
        raise BuildFailed("no CPU backend module (libggml-cpu*.so) was built", where=str(bindir),
                          fix="keep GGML_BACKEND_DL=ON and GGML_CPU=ON")
    for backend in plan.unit.backends:
        if backend != "cpu" and not any(module_backend(m.source.name) == backend for m in modules):
            raise BuildFailed(f"the {backend} backend module libggml-{backend}.so was not built",
                              where=str(bindir), fix="read the configure output in assemble-build.log")
    return UnitOutput(plan, tuple(executables), tuple(libraries), tuple(modules))


def merge_units(outputs: list[UnitOutput]) -> list[OwnFile]:
    """One ggml base, one set of tools, and every unit's backend modules.

    Units must be built from the same sha with the same ABI-relevant ggml flags;
    the first unit provides the tools and shared libraries.
    """
    primary = outputs[0]
    for other in outputs[1:]:
        if other.plan.sha != primary.plan.sha:
            raise AssembleError(f"units {primary.plan.unit.name} and {other.plan.unit.name} were built from "
                                f"different shas ({primary.plan.sha} vs {other.plan.sha})",
                                fix="build every unit of a recipe at the same sha")
        a, b = primary.plan.abi(), other.plan.abi()
        diff = sorted(k for k in a if a[k] != b[k])
        if diff:
            raise AssembleError(f"units {primary.plan.unit.name} and {other.plan.unit.name} disagree on ggml ABI "
                                f"flags: " + ", ".join(f"{k}={a[k]} vs {b[k]}" for k in diff),
                                fix="give both units the same values for these defines")
    files = list(primary.executables) + list(primary.libraries)
    seen: dict[str, OwnFile] = {}
    for out in outputs:
        for m in out.modules:
            backend = module_backend(m.source.name)
            if out is not primary and (backend not in out.plan.unit.backends or backend == "cpu"):
                continue  # a secondary unit contributes only its own GPU backends
            if m.dest in seen:
                raise AssembleError(f"two units both built {m.source.name}",
                                    fix="list each backend in exactly one unit")
            seen[m.dest] = m
    return files + list(seen.values())
