"""Never lose a user's file: a catalogue of every way `build --out` and `package --out-dir` were
shown to move, prune or delete what they did not make (issue 15). Each refusal must come as one
line with exit 2, before anything is fetched or compiled (in well under a few seconds), with no
traceback and every file of the user's byte-identical afterwards. The cases where the run goes
ahead (look-alike names, globs, another build's folders) must leave the user's folders alone."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from builder import locks
from builder.flows import publish
from builder.digest import sha256_file
from builder.errors import AssembleError
from builder.release import package
from builder.runtime import manifest
from builder.runtime.manifest import Manifest
from tests.support.common import assemble, one_error_line
from tests.support.runtimes import tiny_runtime
from tests.support.manifests import read_raw, write_raw
from tests.support.runtimes import make_runtime


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file, folder and link under root: kind, mode, content (sha256) or target."""
    found = {}
    for dirpath, dirs, files in os.walk(root):     # never follows a symlinked folder
        for name in dirs + files:
            p = Path(dirpath, name)
            st = p.lstat()
            rel = p.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                found[rel] = ("file", stat.S_IMODE(st.st_mode), sha256_file(p))
    return found


_fake_runtime = tiny_runtime


@pytest.fixture
def sandbox(tmp_path):
    """A user's world: a working directory, a home, a cache, folders and files of theirs."""
    s = tmp_path / "s"
    for d in ("work", "home", "cache", "docs", "other", "src", "libs"):
        (s / d).mkdir(parents=True)
    (s / "home" / ".bashrc").write_text("export PS1='$ '\n")
    (s / "cache" / "keep.txt").write_text("cached\n")
    (s / "docs" / "notes.txt").write_text("hi\n")
    (s / "other" / "manifest.json").write_text('{"name": "another tool", "files": []}\n')
    (s / "src" / "CMakeLists.txt").write_text("project(x)\n")
    (s / "libs" / "libfoo.so").write_bytes(b"\x7fELF")
    (s / "file.txt").write_text("a file\n")
    os.symlink("docs", s / "link")
    ours = _fake_runtime(s / "ours")
    (ours / "notes.txt").write_text("added by the user\n")
    return s


# name: (--out relative to the sandbox, or absolute; extra arguments; words the one line must hold)
BUILD_CASES = {
    "a user folder": ("docs", [], ["did not make", "notes.txt"]),
    "another tool's manifest, --keep 0": ("other", ["--keep", "0"], ["did not make", "not one assemble wrote"]),
    "the working directory (.)": (".", [], ["is the working directory"]),
    "a parent of it (..)": ("..", [], ["holds the working directory"]),
    "the home directory": ("home", [], ["is your home directory"]),
    "a symlink to a user folder": ("link", [], ["symlink", "docs"]),
    "the cache": ("cache", [], ["is the assemble cache"]),
    "a folder inside the cache": ("cache/runtime-cpu", [], ["inside the assemble cache"]),
    "a regular file": ("file.txt", [], ["existing file"]),
    "a path under a regular file": ("file.txt/runtime-cpu", [], ["which is a file"]),
    "the source tree": ("src", ["--source", "{s}/src"], ["is the --source tree"]),
    "inside the source tree": ("src/runtime-cpu", ["--source", "{s}/src"], ["inside the --source tree"]),
    "a --lib-path folder": ("libs", ["--lib-path", "{s}/libs"], ["is a --lib-path folder"]),
    "a runtime with a file added": ("ours", [], ["no longer matches its manifest", "notes.txt"]),
    "/usr": ("/usr", [], ["system folder"]),
    "/": ("/", [], ["system folder"]),
    "/proc/self": ("/proc/self/rt", [], ["system folder"]),
}


