"""Merge several units into one set of files: one ggml base, one set of tools, every unit's
backend modules. Units must be built from the same sha with the same ABI-relevant ggml flags."""

from __future__ import annotations

from builder.units.collect import UnitOutput
from builder.errors import AssembleError
from builder.runtime.layout import OwnFile, module_backend


def merge_units(outputs: list[UnitOutput]) -> list[OwnFile]:
    """One ggml base, one set of tools, every unit's backend modules, and the test program.

    Units must be built from the same sha with the same ABI-relevant ggml flags;
    the first unit provides the tools and shared libraries; test-backend-ops comes from the one
    unit that built it (Recipe.backend_ops_unit), linked against the same ABI as the first's.
    """
    primary = outputs[0]
    for other in outputs[1:]:
        if other.plan.sha != primary.plan.sha:
            raise AssembleError(f"units {primary.plan.unit.name} and {other.plan.unit.name} were built from "
                                f"different shas ({primary.plan.sha} vs {other.plan.sha})",
                                fix="build every unit of a recipe at the same sha")
        a, b = primary.plan.unit.abi(), other.plan.unit.abi()   # adopted units: as their folders record
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
    tests = next((out.tests for out in outputs if out.tests), ())
    return files + list(seen.values()) + list(tests)
