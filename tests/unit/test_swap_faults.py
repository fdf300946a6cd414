"""The output folder's swap, interrupted at every step (quick tier: tiny runtimes, no build).

The swap itself is a window of microseconds, so every step of it is interrupted
deterministically here; tests/integration/test_faults.py kills real builds."""

from __future__ import annotations

import errno
import os
import shutil
import signal
from pathlib import Path

import pytest

from builder.flows import publish
from builder.digest import sha256_file
from builder.errors import AssembleError, BuildFailed
from tests.support.common import TEST_CACHE
from tests.support.manifests import whole
from tests.support.runtimes import tiny_runtime


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("ASSEMBLE_CACHE", str(TEST_CACHE / "cache"))
    return env


@pytest.fixture(autouse=True)
def ctrl_c_raises():
    """In this process too: Python leaves an inherited ignored SIGINT ignored, and the swap tests
    send themselves a real Ctrl-C that must reach KeyboardInterrupt once the swap lets it through."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _target(out: Path, cache: Path | None = None) -> publish.Target:
    return publish.check_destination(out, cache=cache or Path(_env()["ASSEMBLE_CACHE"]))


def _siblings(out: Path, tag: str) -> list[Path]:
    return sorted(out.parent.glob(f"{out.name}{tag}*"))


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