def _refused_build(s: Path, out: str, extra: list[str], words: list[str], name: str) -> str:
    """Run `assemble build` as the user would, from their working directory; check the refusal."""
    before, top = snapshot(s), sorted(os.listdir("/"))
    args = [a.replace("{s}", str(s)) for a in extra]
    proc = assemble("build", "--recipe", "cpu", "--out", out if out.startswith(("/", "."))
                    else str(s / out), *args, cwd=s / "work",
                    env={"HOME": str(s / "home"), "ASSEMBLE_CACHE": str(s / "cache")}, timeout=120)
    line = one_error_line(proc, 2, words)
    # refused before anything was fetched, patched or compiled: the cache holds no source, tree or build
    cache = s / "cache"
    assert not {"sources", "trees", "build"} & set(os.listdir(cache) if cache.is_dir() else ()), name
    assert snapshot(s) == before, f"{name}: the user's files changed"
    assert sorted(os.listdir("/")) == top
    return line


@pytest.mark.parametrize("case", sorted(BUILD_CASES))
def test_build_refuses_what_it_did_not_make(case, sandbox):
    out, extra, words = BUILD_CASES[case]
    if out == "..":
        words = words + [str(sandbox / "work")]
    _refused_build(sandbox, out, extra, words, case)
    # nothing was even locked: the cache holds no state for that output
    assert not (sandbox / "cache" / "outputs").exists()


def test_build_refuses_a_mount_point(sandbox):
    mnt = sandbox / "mnt"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1024k", "tmpfs", str(mnt)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {proc.stderr.strip()}")
    try:
        (mnt / "data.txt").write_text("on the mount\n")
        _refused_build(sandbox, "mnt", [], ["mount point", "choose a new folder inside it"], "a mount point")
        (mnt / "data.txt").unlink()   # empty, it is still a mount point: never renamed
        _refused_build(sandbox, "mnt", [], ["mount point"], "an empty mount point")
        assert os.path.ismount(mnt) and not list(sandbox.glob(".*swap*"))
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


# --- the runs that go ahead must leave look-alikes alone ------------------------------------------


def test_a_folder_filled_during_the_build_is_not_replaced(tmp_path):
    out = tmp_path / "runtime"
    target = publish.check_destination(out, cache=tmp_path / "cache")   # new when checked
    with pytest.raises(AssembleError) as info:
        with publish.locked(target), publish.staged(target) as staging:
            _fake_runtime(staging.path, "new")
            out.mkdir()
            (out / "notes.txt").write_text("the user's, written while the build ran\n")
            publish.swap_in(target, staging)
    assert info.value.code == 2 and "changed during the build; nothing was replaced" in info.value.line()
    assert sorted(os.listdir(tmp_path)) == ["cache", "runtime"] and os.listdir(out) == ["notes.txt"]


def test_a_recorded_leftover_goes_only_while_it_is_the_recorded_folder(tmp_path):
    """Recovery acts on (path, inode): a folder the user put at a recorded path is theirs."""
    out = tmp_path / "runtime"
    target = publish.check_destination(out, cache=tmp_path / "cache")
    ours = publish._make_staging(target)          # a build killed here leaves this
    theirs = publish._make_staging(target)
    shutil.rmtree(theirs.path)
    theirs.path.mkdir()                          # the user's own folder now, at the recorded name
    (theirs.path / "notes.txt").write_text("mine\n")
    publish.clear_leftovers(target)
    assert not ours.path.exists() and (theirs.path / "notes.txt").read_text() == "mine\n"
    assert locks.load(target.ledger, out).entries == ()


# --- package ------------------------------------------------------------------------------------

def _digest(runtime: Path) -> dict:
    return snapshot(runtime)


@pytest.mark.parametrize("where", ["the runtime", "inside the runtime"])
def test_package_refuses_an_out_dir_inside_the_runtime(tmp_path, where):
    rt = make_runtime(tmp_path)
    before = _digest(rt)
    dest = rt if where == "the runtime" else rt / "dist"
    proc = assemble("package", str(rt), "--out-dir", str(dest))
    one_error_line(proc, 2, ["--out-dir is inside the runtime folder", "--out-dir dist"])
    assert _digest(rt) == before and manifest.check_files(rt, Manifest.load(rt)) == []


