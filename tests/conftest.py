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


SHA = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


@pytest.fixture(scope="session")
def llama_tree() -> Path:
    """The verified llama.cpp tree at the recipes' pin, fetched once into the test cache
    (from the PyPI sdist mirror when GitHub is unreachable). Read-only for tests."""
    from builder.source import fetch as source
    from builder.config.recipe import load_recipe

    old = os.environ.get("ASSEMBLE_CACHE")
    os.environ["ASSEMBLE_CACHE"] = str(TEST_CACHE / "cache")
    try:
        return source.pinned_tree(load_recipe("cpu")).path
    finally:
        if old is None:
            os.environ.pop("ASSEMBLE_CACHE")
        else:
            os.environ["ASSEMBLE_CACHE"] = old


@pytest.fixture(scope="session")
def cpu_runtime(tmp_path_factory) -> Path:
    """The cpu recipe built once per session (the build tree is reused from the shared cache).
    Tests must copy it (shutil.copytree(..., symlinks=True)) before changing anything."""
    out = tmp_path_factory.mktemp("cpu") / "runtime-cpu"
    assemble("build", "--recipe", "cpu", "--out", str(out), check=True)
    return out


@pytest.fixture(scope="session")
def vulkan_runtime(tmp_path_factory) -> Path:
    """The vulkan recipe, verified on Mesa's lavapipe (ggml skips CPU Vulkan devices unless told)."""
    out = tmp_path_factory.mktemp("vulkan") / "runtime-vulkan"
    assemble("build", "--recipe", "vulkan", "--out", str(out), "--check-env", "GGML_VK_VISIBLE_DEVICES=0",
             check=True)
    return out
