"""Fault injection: a runtime folder is never left broken.

SIGKILL at random points of real `assemble build` and `assemble package` runs (the cpu
runtime from the shared cache, so each run only re-bundles and verifies), a full disk
(a small tmpfs), a read-only output folder, and concurrent builds of one output. The
swap itself is a window of microseconds, so every step of it is also interrupted
deterministically below."""

from __future__ import annotations

import errno
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

from builder import outdir
from builder.release import package
from builder.errors import AssembleError, BuildFailed
from tests.conftest import REPO, TEST_CACHE, assemble
from builder.digest import sha256_file
from tests.manifests import whole, write_raw

SEED = 20251129
KILLS = 20


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("ASSEMBLE_CACHE", str(TEST_CACHE / "cache"))
    return env


def _start(*args: str, log: Path) -> subprocess.Popen:
    """The real CLI in its own process group, so a kill takes its children (patchelf, checks) too."""
    with open(log, "w") as f:
        return subprocess.Popen([sys.executable, "-m", "builder", *args], cwd=REPO, env=_env(), stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()




def _siblings(out: Path, tag: str) -> list[Path]:
    return sorted(out.parent.glob(f"{out.name}{tag}*"))


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
    phases = []
    for trial in range(KILLS):
        log = tmp_path / f"kill-{trial}.log"
        proc = _start(*build, log=log)
        time.sleep(rng.uniform(0.1, duration * 1.05))
        _kill(proc)
        said = log.read_text()
        # the checks print their table at the end: a kill during them reads as "bundle"
        phases.append("swapped" if "moved aside" in said else "bundle" if "bundle into" in said else "plan")
        assert whole(out), f"trial {trial} ({phases[-1]}): {out} is not a whole runtime\n{said[-2000:]}"
        for old in _siblings(out, outdir.OLD_TAG):
            assert whole(old), f"trial {trial}: a moved-aside runtime is damaged: {old}"
        if trial % 5 == 4:   # the next run recovers whatever the kills left and succeeds
            proc = assemble(*build)
            assert proc.returncode == 0, proc.stderr
            assert whole(out) and not _siblings(out, outdir.STAGING_TAG) and not _siblings(out, outdir.DELETING_TAG)
    print("phases reached before each kill:", phases)
    # the kills landed across the run, not only in its start-up
    assert sum(p != "plan" for p in phases) >= KILLS // 3, phases


def test_sigkill_during_package_leaves_old_or_new_files(cpu_runtime, tmp_path):
    ref = tmp_path / "ref"
    start = time.monotonic()
    expected = package.package(cpu_runtime, ref)
    duration = time.monotonic() - start
    dist = tmp_path / "dist"
    rng = random.Random(SEED + 1)
    for trial in range(6):
        proc = _start("package", str(cpu_runtime), "--out-dir", str(dist), log=tmp_path / f"pkg-{trial}.log")
        time.sleep(rng.uniform(0.2, duration + 0.8))
        _kill(proc)
        # whatever SHA256SUMS lists is complete and correct; no archive is half-written under its name
        if (dist / package.SUMS).exists():
            assert package.check_sums(dist) == []
        archive = dist / expected.archive.name
        if archive.exists():
            assert archive.read_bytes() == expected.archive.read_bytes()
    assert assemble("package", str(cpu_runtime), "--out-dir", str(dist)).returncode == 0
    assert (dist / expected.archive.name).read_bytes() == expected.archive.read_bytes()
    assert package.check_sums(dist) == [] and not list(dist.glob(f".*{package.PART_TAG}*"))


# --- every step of the swap, interrupted ----------------------------------------------------

class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no cleanup handler either."""


def _fake_runtime(path: Path, label: str) -> Path:
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "tool").write_text(label)
    write_raw(path, {"recipe": {"name": "x", "backends": ["cpu"]},
                     "llama_cpp": {"source": {"kind": "local", "verified_by": "nothing (a test)"}},
                     "files": [{"path": "bin/tool", "role": "own", "sha256": sha256_file(path / "bin" / "tool"),
                                "size": len(label), "mode": 0o644}]})
    return path


def _label(runtime: Path) -> str:
    return (runtime / "bin" / "tool").read_text()


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_swap_interrupted_at_every_step_is_finished_or_undone(tmp_path, monkeypatch, exchange):
    if exchange and not outdir._exchange(*(_fake_runtime(tmp_path / n, n) for n in ("p", "q"))):
        pytest.skip("this filesystem has no RENAME_EXCHANGE")
    real_exchange = outdir._exchange if exchange else (lambda a, b: False)
    real_rename, real_replace, real_unlink = os.rename, os.replace, Path.unlink
    steps = 0
    for kill_at in range(1, 10):
        root = tmp_path / f"k{kill_at}"
        out = _fake_runtime(root / "runtime", "old")
        staging = _fake_runtime(root / f"runtime{outdir.STAGING_TAG}99", "new")
        count = [0]

        def step(fn):
            def wrapped(*a, **kw):
                count[0] += 1
                if count[0] == kill_at:
                    raise Killed()
                return fn(*a, **kw)
            return wrapped
        monkeypatch.setattr(os, "rename", step(real_rename))
        monkeypatch.setattr(os, "replace", step(real_replace))
        monkeypatch.setattr(Path, "unlink", step(real_unlink))
        monkeypatch.setattr(outdir, "_exchange", step(real_exchange))
        try:
            outdir.swap_in(staging, out)
            finished = True
        except Killed:
            finished = False
        finally:
            monkeypatch.setattr(outdir, "_exchange", real_exchange)
            monkeypatch.setattr(os, "rename", real_rename)
            monkeypatch.setattr(os, "replace", real_replace)
            monkeypatch.setattr(Path, "unlink", real_unlink)
        if finished:
            steps = kill_at - 1
            break
        # the next run, holding the lock, recovers
        outdir.clear_leftovers(out)
        assert whole(out) and _label(out) in ("old", "new"), kill_at
        olds = _siblings(out, outdir.OLD_TAG)
        labels = sorted([_label(out)] + [_label(p) for p in olds])
        assert labels in (["new", "old"], ["old"]), (kill_at, labels)   # the old runtime is never lost
        if _label(out) == "old":
            assert not olds
        assert not _siblings(out, outdir.STAGING_TAG) and not (root / ".runtime.swap.json").exists()
    # journal written, swapped (one exchange, or two renames), moved aside, journal removed: each interrupted
    assert steps == (4 if exchange else 5)


def test_unreadable_journal_keeps_every_staging_folder(tmp_path):
    out = _fake_runtime(tmp_path / "runtime", "old")
    staging = _fake_runtime(tmp_path / f"runtime{outdir.STAGING_TAG}7", "new")
    (tmp_path / ".runtime.swap.json").write_text("{not json")
    outdir.clear_leftovers(out)
    assert _label(out) == "old" and not staging.exists()
    kept = _siblings(out, outdir.OLD_TAG)
    assert [_label(p) for p in kept] == ["new"]


def test_keep_prunes_through_a_rename_and_leftovers_go(tmp_path):
    out = tmp_path / "runtime"
    for label in ("1", "2", "3"):
        staging = _fake_runtime(tmp_path / f"runtime{outdir.STAGING_TAG}{label}", label)
        outdir.swap_in(staging, out, keep=1)   # three swaps within a second: names must not clash
    assert _label(out) == "3" and [_label(p) for p in _siblings(out, outdir.OLD_TAG)] == ["2"]
    half = tmp_path / f"runtime{outdir.DELETING_TAG}5-0"   # a prune killed half-way
    (half / "lib").mkdir(parents=True)
    outdir.clear_leftovers(out)
    assert not half.exists() and _label(out) == "3"


def test_os_errors_in_the_locked_section_become_one_line(tmp_path):
    out = tmp_path / "runtime"
    cases = [(errno.ENOSPC, BuildFailed, 1, "no space left"), (errno.EROFS, AssembleError, 2, "read-only"),
             (errno.EACCES, AssembleError, 2, "cannot write the output")]
    for code, cls, exit_code, words in cases:
        with pytest.raises(cls) as info:
            with outdir.locked(out):
                raise OSError(code, os.strerror(code), str(tmp_path / "x"))
        assert info.value.code == exit_code and words in info.value.line()
    with pytest.raises(FileNotFoundError):   # anything else is a bug and keeps its traceback
        with outdir.locked(out):
            raise FileNotFoundError(errno.ENOENT, "gone", "/elsewhere")


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
    assert not _siblings(out, outdir.STAGING_TAG) and not _siblings(out, outdir.OLD_TAG)
    free = shutil.disk_usage(disk).free // 1024
    assert free > size // 3, "the partial copy was not removed"
    # packaging onto the full disk fails the same way, leaving no partial archive
    filler = disk / "filler"
    filler.write_bytes(b"\0" * (max(free - 64, 0) * 1024))
    pkg = assemble("package", str(out), "--out-dir", str(disk / "dist"))
    assert pkg.returncode == 1 and "no space left" in _one_error_line(pkg.stderr)
    left = sorted(p.name for p in (disk / "dist").glob("*")) if (disk / "dist").exists() else []
    assert left in ([], [".assemble-package.lock"]), left


def test_read_only_output_folder_is_refused_clearly(cpu_runtime, tmpfs):
    disk = tmpfs(_size_kib(cpu_runtime) * 3 + 1024)
    out = disk / "runtime-cpu"
    assemble("build", "--recipe", "cpu", "--out", str(out), check=True)
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    with pytest.raises(OSError):   # as root, permission bits would not stop us: prove the mount does
        (disk / "probe").write_text("x")
    before = sha256_file(out / "manifest.json")
    proc = assemble("build", "--recipe", "cpu", "--out", str(out), "-q")
    assert proc.returncode == 2, proc.stderr
    line = _one_error_line(proc.stderr)
    assert "Read-only file system" in line or "read-only" in line
    assert "--out" in line
    assert whole(out) and sha256_file(out / "manifest.json") == before
    assert not _siblings(out, outdir.STAGING_TAG)
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
    olds = _siblings(out, outdir.OLD_TAG)
    assert len(olds) == 1 and whole(olds[0])   # the first result, moved aside by the second
    assert not _siblings(out, outdir.STAGING_TAG)


def test_a_held_output_makes_a_build_wait_or_refuse(cpu_runtime, tmp_path):
    out = tmp_path / "runtime-cpu"
    lock = os.open(tmp_path / ".runtime-cpu.lock", os.O_RDWR | os.O_CREAT)
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
