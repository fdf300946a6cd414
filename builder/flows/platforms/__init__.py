"""The platforms `assemble repair` knows, each a module with the same four functions (the way
cibuildwheel's platforms/ does it); the CLI picks one from the inputs (flows.repair.platform_of)
and flows.repair runs it:

    plan(req, work)          unpack and read the inputs into the scratch folder `work`; every
                             refusal happens here, before anything is copied
    show(plan, req)          --dry-run: what was found, what would be carried and why
    place(plan, req, staged) copy what the plan carries into the staging folder; the manifest
    verify(staged, req)      the checks a repaired runtime must pass before it is swapped in

linux.py: ELF inputs (build folders, archives, .debs), RPATHs set. windows.py: upstream's
Windows zips, one flat folder of DLLs copied unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from builder.check.report import Report
from builder.config.upstream import BUILD_RE
from builder.prebuilt import origins
from builder.prebuilt.inputs import Input, unpack
from builder.prebuilt.request import RepairRequest
from builder.runtime import manifest


class RepairPlatform(Protocol):
    """A platform module (positional arguments: each module names its plan its own way)."""
    def plan(self, req: RepairRequest, work: Path, /) -> Any: ...

    def show(self, plan: Any, req: RepairRequest, /) -> None: ...

    def place(self, plan: Any, req: RepairRequest, staged: Path, /) -> manifest.Manifest: ...

    def verify(self, staged: Path, req: RepairRequest, /) -> Report: ...


def unpack_input(inp: Input, work: Path, index: int) -> tuple[Path, origins.Unpacked]:
    """Where the input's content is (a folder input is read in place), and how its files are named."""
    members: dict[str, str] = {}
    dest = work / f"input-{index}"
    root = unpack(inp, dest, members=members)
    return root, origins.Unpacked(inp.given, inp.path if inp.kind == "folder" else dest.resolve(),
                                  inp.kind == "folder", members)


def repaired_manifest(req: RepairRequest, inputs: Sequence[manifest.InputRecord], *, first: str,
                      version: str | None, build: str | None, backends: tuple[str, ...],
                      executables: tuple[str, ...], **rest: Any) -> manifest.Manifest:
    """What every repaired runtime records alike: its name, the inputs it came from (`first`: the one
    whose ggml base it carries, with its upstream build tag; `version`: llama.cpp's own version as
    its files say, never ggml's: each input's ggml version is its InputRecord's), no source tree
    (nothing was compiled here); `rest`: the platform's own fields (files, system libraries...)."""
    return manifest.Manifest(
        recipe=manifest.RecipeRecord(req.name, f"repaired from {', '.join(x.given for x in inputs)}",
                                     backends, executables, ""),
        llama_cpp=manifest.SourceRecord(sha=None, commit_time=None,
                                        source=manifest.Provenance(kind="prebuilt", path=first, version=version),
                                        features={}, patches=(),
                                        build=build if build and BUILD_RE.fullmatch(build) else None),
        inputs=tuple(inputs), **rest)
