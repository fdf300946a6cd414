"""Shared fixtures and the suite's tiers. Real builds share one cache per machine so the suite
builds each runtime once (ccache makes the second recipe cheap).

Tiers by folder (tests/support/tiers.py): tests/unit/ is quick (no compile, no download);
everything under tests/integration/ and tests/e2e/ is marked `slow`, so `pytest -m "not slow"`
is the quick first run. A fixture that compiles llama.cpp or downloads says so (@compiles,
@downloads); a quick-tier test that reaches one fails the collection. The whole run fails when it
takes longer than its budget (ASSEMBLE_TEST_BUDGET_MIN, 45 minutes), so growth is seen when it
happens."""

from __future__ import annotations

import compileall
import os
import py_compile
import time
from pathlib import Path

import pytest

from tests.support import prefetch, tiers
from tests.support.common import REPO, SHA, TEST_CACHE, assemble  # noqa: F401  (fixtures below use them)
from tests.support.tiers import compiles, downloads

tiers.configure(Path(__file__).parent)
TEST_GIT_IDENTITY = {"GIT_AUTHOR_NAME": "assemble tests", "GIT_AUTHOR_EMAIL": "tests@assemble.invalid",
                     "GIT_COMMITTER_NAME": "assemble tests", "GIT_COMMITTER_EMAIL": "tests@assemble.invalid"}
BUDGET_MIN = 45.0        # the whole suite, cold, on the 2-core CI machine (.ci/run); the env var overrides it
_STARTED = pytest.StashKey[float]()
_OVER = pytest.StashKey[str]()
def _closure(item) -> list:
    """The fixture functions a test will set up, its own and those they request, all the way down."""
    info = getattr(item, "_fixtureinfo", None)
    return [d.func for defs in (info.name2fixturedefs.values() if info else ()) for d in defs]


@pytest.hookimpl(tryfirst=True)          # before -m deselects: a mis-tiered test fails the quick run too
def pytest_collection_modifyitems(config, items):
    wrong = []
    for item in items:
        try:
            slow = tiers.tier(item.path) == "slow"
        except tiers.MisTiered as exc:
            wrong.append(str(exc))
            continue
        if slow:
            item.add_marker(pytest.mark.slow)
        elif item.get_closest_marker("slow"):
            wrong.append(f"{item.nodeid}: marked slow in tests/unit/ -- fix: move it to tests/integration/<area>/ "
                         "(the folder is the tier)")
    wrong += tiers.misplaced((item.path, item.nodeid, _closure(item)) for item in items)
    if wrong:
        raise pytest.UsageError("mis-tiered tests (tests/support/tiers.py):\n" + "\n".join(dict.fromkeys(wrong)))


def pytest_collection_finish(session):
    """Start the downloads the selected tests will need, while the first build compiles."""
    if not session.config.option.collectonly:
        prefetch.start(w for item in session.items for w in map(tiers.warmup, _closure(item)) if w)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    tiers.running(item.path)             # a heavy helper called from a quick-tier test refuses


def pytest_configure(config):
    """Compile the checkout's modules to bytecode once, before the workers start: hundreds of tests run
    the CLI in a new Python, and where PYTHONDONTWRITEBYTECODE is set (this environment sets it) each one
    compiled ~150 modules from source again (0.35 s of CPU each). Python reads the .pyc files even then.

    Every test that commits or tags (git commit, git tag -a) gets the suite's own identity, in this
    process and every process it starts: a machine with an empty HOME has none ("Please tell me who
    you are"), and a developer's own identity must not end up in a test's history either."""
    os.environ.update(TEST_GIT_IDENTITY)
    if not hasattr(config, "workerinput"):
        for folder in ("builder", "scripts", "tests"):
            compileall.compile_dir(REPO / folder, quiet=2, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)


def pytest_sessionstart(session):
    """The budget's clock: from ASSEMBLE_TEST_STARTED (seconds since the epoch) when scripts/test runs
    the whole suite as two pytest runs, else from this run's start."""
    started = os.environ.get("ASSEMBLE_TEST_STARTED")
    session.config.stash[_STARTED] = float(started) if started else time.time()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):
        return                           # an xdist worker: the controller judges the whole run
    budget = float(os.environ.get("ASSEMBLE_TEST_BUDGET_MIN") or BUDGET_MIN)
    spent = time.time() - session.config.stash[_STARTED]
    if spent > budget * 60:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        session.config.stash[_OVER] = (
            f"suite budget: the suite took {spent / 60:.1f} min, over its {budget:g} min budget -- fix: find what "
            "grew (--durations=30, the cost comments on the fixtures) and make it cheaper")


def pytest_unconfigure(config):
    if config.stash.get(_OVER, None):    # the last line of the run, after pytest's own summary
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter:
            reporter.write_line(config.stash[_OVER], red=True, bold=True)
        else:
            print(config.stash[_OVER])


def pytest_terminal_summary(terminalreporter):
    if prefetch.report():
        terminalreporter.write_line("prefetched in the background: " + ", ".join(prefetch.report()))


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


# Costs on the 2-core development machine (AMD EPYC, Debian 12), "cold" with an empty test cache and
# ccache, "warm" with both full; measured ones say when, the rest are estimates from the sizes.
# llama_tree: cold = the 77 MB llama-cpp-python sdist (sha256-checked, unpacked; < 1 min, estimated),
# warm < 1 s (measured 2026-12-01).
@pytest.fixture(scope="session")
@downloads
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