def test_package_leaves_the_users_files_in_out_dir_alone(tmp_path):
    rt = make_runtime(tmp_path)
    dist = tmp_path / "dist"
    dist.mkdir()
    stem = package.archive_stem(rt, Manifest.load(rt))
    mine = {f".notes.txt{package.PART_TAG}1": "mine\n",                           # the old glob took these
            f".{stem}.tar.gz{package.PART_TAG}{os.getpid()}": "exactly our old temporary name\n",
            "README": "release notes\n"}
    for n, text in mine.items():
        (dist / n).write_text(text)
    result = package.package(rt, dist)
    assert {n: (dist / n).read_text() for n in mine} == mine
    assert sorted(os.listdir(dist)) == sorted([*mine, result.archive.name, result.sbom.name, result.provenance.name,
                                               package.SUMS])


def test_package_never_names_a_file_outside_out_dir(tmp_path):
    rt = make_runtime(tmp_path)
    raw = read_raw(rt)
    raw["llama_cpp"]["sha"] = "../../escaped"      # the archive name is made of it
    write_raw(rt, {k: v for k, v in raw.items() if k not in ("schema", "created_by")})
    before = snapshot(tmp_path)
    proc = assemble("package", str(rt), "--out-dir", str(tmp_path / "dist"))
    one_error_line(proc, 1, ["llama_cpp.sha", "../../escaped"])   # refused where the manifest is read
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("dist")} == before


def test_package_refuses_a_runtime_that_fails_its_file_checks(tmp_path):
    rt = make_runtime(tmp_path)
    (rt / "lib" / "extra.so").write_bytes(b"planted")
    proc = assemble("package", str(rt), "--out-dir", str(tmp_path / "dist"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    error, *failed = proc.stderr.splitlines()
    assert error.startswith("error: ") and "fails verify --static" in error
    assert any("manifest hashes" in line and "FAIL" in line and "extra.so" in line for line in failed), failed
    assert not (tmp_path / "dist").exists()


@pytest.mark.parametrize("sums", [b"# release 1.2, signed by me\n", b"0" * 64 + b"  caf\xe9.tar.gz\n",
                                  b"0" * 64 + b"  my-own-release.tar.gz\n"],
                         ids=["comment", "latin-1 name", "sha256sum's own format"])
def test_package_keeps_a_sums_file_it_did_not_write(tmp_path, sums):
    rt = make_runtime(tmp_path)
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / package.SUMS).write_bytes(sums)
    proc = assemble("package", str(rt), "--out-dir", str(dist))
    one_error_line(proc, 2, [str(dist / package.SUMS), "not written by assemble package", "another --out-dir"])
    assert os.listdir(dist) == [package.SUMS] and (dist / package.SUMS).read_bytes() == sums


def test_keep_never_deletes_what_the_run_reads(tmp_path, capsys):
    """--keep 0 prunes every moved-aside runtime but the one the run reads (a --source tree, a
    repair input) or one holding what it reads; each kept one is named in one line."""
    out = tmp_path / "runtime"
    target = publish.check_destination(out, cache=tmp_path / "cache")
    for label in ("1", "2", "3"):
        publish.publish(target, lambda p, label=label: _fake_runtime(p, label))
    asides = sorted(tmp_path.glob(f"runtime{publish.OLD_TAG}*"), key=lambda p: (p / "bin" / "tool").read_text())
    assert [(p / "bin" / "tool").read_text() for p in asides] == ["1", "2"]
    read, holding = asides
    before = {"read": snapshot(read), "holding": snapshot(holding)}
    publish.publish(target, lambda p: _fake_runtime(p, "4"), keep=0,
                   protect=[("the --source tree", read), ("a --lib-path folder", holding / "bin")])
    said = capsys.readouterr().err
    assert f"kept {read}: it is the --source tree of this run" in said
    assert f"kept {holding}: it holds a --lib-path folder ({holding / 'bin'}) of this run" in said
    assert {"read": snapshot(read), "holding": snapshot(holding)} == before
    assert (out / "bin" / "tool").read_text() == "4"
    # the runtime moved aside by this run ("3") was pruned: nothing protects it
    assert sorted(tmp_path.glob(f"runtime{publish.OLD_TAG}*")) == sorted(asides)
