"""Raw manifest.json access for tests that tamper with a runtime on purpose (the product reads it
only through builder.runtime.manifest.Manifest)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

from builder.check.facts import layout_role
from builder.digest import sha256_file
from builder.errors import AssembleError
from builder.runtime.manifest import NAME, ROLES, SCHEMA, Manifest, ManifestInvalid, check_files


def read_raw(runtime: Path) -> dict:
    return json.loads((Path(runtime) / NAME).read_text())


def write_raw(runtime: Path, data: dict) -> Path:
    body = {"schema": SCHEMA, "created_by": "assemble test", **data}
    path = Path(runtime) / NAME
    tmp = path.with_name(NAME + ".tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def whole(runtime: Path) -> bool:
    """The folder is exactly what its (valid) manifest says."""
    try:
        return check_files(runtime, Manifest.load(runtime)) == []
    except Exception:  # noqa: BLE001 -- any failure to load or check is "not exactly"
        return False


def copy_runtime(src: Path, dst: Path, link: bool = False) -> Path:
    """A private copy to plant faults in; hard links for the ROCm data (never modified in place)."""
    shutil.copytree(src, dst, symlinks=True, copy_function=os.link if link else shutil.copy2)
    return dst


def reseal(runtime: Path, changed: tuple[str, ...] = (), origin: dict[str, str] | None = None,
           facts: bool = True) -> None:
    """Rewrite the manifest's files and links from the folder, so that only the planted fault is left to find.

    Files still listed keep their record unless named in `changed`; new or changed files are hashed and
    get the role the layout gives their place (what build would have recorded); size_by_role follows, and
    (facts=True) what the manifest says the files need: refresh_facts, as the bundler would record it.
    """
    data = read_raw(runtime)
    old = {f["path"]: f for f in data["files"]}
    files, links = [], []
    for p in sorted(runtime.rglob("*")):
        rel = p.relative_to(runtime).as_posix()
        if rel == NAME:
            continue
        if p.is_symlink():
            links.append({"path": rel, "target": os.readlink(p)})
        elif p.is_file():
            rec = old.get(rel)
            if rec is None or rel in changed:
                rec = {"path": rel, "role": (rec or {}).get("role", layout_role(rel) or "vendor"),
                       "origin": (origin or {}).get(rel, (rec or {}).get("origin", str(p))),
                       "sha256": sha256_file(p), "size": p.stat().st_size, "mode": p.stat().st_mode & 0o777}
            files.append(rec)
    data["files"], data["symlinks"] = files, links
    if data.get("size_by_role"):                   # a summary of the records above: kept consistent with them
        data["size_by_role"] = {r: sum(f["size"] for f in files if f["role"] == r) for r in ROLES}
    listed = {f["path"] for f in files}
    for rec in data.get("licenses", []):           # a file removed by the fault is no longer covered
        rec["covers"] = [p for p in rec["covers"] if p in listed]
        rec["texts"] = [p for p in rec["texts"] if p in listed]
    for key in ("schema", "created_by"):
        data.pop(key, None)
    write_raw(runtime, data)
    if facts:
        refresh_facts(runtime)


def refresh_facts(runtime: Path) -> None:
    """Rewrite what manifest.json says the files need and carry (glibc_min, glibcxx_min,
    glibc_floor.needed_by, system_libs, gpu_runtimes, size_by_role) from the files, with the functions
    verify re-derives them with: a hand-made runtime's manifest then tells the truth about its files,
    as build's would."""
    from builder.check import libfacts
    from builder.runtime.elf import folder_need
    from builder.runtime.gpuruntime import describe

    try:
        m = Manifest.load(runtime)
    except ManifestInvalid:
        return                        # a planted fault the reader refuses: nothing to agree with
    data = read_raw(runtime)
    files = libfacts.read(runtime, m)
    glibc, glibcxx = libfacts.needs(files)
    data["glibc_min"] = glibc.version if glibc else None
    data["glibcxx_min"] = glibcxx.version if glibcxx else None
    if data.get("glibc_floor"):
        try:
            need = folder_need(runtime)
        except AssembleError:         # a damaged file (the fault planted): the floor's record stays
            need = None
        data["glibc_floor"]["needed_by"] = need.file if need else data["glibc_floor"].get("needed_by")
    data["system_libs"] = [{"soname": s.soname, "reason": s.reason, "needed_by": list(s.needed_by)}
                           for s in libfacts.system_libs(files)]
    data["gpu_runtimes"] = json.loads(json.dumps(dataclasses.asdict(
        describe(runtime, [f.path for f in m.files], m.toolkit_versions()))))
    if data.get("size_by_role"):
        data["size_by_role"] = {r: sum(f.size for f in m.files if f.role == r) for r in ROLES}
    for key in ("schema", "created_by"):
        data.pop(key, None)
    write_raw(runtime, data)
