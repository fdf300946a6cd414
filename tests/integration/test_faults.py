"""Fault injection: a runtime folder is never left broken.

SIGKILL at random points of real `assemble build` and `assemble package` runs (the cpu
runtime from the shared cache, so each run only re-bundles and verifies), a full disk
(a small tmpfs), a read-only output folder, and concurrent builds of one output. The
swap itself is a window of microseconds, so every step of it is also interrupted
deterministically below."""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.flows import publish
from builder.check.report import PASS
from builder.release import attested, package
from tests.support.common import REPO, assemble
from builder.digest import sha256_file
from tests.support.manifests import whole
from tests.unit.test_swap_faults import _env, _siblings, _target, ctrl_c_raises  # noqa: F401  (the autouse fixture too)

SEED = 20251129
KILLS = 20


def _ctrl_c_as_at_a_terminal() -> None:
    # A run started in the background (CI, nohup) inherits SIGINT ignored and exec keeps it so;
    # the CLI under test must get Ctrl-C as it would at a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(*args: str, log: Path, env: dict | None = None) -> subprocess.Popen:
    """The real CLI in its own process group, so a kill takes its children (patchelf, checks) too."""
    with open(log, "w") as f:
        return subprocess.Popen([sys.executable, "-m", "builder", *args], cwd=REPO, env={**_env(), **(env or {})},
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_ctrl_c_as_at_a_terminal)  # noqa: PLW1509 -- the test runs no threads


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    return errors[0]


# --- SIGKILL at random points -----------------------------------------------------------

def test_sigkill_during_build_leaves_a_whole_runtime(cpu_runtime, tmp_path):
    out = tmp_path / "runtime-cpu"
    build = ("build", "--recipe", "cpu", "--out", str(out))
    start = time.monotonic()
    assemble(*build, check=True)
    duration = time.monotonic() - start
    rng = random.Random(SEED)
    phases, pids = [], []
    tmp = tmp_path / "tmpdir"   # the killed runs' TMPDIR: a build keeps its temporary folders in the cache
    tmp.mkdir()
    for trial in range(KILLS):
        log = tmp_path / f"kill-{trial}.log"
        proc = _start(*build, log=log, env={"TMPDIR": str(tmp)})
        pids.append(proc.pid)
        time.sleep(rng.uniform(0.1, duration * 1.05))
        _kill(proc)
        said = log.read_text()
        # the checks print their table at the end: a kill during them reads as "bundle"
        phases.append("swapped" if "moved aside" in said else "bundle" if "bundle into" in said else "plan")
        assert whole(out), f"trial {trial} ({phases[-1]}): {out} is not a whole runtime\n{said[-2000:]}"
        for old in _siblings(out, publish.OLD_TAG):
            assert whole(old), f"trial {trial}: a moved-aside runtime is damaged: {old}"
        if trial % 5 == 4:   # the next run recovers whatever the kills left and succeeds
            proc = assemble(*build)
            assert proc.returncode == 0, proc.stderr
            assert whole(out) and not _siblings(out, publish.STAGING_TAG) and not _siblings(out, publish.DELETING_TAG)
    print("phases reached before each kill:", phases)
    # the kills landed across the run, not only in its start-up
    assert sum(p != "plan" for p in phases) >= KILLS // 3, phases
    assert assemble(*build).returncode == 0
    assert not list(tmp.iterdir()), "a killed build left temporary folders in TMPDIR"
    scratch = Path(_env()["ASSEMBLE_CACHE"]) / "tmp"
    left = [p.name for p in scratch.glob("*") if any(f"-{pid}-" in p.name for pid in pids)] if scratch.is_dir() else []
    assert left == [], f"scratch folders of killed builds were not removed: {left}"
    # nothing but the runtime and what the runs recorded is beside it: no lock, no journal
    beside = {p.name for p in tmp_path.iterdir()} - {"tmpdir", "runtime-cpu"}
    assert all(n.endswith(".log") or n.startswith(f"runtime-cpu{publish.OLD_TAG}") for n in beside), beside


def _sums_hold(dist: Path, released: attested.Released) -> None:
    """Every file SHA256SUMS lists is beside it with that digest, the provenance and archive among them."""
    sums = attested.load_sums(dist / package.SUMS)
    assert all((dist / name).is_file() for name in sums), sorted(sums)
    check = attested.sums_check(dist / package.SUMS, sums, released)
    assert check.status == PASS, check.reason


