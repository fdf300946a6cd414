"""Raw manifest.json access for tests that tamper with a runtime on purpose (the product reads it
only through builder.runtime.manifest.Manifest)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from builder.digest import sha256_file
from builder.runtime.manifest import NAME, SCHEMA, Manifest, check_files


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


def reseal(runtime: Path, changed: tuple[str, ...] = (), origin: dict[str, str] | None = None) -> None:
    """Rewrite the manifest's files and links from the folder, so that only the planted fault is left to find.

    Files still listed keep their record unless named in `changed`; new or changed files are hashed.
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
                rec = {"path": rel, "role": (rec or {}).get("role", "vendor"),
                       "origin": (origin or {}).get(rel, (rec or {}).get("origin", str(p))),
                       "sha256": sha256_file(p), "size": p.stat().st_size, "mode": p.stat().st_mode & 0o777}
            files.append(rec)
    data["files"], data["symlinks"] = files, links
    listed = {f["path"] for f in files}
    for rec in data.get("licenses", []):           # a file removed by the fault is no longer covered
        rec["covers"] = [p for p in rec["covers"] if p in listed]
        rec["texts"] = [p for p in rec["texts"] if p in listed]
    for key in ("schema", "created_by"):
        data.pop(key, None)
    write_raw(runtime, data)
