"""assemble repair for Windows release zips: one flat runtime-<name>-windows-x64/ folder.

    zips -> unpack (the same refusals as on Linux) -> PE files -> one ggml base -> import closure
         -> copy (bytes unchanged: Windows has no RPATH to set) -> manifest -> verify -> swap in

flows.repair publishes it by build's --out rules (lock, staging, atomic swap, --keep).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from builder import ui
from builder.check.report import Report
from builder.check.windows import reads_working_directory, verify_windows
from builder.digest import sha256_file
from builder.errors import AssembleError
from builder.flows.platforms import repaired_manifest, unpack_input
from builder.prebuilt import origins
from builder.prebuilt.inputs import classify
from builder.prebuilt.request import RepairRequest
from builder.runtime import licenses, manifest
from builder.prebuilt.discover import WITHOUT
from builder.windows import PLATFORM, assemble
from builder.windows.assemble import LOADER

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


@dataclass(frozen=True)
class Plan:
    carry: assemble.WinPlan
    inputs: tuple[origins.Unpacked, ...]         # how the inputs' files are named (refusals name the user's)


def plan(req: RepairRequest, work: Path) -> Plan:
    """What to carry, and how the inputs' files are named (refusals name the user's files)."""
    if req.without:
        raise AssembleError("--without is read for Linux inputs only", where=f"{WITHOUT} {req.without[0]}",
                            fix="a Windows zip's files are chosen by their import tables; leave --without off")
    if req.lib_paths or req.hip_targets:
        raise AssembleError("--lib-path and --hip-target are for Linux inputs", where="assemble repair",
                            fix="give the DLLs as zips (e.g. upstream's cudart zip) instead")
    seen: list[origins.Unpacked] = []
    try:
        parts = []
        for i, inp in enumerate(classify(req.inputs)):
            root, unpacked = unpack_input(inp, work, i)
            seen.append(unpacked)
            parts.append(assemble.read_part(inp, root))
        return Plan(assemble.plan(parts, req.targets), tuple(seen))
    except AssembleError as exc:
        raise origins.renamed(seen, exc) from None


def show(plan: Plan, req: RepairRequest) -> None:
    p, inputs = plan.carry, plan.inputs
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
    carried = {c.source for c in p.carried}
    loader = next((pe for part in p.parts if (pe := part.files.get(LOADER)) and pe.path in carried), None)
    readers = reads_working_directory(loader) if loader else []
    if readers:
        accepted = req.accept_loader_risk
        print(f"loader: {LOADER} also searches the working directory (it imports {readers[0]}): a DLL planted where "
              "llama-server starts runs in it; " + (f"accepted: {accepted}" if accepted
                                                    else "verify fails until --accept-loader-risk REASON"))


def _place(p: assemble.WinPlan, inputs: tuple[origins.Unpacked, ...], dest: Path) -> list[manifest.FileEntry]:
    entries = []
    for c in p.carried:
        shutil.copyfile(c.source, dest / c.name)
        os.chmod(dest / c.name, 0o755)          # what unzip gives an .exe/.dll on Linux-hosted shares, fixed
        entries.append(manifest.FileEntry(c.name, c.role, origins.origin(inputs, c.source), sha256_file(dest / c.name),
                                          (dest / c.name).stat().st_size, 0o755))
    return entries


def _licensed(p: assemble.WinPlan, inputs: tuple[origins.Unpacked, ...], dest: Path, files: list[manifest.FileEntry]
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
        sources.append(dataclasses.replace(own, source=origins.texts_origin(inputs, own.texts)))
    own_inputs = {c.input for c in p.carried if c.role == "own"}
    for given in dict.fromkeys(c.input for c in p.carried if c.role != "own" and c.input not in own_inputs):
        dlls = tuple(c.name for c in p.carried if c.input == given and c.role != "own")
        folders = {c.source.parent for c in p.carried if c.input == given}
        texts = tuple(sorted(t for f in folders for t in f.iterdir() if t.is_file() and licenses.is_text(t.name)))
        if texts:
            sources.append(licenses.LicenseSource(licenses.component_name(Path(given).name.removesuffix(".zip")),
                                                  texts, None, given, dlls))
    entries, records = licenses.place_licenses(sources, dest)
    # each text named by its input and member, never the unpack folder it was read from (gone after the run)
    named = [dataclasses.replace(e, origin=origins.origin(inputs, e.origin)) for e in entries]
    return files + named, tuple(records)


def _manifest(req: RepairRequest, p: assemble.WinPlan, files: list[manifest.FileEntry],
              licensed: tuple[manifest.LicenseRecord, ...] = ()) -> manifest.Manifest:
    first = next(x for x in p.parts if x.base is not None)
    backends = sorted({b for c in p.carried if (b := assemble.module_backend(c.name))}, key=lambda b: (b != "cpu", b))
    sizes: dict[str, int] = {}
    for f in files:
        sizes[f.role] = sizes.get(f.role, 0) + f.size
    inputs = tuple(manifest.InputRecord(x.input.given, x.input.kind, x.input.sha256, None, x.build,
                                        assemble.describe_base(x), tuple(p.contributed.get(x.input.given, ())))
                   for x in p.parts)
    return repaired_manifest(
        req, inputs, first=first.input.given, version=None, build=first.build, backends=tuple(backends),
        executables=tuple(c.name for c in p.carried if c.name.lower().endswith(".exe")),
        files=tuple(files), system_libs=tuple(manifest.SystemLib(h.name, f"{h.rule.kind}: {h.rule.reason}", h.needed_by)
                                              for h in p.host),
        size_by_role=sizes,
        loader=manifest.LoaderRecord((), req.accept_loader_risk) if req.accept_loader_risk else None,
        platform=PLATFORM, licenses=licensed)


def place(plan: Plan, req: RepairRequest, staged: Path) -> manifest.Manifest:
    """Copy the DLLs and executables as they are (Windows has no RPATH to set), add the licence texts."""
    p, inputs = plan.carry, plan.inputs
    ui.step(f"repair into {staged.name} (Windows, {len(p.carried)} files)")
    files, licensed = _licensed(p, inputs, staged, _place(p, inputs, staged))
    licensed = tuple(dataclasses.replace(r, source=origins.named(inputs, r.source) or r.source) for r in licensed)
    return _manifest(req, p, files, licensed)


def verify(staged: Path, req: RepairRequest) -> Report:
    return verify_windows(staged, accepted=req.accept_loader_risk)
