"""The workflow linters of the field, from PyPI (the test extra), run offline: zizmor (security, its
default persona) and check-jsonschema's bundled GitHub workflow schema."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path


def _tool(name: str) -> str:
    found = Path(sys.executable).parent / name
    path = str(found) if found.is_file() else shutil.which(name)
    assert path, f"{name} is not installed: pip install -e '.[test]'"
    return path


def zizmor(*paths: Path, persona: str = "regular") -> list[dict]:
    """Every finding zizmor reports at that persona (regular: its default; auditor: everything), offline."""
    proc = subprocess.run([_tool("zizmor"), "--offline", "--no-progress", "--format=json", f"--persona={persona}",
                           *map(str, paths)],
                          capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip().startswith("["), proc.stderr      # exit 0 or the findings' code; JSON either way
    return json.loads(proc.stdout)


def schema(*paths: Path) -> subprocess.CompletedProcess:
    """check-jsonschema against its bundled copy of SchemaStore's github-workflow schema (no network)."""
    return subprocess.run([_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows",
                           *map(str, paths)], capture_output=True, text=True, timeout=300)
