"""The suite's tiers and budget (tests/conftest.py, tests/support/tiers.py), run on a small tests/
tree beside the real conftest: a quick-tier test that reaches something heavy fails loudly, the
slow folders are marked slow with no list to update, and a run over its budget fails in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import tiers
from tests.support.common import REPO


def _tree(root: Path, files: dict[str, str]) -> Path:
    tests = root / "tests"
    tests.mkdir()
    shutil.copy(REPO / "tests" / "conftest.py", tests / "conftest.py")      # the real one
    for rel, text in files.items():
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_text(text)
    return tests


def _pytest(tests: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # PYTHONPATH: `tests.support` is the checkout's; rootdir and conftest are the small tree's
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                           "--rootdir", str(tests.parent), "-c", os.devnull, *args],
                          cwd=tests.parent, capture_output=True, text=True, timeout=120,
                          env={**{k: v for k, v in os.environ.items() if k != "ASSEMBLE_TEST_STARTED"},
                               "PYTHONPATH": str(REPO), **(env or {})})


def test_a_quick_tier_test_reaching_a_heavy_fixture_fails_the_collection(tmp_path):
    tests = _tree(tmp_path, {
        "unit/test_direct.py": "def test_x(cpu_runtime):\n    pass\n",
        "unit/test_indirect.py": ("import pytest\n\n@pytest.fixture\ndef copy(llama_tree):\n    return llama_tree\n\n"
                                  "def test_y(copy):\n    pass\n"),
        "unit/test_marked.py": "import pytest\n\n@pytest.mark.slow\ndef test_z():\n    pass\n",
        "unit/test_fine.py": "def test_ok(tmp_path):\n    pass\n",
        "stray/test_where.py": "def test_w():\n    pass\n",
    })
    proc = _pytest(tests, "--collect-only", "-m", "not slow")         # the quick run fails too
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    err = proc.stderr
    assert "unit/test_direct.py::test_x: uses a fixture that compiles llama.cpp (cpu_runtime)" in err
    assert "unit/test_indirect.py::test_y: uses a fixture that downloads (llama_tree)" in err   # through `copy`
    assert "unit/test_marked.py::test_z: marked slow in tests/unit/" in err
    assert "stray/test_where.py: a test outside tests/unit/" in err
    assert "test_fine" not in err and "Traceback" not in err


def test_the_slow_folders_are_slow_whatever_their_fixtures(tmp_path):
    """A new heavy fixture (a booted guest, say) under tests/integration/ needs no list: the folder decides."""
    tests = _tree(tmp_path, {
        "integration/test_guest.py": ("import pytest\n\n@pytest.fixture(scope='session')\ndef booted_guest():\n"
                                      "    return 'guest'\n\ndef test_boot(booted_guest):\n    pass\n"),
        "e2e/test_serve.py": "def test_serve():\n    pass\n",
        "unit/test_fine.py": "def test_ok():\n    pass\n",
    })
    quick = _pytest(tests, "-m", "not slow")
    assert quick.returncode == 0, quick.stdout + quick.stderr
    assert "1 passed, 2 deselected" in quick.stdout and "budget" not in quick.stdout
    slow = _pytest(tests, "--collect-only", "-m", "slow")
    assert "test_boot" in slow.stdout and "test_serve" in slow.stdout and "test_ok" not in slow.stdout


def test_a_heavy_helper_called_from_the_quick_tier_refuses_before_it_starts(tmp_path):
    """fetch_deb would download 22 kB; the guard stops it first (ASSEMBLE_TEST_OFFLINE: no network either way)."""
    tests = _tree(tmp_path, {"unit/test_helper.py": (
        "from scripts.support.vendorlibs import SID, fetch_deb\n\n"
        "def test_fetch():\n    fetch_deb(SID['libnuma1'])\n")})
    proc = _pytest(tests, env={"ASSEMBLE_TEST_OFFLINE": "1", "ASSEMBLE_TEST_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED
    assert "MisTiered" in proc.stdout and "a quick-tier test downloads (fetch_deb)" in proc.stdout, proc.stdout
    assert not (tmp_path / "cache" / "debs").exists()


def test_a_run_over_its_budget_fails_in_one_line(tmp_path):
    """Within the budget the run passes (test_the_slow_folders_are_slow_whatever_their_fixtures)."""
    tests = _tree(tmp_path, {"unit/test_fine.py": "def test_ok():\n    pass\n"})
    over = _pytest(tests, env={"ASSEMBLE_TEST_BUDGET_MIN": "0.00001"})
    assert over.returncode == pytest.ExitCode.TESTS_FAILED, over.stdout + over.stderr
    last = over.stdout.strip().splitlines()[-1]
    assert last.startswith("suite budget: the suite took ") and "over its 1e-05 min budget -- fix: " in last


def test_the_budget_counts_from_the_whole_suites_start(tmp_path):
    """scripts/test runs the whole suite as two pytest runs: the second is judged from the first's start."""
    tests = _tree(tmp_path, {"unit/test_fine.py": "def test_ok():\n    pass\n"})
    hour_ago = str(time.time() - 3600)
    late = _pytest(tests, env={"ASSEMBLE_TEST_STARTED": hour_ago, "ASSEMBLE_TEST_BUDGET_MIN": "45"})
    assert late.returncode == pytest.ExitCode.TESTS_FAILED, late.stdout + late.stderr
    assert late.stdout.strip().splitlines()[-1].startswith("suite budget: the suite took 60.0 min, over its 45 min")
    in_time = _pytest(tests, env={"ASSEMBLE_TEST_STARTED": hour_ago, "ASSEMBLE_TEST_BUDGET_MIN": "90"})
    assert in_time.returncode == 0 and "budget" not in in_time.stdout, in_time.stdout


def test_tiers_by_path():
    root = REPO / "tests"
    assert tiers.tier(root / "unit" / "check" / "test_x.py") == "quick"
    assert tiers.tier(root / "integration" / "test_deploy_systemd.py") == "slow"
    assert tiers.tier(root / "e2e" / "test_x.py") == "slow"
    with pytest.raises(tiers.MisTiered, match="fix: move it to tests/unit/"):
        tiers.tier(root / "test_top.py")
