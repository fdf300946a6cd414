"""Raw manifest.json access for tests that tamper with a runtime on purpose (the product reads it
only through builder.runtime.manifest.Manifest)."""

from __future__ import annotations

import json
import os
from pathlib import Path

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
    except Exception:
        return False
