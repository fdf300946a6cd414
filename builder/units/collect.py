"""Find what a build unit produced (builder.units.merge puts several units together).

The set of libraries changes with the sha (libllama-common, libmtmd, the
libllama-*-impl.so of the tools...), so nothing here is a fixed list: the build
tree's bin/ is read and each ELF file is classified by its headers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from builder.runtime.layout import BACKEND_OPS, OwnFile, module_backend, own_file
from builder.units.plan import UnitPlan
from builder.runtime.elf import read_elf
from builder.errors import BuildFailed


@dataclass(frozen=True)
class UnitOutput:
    plan: UnitPlan
    executables: tuple[OwnFile, ...]
    libraries: tuple[OwnFile, ...]
    modules: tuple[OwnFile, ...]
    tests: tuple[OwnFile, ...] = ()   # test-backend-ops, when the unit built it ([tests] backend_ops)


def collect_unit(plan: UnitPlan) -> UnitOutput:
    bindir = plan.build_dir / "bin"
    if not bindir.is_dir():
        raise BuildFailed("the build produced no bin/ folder", where=str(plan.build_dir),
                          fix="read assemble-build.log in that folder")
    links: dict[str, list[str]] = {}
    for entry in sorted(bindir.iterdir()):
        if entry.is_symlink():
            links.setdefault(os.path.realpath(entry), []).append(entry.name)
    executables, libraries, modules, tests = [], [], [], []
    for target in plan.targets:
        exe = bindir / target
        if not exe.is_file():
            raise BuildFailed(f"target {target} was not built", where=str(bindir),
                              fix="check the target name in the recipe's targets list")
        if target == BACKEND_OPS:     # a test program: tests/, never bin/ with the tools
            tests.append(own_file(exe, "test"))
        else:
            executables.append(own_file(exe, "executable"))
    for entry in sorted(bindir.iterdir()):
        if entry.is_symlink() or not entry.is_file() or entry.name in plan.targets:
            continue
        info = read_elf(entry)
        if info is None or info.etype != "ET_DYN":
            continue  # other tools built as dependencies, scripts, licences
        if module_backend(entry.name):
            modules.append(own_file(entry, "module"))
        elif entry.name.startswith("lib"):
            names = tuple(sorted(links.get(str(entry.resolve()), [])))
            libraries.append(own_file(entry, "library", names))
    if not any(module_backend(m.source.name) == "cpu" for m in modules) and "cpu" in plan.unit.backends:
        raise BuildFailed("no CPU backend module (libggml-cpu*.so) was built", where=str(bindir),
                          fix="keep GGML_BACKEND_DL=ON and GGML_CPU=ON")
    for backend in plan.unit.backends:
        if backend != "cpu" and not any(module_backend(m.source.name) == backend for m in modules):
            raise BuildFailed(f"the {backend} backend module libggml-{backend}.so was not built",
                              where=str(bindir), fix="read the configure output in assemble-build.log")
    return UnitOutput(plan, tuple(executables), tuple(libraries), tuple(modules), tuple(tests))


