"""Inputs are read-only to `assemble repair`, and its refusals are in its own words (issue 28,
items 1 and 7), through the real CLI on small inputs compiled here (test_discover.make_build).

Each refusal: its exit status, one `error:` line naming the problem, no traceback, and every
input and the working directory byte-identical afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.support.common import REPO, assemble, one_error_line
from tests.unit.prebuilt.test_discover import _cc, make_build
from tests.unit.test_outdir import snapshot

STATIC = ("--verify-static", "--accept-loader-risk", "a test: no ggml installed on this host")


@pytest.fixture
def world(tmp_path):
    """A user's folders: a working directory, a home, a cache, a build folder to repair."""
    for d in ("work", "home", "cache"):
        (tmp_path / d).mkdir()
    make_build(tmp_path / "build")
    return tmp_path


def _env(w: Path) -> dict:
    return {"HOME": str(w / "home"), "ASSEMBLE_CACHE": str(w / "cache")}


def _refused(w: Path, args: list[str], code: int, words: list[str], *, watch: Path | None = None) -> str:
    """Run repair from the working directory; the refusal is one line and nothing under `watch`
    (default: everything but the cache) changed."""
    roots = [watch] if watch else [p for p in w.iterdir() if p.name != "cache"]
    before = {str(r): snapshot(r) for r in roots}
    start = time.monotonic()
    proc = assemble("repair", *args, cwd=w / "work", env=_env(w), timeout=120)
    line = one_error_line(proc, code, words)
    assert {str(r): snapshot(r) for r in roots} == before, "an input or the working directory changed"
    assert time.monotonic() - start < 60
    return line


# --- item 1: --out never meets an input --------------------------------------------------------

def test_out_inside_an_input_folder_is_refused_before_anything_is_written(world):
    b = world / "build"
    _refused(world, [str(b), "--out", str(b / "bin" / "rt")], 2, ["--out is inside an input", str(b)])
    _refused(world, [str(b), "--out", str(b)], 2, ["--out is an input"])
    _refused(world, [str(b / "bin"), "--out", str(b)], 2, ["--out holds an input", str(b / "bin")])


def test_out_inside_a_lib_path_folder_is_refused(world):
    libs = world / "libs"
    libs.mkdir()
    _refused(world, [str(world / "build"), "--lib-path", str(libs), "--out", str(libs / "rt")], 2,
             ["--out is inside a --lib-path folder", str(libs)])


def test_out_meeting_an_archive_or_a_deb_input_is_refused(world):
    """Files count as inputs too: --out may not hold them (and is never a file)."""
    d = world / "downloads"
    d.mkdir()
    archive = d / "llama-b7416-bin-ubuntu-x64.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(world / "build" / "bin", arcname="build/bin")
    deb = d / "libggml0_0.9.4-1_amd64.deb"
    deb.write_bytes(b"!<arch>\n")
    _refused(world, [str(archive), "--out", str(d)], 2, ["--out holds an input", str(archive)])
    _refused(world, [str(deb), "--out", str(d)], 2, ["--out holds an input", str(deb)])
    _refused(world, [str(archive), "--out", str(archive)], 2, ["existing file"])


# --- item 1: inputs that would walk the system or the cache --------------------------------------

@pytest.mark.parametrize("given,words", [
    ("/", ["the root folder"]),
    ("/usr", ["a system folder"]),
    ("/etc/ssl", ["a system folder"]),
    ("/proc/self", ["a system folder"]),
    ("{home}", ["is your home directory"]),
    ("{cache}", ["is the assemble cache"]),
    ("{world}", ["holds the assemble cache"]),
])
def test_dangerous_input_folders_are_refused_at_once(world, given, words):
    given = given.format(home=world / "home", cache=world / "cache", world=world)
    for extra in (["--dry-run"], ["--out", str(world / "rt")]):
        _refused(world, [given, *extra], 2, [given, *words, "fix: give the build folder"], watch=world / "work")
    assert not (world / "rt").exists()


# --- item 1: --keep never prunes an input ---------------------------------------------------------

