"""Shared fixtures. Real builds share one cache per machine so the suite builds
each runtime once (ccache makes the second recipe cheap)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TEST_CACHE = Path(os.environ.get("ASSEMBLE_TEST_CACHE", Path.home() / ".cache" / "assemble-tests"))


def assemble(*args: str, cwd: Path | None = None, env: dict | None = None, check: bool = False,
             timeout: float = 3600) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would."""
    full_env = dict(os.environ)
    full_env.setdefault("ASSEMBLE_CACHE", str(TEST_CACHE / "cache"))
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "builder", *args], cwd=cwd or REPO, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"assemble {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ASSEMBLE_CACHE", str(cache))
    return cache
