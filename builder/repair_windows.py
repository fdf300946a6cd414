"""assemble repair for Windows release zips: one flat runtime-<name>-windows-x64/ folder.

    zips -> unpack (the same refusals as on Linux) -> PE files -> one ggml base -> import closure
         -> copy (bytes unchanged: Windows has no RPATH to set) -> manifest -> verify -> swap in

The output folder follows build's --out rules (lock, staging, atomic swap, --keep).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import zipfile
from pathlib import Path

from builder import outdir, paths, ui
from builder.check import verify
from builder.check.windows import verify_windows
from builder.config.upstream import BUILD_RE
from builder.digest import sha256_file
from builder.errors import AssembleError
from builder.prebuilt import origins
from builder.prebuilt.inputs import classify, unpack
from builder.prebuilt.request import RepairRequest
from builder.runtime import licenses, manifest
from builder.windows import PLATFORM, assemble

_WINDOWS = (".exe", ".dll")
_SHARED_OBJECT = re.compile(r"\.so(\.\d+)*\Z")            # libggml.so, libllama.so.0.0.1


def _names(given: str) -> list[str]:
    """Member or file names of one input, without unpacking it (for telling Windows from Linux)."""
    path = Path(given).expanduser()
    if path.is_dir():
        return [p.name for p in path.rglob("*") if p.is_file()][:100000]
    if path.suffix.lower() == ".zip" and path.is_file():
        try:
            with zipfile.ZipFile(path) as zf:
                return zf.namelist()
        except (zipfile.BadZipFile, OSError):
            return []                         # unpack names the problem
    return []


def is_windows_input(given: str) -> bool:
    """A zip or folder with Windows binaries and no ELF shared library (upstream's win zips)."""
    names = [n.lower() for n in _names(given)]
    return any(n.endswith(_WINDOWS) for n in names) and not any(_SHARED_OBJECT.search(Path(n).name) for n in names)


def platform_of(inputs: tuple[str, ...]) -> str:
    """windows when every input is a Windows zip or folder, linux when none is; a mix is refused."""
    flags = [is_windows_input(i) for i in inputs]
    if all(flags):
        return PLATFORM
    if any(flags):
        windows = next(i for i, f in zip(inputs, flags, strict=True) if f)
        other = next(i for i, f in zip(inputs, flags, strict=True) if not f)
        raise AssembleError(f"{windows} holds Windows binaries and {other} does not", where=other,
                            fix="repair Windows zips and Linux inputs separately: one runtime runs on one OS")
    return "linux"


def plan(req: RepairRequest, work: Path) -> tuple[assemble.WinPlan, tuple[origins.Unpacked, ...]]:
    """What to carry, and how the inputs' files are named (refusals name the user's files)."""
    if req.lib_paths or req.hip_targets:
        raise AssembleError("--lib-path and --hip-target are for Linux inputs", where="assemble repair",
                            fix="give the DLLs as zips (e.g. upstream's cudart zip) instead")
    seen: list[origins.Unpacked] = []
    try:
        parts = []
        for i, inp in enumerate(classify(req.inputs)):
            members: dict[str, str] = {}
            dest = work / f"input-{i}"
            root = unpack(inp, dest, members=members)
            seen.append(origins.Unpacked(inp.given, inp.path if inp.kind == "folder" else dest.resolve(),
                                         inp.kind == "folder", members))
            parts.append(assemble.read_part(inp, root))
        return assemble.plan(parts, req.targets), tuple(seen)
    except AssembleError as exc:
        raise origins.renamed(seen, exc) from None


def show(p: assemble.WinPlan, inputs: tuple[origins.Unpacked, ...]) -> None:
    for part in p.parts:
        print(f"input {part.input.given} ({part.input.kind}): {assemble.describe_base(part)}")
        if p.contributed.get(part.input.given):
            print(f"  contributes  {', '.join(p.contributed[part.input.given])}")
    print("would carry")
    for c in p.carried:
        print(f"  {c.name:<44} {c.role}, from {origins.origin(inputs, c.source)}")
    print("left to the host")
    for h in p.host:
        print(f"  {h.name:<44} {h.rule.kind}: {h.rule.reason}")
    for name in p.left_out:
        print(f"  {name:<44} shipped by an input, not carried (driver DLL: the host's must be used)")


def _place(p: assemble.WinPlan, inputs: tuple[origins.Unpacked, ...], dest: Path) -> list[manifest.FileEntry]:
    entries = []
    for c in p.carried:
        shutil.copyfile(c.source, dest / c.name)
        os.chmod(dest / c.name, 0o755)          # what unzip gives an .exe/.dll on Linux-hosted shares, fixed
        entries.append(manifest.FileEntry(c.name, c.role, origins.origin(inputs, c.source), sha256_file(dest / c.name),
                                          (dest / c.name).stat().st_size, 0o755))
    return entries


def _licensed(p: assemble.WinPlan, dest: Path, files: list[manifest.FileEntry]
              ) -> tuple[list[manifest.FileEntry], tuple[manifest.LicenseRecord, ...]]:
    """licenses/: upstream's LICENSE (at the top of each zip) for llama.cpp's files; a vendor DLL gets the
    licence texts beside it only in an input of vendor files alone (upstream's cudart zip), where no
    llama.cpp text can be mistaken for its own. What has none stays uncovered: package refuses it."""
    ours = tuple(c.name for c in p.carried if c.role == "own")
    first = next(x for x in p.parts if x.base is not None)
    sources = []
    own = next((found for part in [first, *p.parts]
                if (found := licenses.input_license([part.root], ours, part.input.given))), None)
    if own is not None:
        sources.append(own)
    own_inputs = {c.input for c in p.carried if c.role == "own"}
    for given in dict.fromkeys(c.input for c in p.carried if c.role != "own" and c.input not in own_inputs):
        dlls = tuple(c.name for c in p.carried if c.input == given and c.role != "own")
        folders = {c.source.parent for c in p.carried if c.input == given}
        texts = tuple(sorted(t for f in folders for t in f.iterdir() if t.is_file() and licenses.is_text(t.name)))
        if texts:
            sources.append(licenses.LicenseSource(licenses.component_name(Path(given).name.removesuffix(".zip")),
                                                  texts, None, given, dlls))
    entries, records = licenses.place_licenses(sources, dest)
    return files + entries, tuple(records)


def _manifest(req: RepairRequest, p: assemble.WinPlan, files: list[manifest.FileEntry],
              licensed: tuple[manifest.LicenseRecord, ...] = ()) -> manifest.Manifest:
    first = next(x for x in p.parts if x.base is not None)
    backends = sorted({b for c in p.carried if (b := assemble.module_backend(c.name))}, key=lambda b: (b != "cpu", b))
    executables = tuple(c.name for c in p.carried if c.name.lower().endswith(".exe"))
    sizes: dict[str, int] = {}
    for f in files:
        sizes[f.role] = sizes.get(f.role, 0) + f.size
    return manifest.Manifest(
        recipe=manifest.RecipeRecord(req.name, f"repaired from {', '.join(x.input.given for x in p.parts)}",
                                     tuple(backends), executables, ""),
        llama_cpp=manifest.SourceRecord(sha=None, commit_time=None,
                                        source=manifest.Provenance(kind="prebuilt", path=first.input.given),
                                        features={}, patches=(),
                                        build=first.build if first.build and BUILD_RE.fullmatch(first.build) else None),
        files=tuple(files), system_libs=tuple(manifest.SystemLib(h.name, f"{h.rule.kind}: {h.rule.reason}", h.needed_by)
                                              for h in p.host),
        size_by_role=sizes,
        inputs=tuple(manifest.InputRecord(x.input.given, x.input.kind, x.input.sha256, None, x.build,
                                          assemble.describe_base(x), tuple(p.contributed.get(x.input.given, ())))
                     for x in p.parts),
        loader=manifest.LoaderRecord((), req.accept_loader_risk) if req.accept_loader_risk else None,
        platform=PLATFORM, licenses=licensed)


def repair(req: RepairRequest) -> Path | None:
    target = None if req.dry_run else outdir.check_destination(req.out, cache=paths.cache_dir(),
                                                               inputs=req.read_paths())
    with paths.scratch("repair-") as work:
        if req.dry_run:
            show(*plan(req, work))
            return None
        assert target is not None

        def fill(staged: Path) -> None:
            p, inputs = plan(req, work)
            ui.step(f"repair into {staged.name} (Windows, {len(p.carried)} files)")
            files, licensed = _licensed(p, staged, _place(p, inputs, staged))
            licensed = tuple(dataclasses.replace(r, source=origins.named(inputs, r.source) or r.source)
                             for r in licensed)
            _manifest(req, p, files, licensed).write(staged)
            verify.require_passed(verify_windows(staged, accepted=req.accept_loader_risk), str(target.path),
                                  "the repaired runtime")

        outdir.publish(target, fill, wait=req.wait, keep=req.keep, protect=req.read_paths())
    ui.step(ui.ok(f"runtime ready: {target.path}"))
    return target.path
