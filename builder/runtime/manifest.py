"""manifest.json: what a runtime is made of, and proof that it is still intact.

Paths inside are relative to the runtime folder, so a moved runtime keeps a
valid manifest.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from builder import __version__
from builder.digest import sha256_file

NAME = "manifest.json"
SCHEMA = 1



def write(runtime: Path, data: dict) -> Path:
    body = {"schema": SCHEMA, "created_by": f"assemble {__version__}", **data}
    path = runtime / NAME
    tmp = path.with_name(NAME + ".tmp")
    tmp.write_text(json.dumps(body, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


def read(runtime: Path) -> dict:
    return json.loads((runtime / NAME).read_text())


def check_files(runtime: Path, manifest: dict) -> list[str]:
    """Every problem with the files against the manifest: missing, changed, extra, wrong links."""
    problems = []
    listed = set()
    for rec in manifest.get("files", []):
        rel = rec["path"]
        listed.add(rel)
        p = runtime / rel
        if not p.is_file() or p.is_symlink():
            problems.append(f"{rel}: missing")
            continue
        if p.stat().st_size != rec["size"] or sha256_file(p) != rec["sha256"]:
            problems.append(f"{rel}: content differs from the manifest (sha256)")
    for link in manifest.get("symlinks", []):
        rel = link["path"]
        listed.add(rel)
        p = runtime / rel
        if not p.is_symlink():
            problems.append(f"{rel}: symlink missing")
        elif os.readlink(p) != link["target"]:
            problems.append(f"{rel}: points to {os.readlink(p)}, expected {link['target']}")
    for p in sorted(runtime.rglob("*")):
        rel = p.relative_to(runtime).as_posix()
        if rel == NAME or rel in listed or (p.is_dir() and not p.is_symlink()):
            continue
        problems.append(f"{rel}: not in the manifest (added after the build?)")
    return problems


def file_mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))