def test_sigkill_during_package_leaves_old_or_new_files(cpu_runtime, tmp_path):
    ref = tmp_path / "ref"
    start = time.monotonic()
    expected = package.package(cpu_runtime, ref)
    duration = time.monotonic() - start
    released = attested.load_provenance(expected.provenance)
    dist = tmp_path / "dist"
    rng = random.Random(SEED + 1)
    killed_running = 0
    for trial in range(6):
        proc = _start("package", str(cpu_runtime), "--out-dir", str(dist), log=tmp_path / f"pkg-{trial}.log")
        time.sleep(rng.uniform(0.2, duration + 0.8))
        killed_running += proc.poll() is None
        _kill(proc)
        # whatever SHA256SUMS lists is complete and correct; no archive is half-written under its name
        if (dist / package.SUMS).exists():
            _sums_hold(dist, released)
        archive = dist / expected.archive.name
        if archive.exists():
            assert archive.read_bytes() == expected.archive.read_bytes()
    assert killed_running, "every kill came after package had finished: nothing was interrupted"
    assert assemble("package", str(cpu_runtime), "--out-dir", str(dist)).returncode == 0
    assert (dist / expected.archive.name).read_bytes() == expected.archive.read_bytes()
    _sums_hold(dist, released)
    assert not list(dist.glob(f".*{package.PART_TAG}*"))
    assert sorted(p.name for p in dist.iterdir()) == sorted([expected.archive.name, expected.sbom.name,
                                                             expected.provenance.name, package.SUMS])


# --- every step of the swap, interrupted ----------------------------------------------------


# --- Ctrl-C and errors in the window between the exchange and the rename -------------------------


def test_ctrl_c_during_a_real_build_says_what_is_true(cpu_runtime, tmp_path):
    out = tmp_path / "runtime-cpu"
    build = ("build", "--recipe", "cpu", "--out", str(out))
    start = time.monotonic()
    assemble(*build, check=True)
    duration = time.monotonic() - start
    rng = random.Random(SEED + 2)
    said = []
    for trial in range(8):
        before = (out.stat().st_ino, sha256_file(out / "manifest.json"))
        log = tmp_path / f"int-{trial}.log"
        proc = _start(*build, log=log)
        started = time.monotonic()
        # from the build's first line on (a Ctrl-C while Python imports is not this test's matter)
        while "==> recipe" not in log.read_text() and proc.poll() is None:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, max(0.1, duration - (time.monotonic() - started))))
        os.killpg(proc.pid, signal.SIGINT)   # what a terminal's Ctrl-C does
        code = proc.wait(timeout=300)
        text = log.read_text()
        assert "Traceback" not in text, text
        errors = [line for line in text.splitlines() if line.startswith("error: ")]
        # A Ctrl-C after the last word ("runtime ready") can land while Python shuts down, when the
        # default action is back: the process dies of SIGINT, and what it said is still true.
        finished = "==> runtime ready" in text
        assert code == 0 or len(errors) == 1 or (finished and code == -signal.SIGINT), text
        claim = errors[0] if errors else "finished"
        said.append((code, claim.split(" -- ")[0].split(": ", 2)[-1][:60]))
        now = (out.stat().st_ino, sha256_file(out / "manifest.json"))
        assert whole(out), text
        if "untouched" in claim or "not touched" in claim or "before the swap" in claim:
            assert now == before, claim
        if "after the swap" in claim or finished:
            assert now[0] != before[0], claim
            if "previous runtime is at " in claim:
                assert whole(Path(claim.split("previous runtime is at ")[1].split(" -- ")[0].split(";")[0]))
        for old in _siblings(out, publish.OLD_TAG):
            assert whole(old)
    print("what each interrupted run said:", said)
    assert any(code == 130 for code, _ in said), said   # the Ctrl-C reached the build at least once
    assert assemble(*build).returncode == 0 and not _siblings(out, publish.STAGING_TAG)


# --- full disk, read-only output ---------------------------------------------------------------

def _mount_tmpfs(where: Path, size_kib: int) -> None:
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {proc.stderr.strip()}")


@pytest.fixture
def tmpfs(tmp_path):
    mounts = []

    def make(size_kib: int) -> Path:
        where = tmp_path / f"mnt{len(mounts)}"
        _mount_tmpfs(where, size_kib)
        mounts.append(where)
        return where
    yield make
    for m in mounts:
        subprocess.run(["umount", "-l", str(m)], capture_output=True)