# cpu_runtime: cold, ninja 621 s wall (1,238 s CPU, 682 s of it the 14 CPU levels; the downloads prefetched
# beside it), the suite's first build and its largest cold cost; warm 2.4 s wall, 1.7 s CPU (measured
# 2026-12-01, load 12: the build folder is reused). Cold measured 2026-12-05 in a cold .ci/run on a 2-core
# machine, nothing else running (empty test cache and ccache; .ninja_log; docs/lab/2026-12-05-cold-suite.md).
@pytest.fixture(scope="session")
@compiles
def cpu_runtime(tmp_path_factory) -> Path:
    """The cpu recipe built once per session (the build tree is reused from the shared cache).
    Tests must copy it (shutil.copytree(..., symlinks=True)) before changing anything."""
    out = tmp_path_factory.mktemp("cpu") / "runtime-cpu"
    assemble("build", "--recipe", "cpu", "--out", str(out), check=True)
    return out


# vulkan_runtime: cold after cpu_runtime, ninja 145 s wall (122 s CPU of new objects, ggml-vulkan and
# test-backend-ops; 102 s CPU of shader generation, 18 s the vulkan-shaders-gen tool; CPU and libllama objects
# are ccache hits; measured 2026-12-05, cold run as above), warm 3.6 s wall, 2.9 s CPU (measured 2026-12-01).
# [tests] backend_ops (on for vulkan) adds tests/test-backend-ops.cpp, one C++ file (48 s CPU cold) and a
# 0.2 s link: in a fresh build folder with every other object a ccache hit it was the last job, 85 s wall,
# and ninja ended at 416 s instead of 336 s (+81 s, load 5-8; the whole build 7m04s); a ccache hit after
# (measured 2026-12-02, .ninja_log of the build).
@pytest.fixture(scope="session")
@compiles
def vulkan_runtime(tmp_path_factory) -> Path:
    """The vulkan recipe, verified on Mesa's lavapipe (ggml skips CPU Vulkan devices unless told)."""
    out = tmp_path_factory.mktemp("vulkan") / "runtime-vulkan"
    assemble("build", "--recipe", "vulkan", "--out", str(out), "--check-env", "GGML_VK_VISIBLE_DEVICES=0",
             check=True)
    return out


# unpatched_runtime: cold after vulkan_runtime, ninja 77 s wall (most of it the shaders generated again for a
# new build folder, 101 s CPU; every compile a ccache hit but the loader's file; measured 2026-12-05, cold
# run as above), warm: its folder reused, 24.9 s wall with cpu_runtime's
# setup under load 15 (measured 2026-12-01; test_repair's 3 tests and the e2e loader test pass).
# It replaced two builds: test_repair's upstream-vulkan and test_e2e_cpu's cpu-unpatched (14 levels).
@pytest.fixture(scope="session")
@compiles
def unpatched_runtime(tmp_path_factory) -> Path:
    """The vulkan recipe as upstream's release is built: the loader patch off (the hole it closes
    stays open), RUNPATH $ORIGIN on everything in bin/. One build for the repair tests (its build
    folder is their upstream input) and the e2e test that shows the hole; its compiles are the vulkan
    build's, from ccache, but for the loader's one file."""
    import re
    work = tmp_path_factory.mktemp("unpatched")
    recipe = (REPO / "recipes" / "vulkan.toml").read_text()
    recipe = re.sub(r'(?m)^name = "vulkan"', 'name = "upstream-vulkan"', recipe)
    recipe = re.sub(r"(?m)^aliases = .*\n", "", recipe)
    recipe += ('\n[patches.disable]\n"backend-loader-no-cwd" = "upstream\'s release loader, as shipped"\n'
               if "[patches.disable]" not in recipe else "")
    recipe = recipe.replace("[cmake.defines]\n", '[cmake.defines]\nCMAKE_INSTALL_RPATH = "$ORIGIN"\n'
                            'CMAKE_BUILD_WITH_INSTALL_RPATH = "ON"\n') if "[cmake.defines]" in recipe else (
        recipe + '\n[cmake.defines]\nCMAKE_INSTALL_RPATH = "$ORIGIN"\nCMAKE_BUILD_WITH_INSTALL_RPATH = "ON"\n')
    (work / "upstream-vulkan.toml").write_text(recipe)
    out = work / "runtime-upstream-vulkan"
    assemble("build", "--recipe", str(work / "upstream-vulkan.toml"), "--out", str(out), "--no-verify", "-q",
             check=True)
    return out


def make_sid_chroot() -> Path:
    """The Debian sid chroot with ROCm 6.4 (scripts/rocm-sid-chroot.sh), made once per machine and cached."""
    import shutil
    import subprocess
    from scripts.support.vendorlibs import _locked
    assert shutil.which("debootstrap"), "debootstrap missing: scripts/ci-setup.sh installs it"
    chroot = TEST_CACHE / "sid-rocm"
    with _locked("sid-rocm"):            # the background prefetch and the fixture: one debootstrap
        proc = subprocess.run([str(REPO / "scripts" / "rocm-sid-chroot.sh"), str(chroot)], capture_output=True,
                              text=True, timeout=3000)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == str(chroot)
    return chroot


def _warm_sid_chroot() -> None:
    if os.geteuid() == 0:
        make_sid_chroot()


# sid_chroot: cold about 3 min and 6.6 GB (debootstrap + ROCm 6.4 + mingw-w64, README), prefetched in
# the background while cpu_runtime compiles; warm < 1 s (the script's stamp matches).
@pytest.fixture(scope="session")
@downloads(warm=_warm_sid_chroot)
def sid_chroot() -> Path:
    """Where runtimes needing sid's glibc run, and the mingw cross-builds compile
    (integration/test_rocm_chroot.py, test_repair_debian.py, test_windows.py)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (debootstrap, chroot, bind mounts); CI runs as root")
    return make_sid_chroot()
