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

from builder.flows import publish
from builder.check.report import PASS
from builder.release import attested, package
from builder.errors import AssembleError, BuildFailed
from tests.support.common import REPO, TEST_CACHE, assemble
from builder.digest import sha256_file
from tests.support.runtimes import tiny_runtime
from tests.support.manifests import whole

SEED = 20251129
KILLS = 20


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("ASSEMBLE_CACHE", str(TEST_CACHE / "cache"))
    return env


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


@pytest.fixture(autouse=True)
def ctrl_c_raises():
    """In this process too: Python leaves an inherited ignored SIGINT ignored, and the swap tests
    send themselves a real Ctrl-C that must reach KeyboardInterrupt once the swap lets it through."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _target(out: Path, cache: Path | None = None) -> publish.Target:
    return publish.check_destination(out, cache=cache or Path(_env()["ASSEMBLE_CACHE"]))


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

class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no cleanup handler either."""


_fake_runtime = tiny_runtime


def _label(runtime: Path) -> str:
    return (runtime / "bin" / "tool").read_text()


def _staged(target: publish.Target, label: str) -> publish.Staging:
    """A staging folder made (and recorded) as a build makes it, holding a runtime labelled `label`."""
    staging = publish._make_staging(target)
    _fake_runtime(staging.path, label)
    return staging


def _ledger(target: publish.Target):
    from builder import locks
    return locks.load(target.ledger, target.path)


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_swap_interrupted_at_every_step_is_finished_or_undone(tmp_path, monkeypatch, exchange):
    if exchange and not publish._exchange(*(_fake_runtime(tmp_path / n, n) for n in ("p", "q"))):
        pytest.skip("this filesystem has no RENAME_EXCHANGE")
    from builder import locks
    real = {"_exchange": publish._exchange if exchange else (lambda a, b: False),
            "_rename_noreplace": publish._rename_noreplace}
    real_save = locks.save
    steps = 0
    for kill_at in range(1, 10):
        root = tmp_path / f"k{kill_at}"
        out = _fake_runtime(root / "runtime", "old")
        target = _target(out, tmp_path / "cache")
        staging = _staged(target, "new")
        count = [0]

        def step(fn):
            def wrapped(*a, **kw):
                count[0] += 1  # noqa: B023 -- wrapped runs within this iteration
                if count[0] == kill_at:  # noqa: B023
                    raise Killed
                return fn(*a, **kw)
            return wrapped
        for name, fn in real.items():
            monkeypatch.setattr(publish, name, step(fn))
        monkeypatch.setattr(locks, "save", step(real_save))
        try:
            publish.swap_in(target, staging)
            finished = True
        except Killed:
            finished = False
        finally:
            for name, fn in real.items():
                monkeypatch.setattr(publish, name, fn)
            monkeypatch.setattr(locks, "save", real_save)
        if finished:
            steps = kill_at - 1
            break
        # the next run, holding the lock, recovers
        publish.clear_leftovers(target)
        assert whole(out) and _label(out) in ("old", "new"), kill_at
        olds = _siblings(out, publish.OLD_TAG)
        labels = sorted([_label(out)] + [_label(p) for p in olds])
        assert labels in (["new", "old"], ["old"]), (kill_at, labels)   # the old runtime is never lost
        if _label(out) == "old":
            assert not olds
        else:   # the moved-aside runtime is recorded: --keep may act on it, and only on it
            assert [e.path for e in _ledger(target).entries] == [str(olds[0])]
        assert not _siblings(out, publish.STAGING_TAG) and _ledger(target).swap is None
        assert sorted(p.name for p in root.iterdir()) == sorted(["runtime"] + [p.name for p in olds])
    # journal written, swapped (one exchange, or two renames), moved aside, recorded: each interrupted
    assert steps == (4 if exchange else 5)


def test_an_unreadable_ledger_leaves_every_folder_alone(tmp_path):
    out = _fake_runtime(tmp_path / "runtime", "old")
    target = _target(out, tmp_path / "cache")
    staging = _staged(target, "new")
    target.ledger.write_text("{not json")
    publish.clear_leftovers(target)
    assert _label(out) == "old" and _label(staging.path) == "new"   # not provably ours any more: kept
    assert _ledger(target).entries == ()


def test_keep_prunes_only_recorded_runtimes_through_a_rename(tmp_path):
    out = tmp_path / "runtime"
    target = _target(out, tmp_path / "cache")
    # look-alikes a user made: our names, even a whole runtime, but never recorded
    lookalikes = [_fake_runtime(tmp_path / f"runtime{publish.OLD_TAG}20200101-000000-1", "user"),
                  _fake_runtime(tmp_path / f"runtime{publish.DELETING_TAG}5-0", "user"),
                  _fake_runtime(tmp_path / f"runtime{publish.STAGING_TAG}1", "user")]
    before = {p: sha256_file(p / "manifest.json") for p in lookalikes}
    for label in ("1", "2", "3"):
        publish.swap_in(target, _staged(target, label), keep=1)   # three swaps within a second: names must not clash
    assert _label(out) == "3"
    recorded = [Path(e.path) for e in _ledger(target).entries]
    assert [_label(p) for p in recorded] == ["2"]
    # a prune killed after its rename: recorded as being deleted, so the next run finishes it
    from builder import locks
    half = tmp_path / f"runtime{publish.DELETING_TAG}{os.getpid()}-abc"
    os.rename(recorded[0], half)
    ident = locks.identity(half)
    locks.save(target.ledger, locks.Ledger(str(out), (locks.Entry("deleting", str(half), *ident, was=str(recorded[0])),)))
    publish.clear_leftovers(target)
    assert not half.exists() and _label(out) == "3" and _ledger(target).entries == ()
    assert {p: sha256_file(p / "manifest.json") for p in lookalikes} == before


