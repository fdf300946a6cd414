"""What a command that made a runtime prints on stdout: its folder, or with --json the folder and its
manifest (stdout holds nothing else, so a script can read it)."""

from __future__ import annotations

import json
from pathlib import Path


def print_runtime(folder: Path, as_json: bool) -> None:
    if as_json:
        from builder.runtime.manifest import Manifest
        print(json.dumps({"runtime": str(folder), "manifest": json.loads(Manifest.load(folder).to_json())}, indent=2))
    else:
        print(folder)