def test_keep_0_never_deletes_the_moved_aside_runtime_it_is_reading(world):
    """The natural "restore the previous runtime" command keeps the folder it reads, and says so."""
    rt = world / "rt"
    for _ in range(2):
        proc = assemble("repair", str(world / "build"), "--name", "cpu", "--out", str(rt), *STATIC,
                        cwd=world / "work", env=_env(world))
        assert proc.returncode == 0, proc.stderr
    (previous,) = world.glob("rt.previous-*")
    before = snapshot(previous)
    proc = assemble("repair", str(previous), "--name", "cpu", "--out", str(rt), "--keep", "0", *STATIC,
                    cwd=world / "work", env=_env(world))
    assert proc.returncode == 0, proc.stderr
    assert f"kept {previous}: it is an input of this run" in proc.stderr
    assert snapshot(previous) == before                       # still there, byte-identical
    assert sorted(p.name for p in world.glob("rt.previous-*")) == [previous.name]   # this run's aside was pruned


def test_keep_spares_a_folder_holding_an_input_archive(world):
    """An archive input inside a moved-aside runtime keeps that runtime (its folder holds an input)."""
    rt = world / "rt"
    for _ in range(2):
        assert assemble("repair", str(world / "build"), "--name", "cpu", "--out", str(rt), *STATIC,
                        cwd=world / "work", env=_env(world)).returncode == 0
    (previous,) = world.glob("rt.previous-*")
    archive = world / "llama-b7416-bin-ubuntu-x64.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(world / "build" / "bin", arcname="build/bin")
    # the aside's lib/ is read as a --lib-path folder: the aside holds it, so it stays
    proc = assemble("repair", str(archive), "--name", "cpu", "--out", str(rt), "--keep", "0",
                    "--lib-path", str(previous / "lib"), *STATIC, cwd=world / "work", env=_env(world))
    assert proc.returncode == 0, proc.stderr
    assert f"kept {previous}: it holds a --lib-path folder ({previous / 'lib'}) of this run" in proc.stderr
    assert previous.is_dir()


# --- item 7: refusals in repair's words -----------------------------------------------------------

def _needs_a_missing_library(world: Path) -> Path:
    """The build's llama-server also needs libvendor.so.1, which no input or --lib-path holds."""
    b = world / "build" / "bin"
    gone = world / "gone"
    gone.mkdir()
    _cc(gone / "libvendor.so.1", "int vendor(void) { return 0; }\n", "-shared", "-Wl,-soname,libvendor.so.1")
    _cc(b / "llama-server", "int llama_init(void);\nint vendor(void);\nint main(void) { return llama_init() + "
        "vendor(); }\n", f"-L{b}", "-l:libllama.so.0.0.1", "-l:libggml.so.0.9.4", "-l:libggml-base.so.0.9.4",
        f"-L{gone}", "-l:libvendor.so.1")
    (gone / "libvendor.so.1").unlink()
    gone.rmdir()
    return world / "build"


@pytest.mark.parametrize("dry", [True, False])
def test_a_library_nothing_provides_gets_a_lib_path_hint_and_exit_2(world, dry):
    b = _needs_a_missing_library(world)
    line = _refused(world, [str(b), "--out", str(world / "rt"), *(["--dry-run"] if dry else [])], 2,
                    ["libvendor.so.1", "llama-server", "--lib-path"])
    assert "bundle.never" not in line and "toolchain" not in line
    assert not (world / "rt").exists()


def test_json_prints_the_refusal_object(world):
    b = _needs_a_missing_library(world)
    proc = assemble("repair", str(b), "--dry-run", "--json", cwd=world / "work", env=_env(world))
    line = one_error_line(proc, 2, ["libvendor.so.1"])
    refusal = json.loads(proc.stdout)["error"]
    assert refusal["exit"] == 2 and "libvendor.so.1" in refusal["what"] and "--lib-path" in refusal["fix"]
    assert line == f"error: {refusal['where']}: {refusal['what']} -- fix: {refusal['fix']}"
    # every command: a refusal of another command's input, too
    proc = assemble("verify", str(world / "nothing-here"), "--json", cwd=world / "work", env=_env(world))
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"]["exit"] == 2, proc.stderr