# --- Ctrl-C and errors in the window between the exchange and the rename -------------------------

def test_ctrl_c_during_the_swap_is_held_until_the_swap_is_done(tmp_path, monkeypatch):
    out = _fake_runtime(tmp_path / "runtime", "old")
    target = _target(out, tmp_path / "cache")
    real = publish._exchange

    def exchange_then_ctrl_c(a, b):
        done = real(a, b)
        os.kill(os.getpid(), signal.SIGINT)    # a real Ctrl-C, right between the exchange and the rename
        return done
    monkeypatch.setattr(publish, "_exchange", exchange_then_ctrl_c)
    try:
        with pytest.raises(AssembleError) as info:
            with publish.staged(target) as staging:     # as build() uses it
                _fake_runtime(staging.path, "new")
                publish.swap_in(target, staging)
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C was not held until the swap was done")
    aside = _siblings(out, publish.OLD_TAG)
    line = info.value.line()
    assert info.value.code == 130 and "interrupted after the swap" in line and str(aside[0]) in line, line
    assert _label(out) == "new" and whole(out) and [_label(p) for p in aside] == ["old"] and whole(aside[0])
    assert [e.path for e in _ledger(target).entries] == [str(aside[0])] and _ledger(target).swap is None
    assert not _siblings(out, publish.STAGING_TAG)


def test_ctrl_c_before_the_swap_removes_only_the_staging_folder(tmp_path):
    out = _fake_runtime(tmp_path / "runtime", "old")
    target = _target(out, tmp_path / "cache")
    before = sha256_file(out / "manifest.json"), out.stat().st_ino
    with pytest.raises(AssembleError) as info:
        with publish.staged(target) as staging:
            _fake_runtime(staging.path, "new")
            raise KeyboardInterrupt
    assert info.value.code == 130 and "interrupted before the swap" in info.value.line()
    assert (sha256_file(out / "manifest.json"), out.stat().st_ino) == before and whole(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "runtime"] and _ledger(target).entries == ()


@pytest.mark.parametrize("fails", ["once", "always"])
def test_an_error_between_exchange_and_rename_never_deletes_the_previous_runtime(tmp_path, monkeypatch, fails):
    """The old bug: build()'s cleanup removed the staging path, which after the exchange is the previous runtime."""
    out = _fake_runtime(tmp_path / "runtime", "old")
    target = _target(out, tmp_path / "cache")
    if not publish._exchange(*(_fake_runtime(tmp_path / n, n) for n in ("p", "q"))):
        pytest.skip("this filesystem has no RENAME_EXCHANGE")
    for n in ("p", "q"):
        shutil.rmtree(tmp_path / n)
    real, calls = publish._rename_noreplace, [0]

    def broken(a, b):
        calls[0] += 1
        if fails == "always" or calls[0] == 1:
            raise RuntimeError("boom")
        return real(a, b)
    monkeypatch.setattr(publish, "_rename_noreplace", broken)
    with pytest.raises((RuntimeError, BuildFailed)) as info:
        with publish.staged(target) as staging:
            _fake_runtime(staging.path, "new")
            publish.swap_in(target, staging)
    assert _label(out) == "new" and whole(out)
    monkeypatch.setattr(publish, "_rename_noreplace", real)
    if fails == "always":   # the message names where the previous runtime is, and it is there, whole
        held = _siblings(out, publish.STAGING_TAG)
        assert isinstance(info.value, BuildFailed) and str(held[0]) in info.value.line()
        assert [_label(p) for p in held] == ["old"] and whole(held[0])
        publish.clear_leftovers(target)    # the next run finishes the swap from the journal
    aside = _siblings(out, publish.OLD_TAG)
    assert [_label(p) for p in aside] == ["old"] and whole(aside[0]) and not _siblings(out, publish.STAGING_TAG)
    assert [e.path for e in _ledger(target).entries] == [str(aside[0])]


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


def test_os_errors_in_the_locked_section_become_one_line(tmp_path):
    out = tmp_path / "runtime"
    cases = [(errno.ENOSPC, BuildFailed, 1, "no space left"), (errno.EROFS, AssembleError, 2, "read-only"),
             (errno.EACCES, AssembleError, 2, "cannot write the output")]
    target = _target(out, tmp_path / "cache")
    for code, cls, exit_code, words in cases:
        with pytest.raises(cls) as info:
            with publish.locked(target):
                raise OSError(code, os.strerror(code), str(tmp_path / "x"))
        assert info.value.code == exit_code and words in info.value.line()
    with pytest.raises(FileNotFoundError):   # anything else is a bug and keeps its traceback
        with publish.locked(target):
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