def _size_kib(runtime: Path) -> int:
    return sum(p.lstat().st_size for p in runtime.rglob("*")) // 1024 + 1


def test_full_disk_fails_clearly_and_keeps_the_previous_runtime(cpu_runtime, tmpfs):
    size = _size_kib(cpu_runtime)
    disk = tmpfs(size * 3 // 2 + 256)   # room for one runtime, not two
    out = disk / "runtime-cpu"
    assemble("build", "--recipe", "cpu", "--out", str(out), check=True)
    before = sha256_file(out / "manifest.json")
    proc = assemble("build", "--recipe", "cpu", "--out", str(out), "-q")
    assert proc.returncode == 1, proc.stderr
    line = _one_error_line(proc.stderr)
    # "no space left" (a write failed) or bundle's "short copy ... check free disk space" (a copy fell short)
    assert "space" in line and "fix:" in line and str(disk) in line
    assert whole(out) and sha256_file(out / "manifest.json") == before
    assert not _siblings(out, publish.STAGING_TAG) and not _siblings(out, publish.OLD_TAG)
    free = shutil.disk_usage(disk).free // 1024
    assert free > size // 3, "the partial copy was not removed"
    # packaging onto the full disk fails the same way, leaving no partial archive
    filler = disk / "filler"
    filler.write_bytes(b"\0" * (max(free - 64, 0) * 1024))
    pkg = assemble("package", str(out), "--out-dir", str(disk / "dist"))
    assert pkg.returncode == 1 and "no space left" in _one_error_line(pkg.stderr)
    left = sorted(p.name for p in (disk / "dist").glob("*")) if (disk / "dist").exists() else []
    assert left == [], left   # no partial archive, no lock file


def test_read_only_output_folder_is_refused_clearly(cpu_runtime, tmpfs):
    disk = tmpfs(_size_kib(cpu_runtime) * 3 + 1024)
    out = disk / "runtime-cpu"
    assemble("build", "--recipe", "cpu", "--out", str(out), check=True)
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    with pytest.raises(OSError, match="Read-only file system"):   # as root, permission bits would not stop us: prove the mount does
        (disk / "probe").write_text("x")
    before = sha256_file(out / "manifest.json")
    proc = assemble("build", "--recipe", "cpu", "--out", str(out), "-q")
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc.stderr)
    assert "Read-only file system" in line or "read-only" in line
    assert "--out" in line
    assert whole(out) and sha256_file(out / "manifest.json") == before
    assert not _siblings(out, publish.STAGING_TAG)
    pkg = assemble("package", str(cpu_runtime), "--out-dir", str(disk / "dist"))
    assert pkg.returncode == 2 and "Read-only file system" in _one_error_line(pkg.stderr)


# --- concurrent builds ---------------------------------------------------------------------------

def test_concurrent_builds_of_one_output_never_interleave(cpu_runtime, tmp_path):
    out = tmp_path / "runtime-cpu"
    build = ("build", "--recipe", "cpu", "--out", str(out))
    procs = [_start(*build, log=tmp_path / f"c{i}.log") for i in range(2)]
    codes = [p.wait(timeout=900) for p in procs]
    logs = [(tmp_path / f"c{i}.log").read_text() for i in range(2)]
    assert codes == [0, 0], logs
    assert whole(out)
    olds = _siblings(out, publish.OLD_TAG)
    assert len(olds) == 1 and whole(olds[0])   # the first result, moved aside by the second
    assert not _siblings(out, publish.STAGING_TAG)


def test_a_held_output_makes_a_build_wait_or_refuse(cpu_runtime, tmp_path):
    out = tmp_path / "runtime-cpu"
    lock = os.open(_target(out).lock, os.O_RDWR | os.O_CREAT)   # in the cache: nothing beside the output
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        refused = assemble("build", "--recipe", "cpu", "--out", str(out), "--no-wait", "-q")
        assert refused.returncode == 2
        assert "another assemble run is writing this runtime" in _one_error_line(refused.stderr)
        waiting = _start("build", "--recipe", "cpu", "--out", str(out), log=tmp_path / "wait.log")
        deadline = time.monotonic() + 300
        while "waiting for another assemble run" not in (tmp_path / "wait.log").read_text():
            assert waiting.poll() is None and time.monotonic() < deadline, (tmp_path / "wait.log").read_text()
            time.sleep(0.2)
        assert not out.exists()
    finally:
        os.close(lock)
    assert waiting.wait(timeout=900) == 0, (tmp_path / "wait.log").read_text()
    assert whole(out)