def _mount_tmpfs(where: Path, size_kib: int) -> None:
    where.mkdir(parents=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {proc.stderr.strip()}")


@pytest.fixture
def small_disk(tmp_path):
    where = tmp_path / "small"
    _mount_tmpfs(where, 1024)
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.parametrize("suffix", [".tar.gz", ".zip"])
def test_a_full_disk_under_the_cache_is_worded_as_a_full_disk(world, small_disk, suffix):
    """The archive unpacks (in the cache's scratch) past the 1 MiB the cache has: a full disk, where,
    how much is free, how to fix; never "damaged or unsafe: download it again"."""
    import zipfile
    flat = make_build(world / "flat", flat=True)        # a zip holds no links
    (flat / "bin" / "ggml-data.bin").write_bytes(os.urandom(3 << 20))   # incompressible
    archive = world / f"llama-b7416-bin-ubuntu-x64{suffix}"
    if suffix == ".zip":
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in sorted((flat / "bin").iterdir()):
                zf.write(p, f"build/bin/{p.name}")
    else:
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(flat / "bin", arcname="build/bin")
    before = snapshot(world / "work"), archive.read_bytes()
    proc = assemble("repair", str(archive), "--name", "cpu", "--out", str(world / "rt"), *STATIC,
                    cwd=world / "work", env={"HOME": str(world / "home"), "ASSEMBLE_CACHE": str(small_disk)})
    line = one_error_line(proc, 1, [f"{small_disk}: no space left on the device in the assemble cache",
                                    " free of 1.0 MiB", "while unpacking", str(archive), "ASSEMBLE_CACHE"])
    assert "damaged" not in line and "download it again" not in line
    assert (snapshot(world / "work"), archive.read_bytes()) == before and not (world / "rt").exists()


def test_a_full_output_disk_is_worded_as_a_full_disk(world, tmp_path):
    """The same words when the output's disk fills while the runtime is written beside it."""
    small = tmp_path / "tiny"
    _mount_tmpfs(small, 48)
    try:
        before = snapshot(world / "build")
        proc = assemble("repair", "-q", str(world / "build"), "--name", "cpu", "--out", str(small / "rt"), *STATIC,
                        cwd=world / "work", env=_env(world))
        line = one_error_line(proc, 1, [f"{small / 'rt'}: no space left on the device", "free of 48 KiB",
                                        "the previous runtime is untouched", "--out on another disk"])
        assert "damaged" not in line and snapshot(world / "build") == before and os.listdir(small) == []
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_ctrl_c_at_any_instant_is_one_line_and_exit_130(world):
    """SIGINT from the moment assemble's own code starts (the `builder` package imported, read from
    -X importtime; before that the interpreter itself is starting) to the end of a dry run."""
    b = world / "build"
    before = snapshot(b), snapshot(world / "work")     # the cache gets its scratch root: not ours to watch
    delays = [0, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0]
    seen = set()
    for delay in delays:
        proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "builder", "repair", str(b), "--dry-run",
                                 *STATIC],
                                cwd=REPO, env={**os.environ, **_env(world)}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        err = []
        for line in proc.stderr:          # wait until the package is imported: our code runs from here on
            err.append(line)
            if line.rstrip().endswith("| builder"):
                break
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, rest = proc.communicate(timeout=120)
        stderr = "".join(err) + rest
        assert "Traceback" not in stderr, f"after {delay}s:\n{stderr[-3000:]}"
        said = [x for x in stderr.splitlines() if not x.startswith("import time:")]
        if proc.returncode == 130:             # a dry run's steps (it verifies a copy) may come first
            assert said[-1:] == ["error: interrupted"] and not [x for x in said[:-1] if "error" in x], \
                f"after {delay}s: {said}"
        else:                              # it finished first
            assert proc.returncode == 0 and "would carry" in out, f"after {delay}s: {proc.returncode} {said}"
        seen.add(proc.returncode)
    assert 130 in seen
    assert (snapshot(b), snapshot(world / "work")) == before
