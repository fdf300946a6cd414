"""A cache for glslc, the shader compiler ggml-vulkan's build runs for every shader variant.

ccache fronts the C/C++ compilers only. ggml-vulkan's build runs `vulkan-shaders-gen`, which runs glslc
once per shader variant (thousands at the pin), and a fresh build folder (another recipe, another
define, a patched tree) runs them all again: on the 2-core machine that is most of a Vulkan build that
ccache otherwise answers. This module is both halves of a cache in front of glslc:

- the wrapper (`main`, run as a script: stdlib only, so it starts with `python -I -S`): vulkan-shaders-gen
  is pointed at it through `Vulkan_GLSLC_EXECUTABLE`. For a compile of one file to one `-o` file it
  preprocesses with the same glslc (`-E`, the same defines and include folders) and keys the SPIR-V by
  glslc's identity, the flags and the preprocessed text, as ccache's preprocessor mode keys an object.
  The `#line` directives' folders are left out of the key: without `-g` no path reaches the SPIR-V
  (two trees, the same bytes: checked when this was written), and with `-g` nothing is cached. A hit
  copies the stored SPIR-V and writes the `-MD -MF` dependency file glslc would have; a miss runs glslc
  unchanged and stores what it wrote. Anything else (`-o -`, `-E`, `-g`, CMake's feature tests) runs
  glslc itself.
- the build's side (`enable`, `prune`, `read_stats`): where the store and the wrapper live, the size
  cap, and the counts of the build's hits and misses.

Used when a unit builds Vulkan on this host with a compiler launcher (ccache or sccache: the build
asked for compiles to be cached); `--launcher none` builds without it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FORMAT = "assemble-glslc 1"           # in every key: a change of the keying invalidates the store
STATS_ENV = "ASSEMBLE_GLSLC_STATS"    # the file a build's wrapper runs append "hit"/"miss" to
STATS_LOG = "assemble-glslc.log"      # that file, in the build folder
CAP_BYTES = 2 << 30                   # the store's size; pruned to 80% of it, oldest first, before a build
_LINE = re.compile(rb'^(#line \d+ ")([^"]*/)([^"/]*")', re.MULTILINE)


# --- the wrapper --------------------------------------------------------------------------------

def _parse(args: list[str]) -> tuple[str, str, str | None, list[str]] | None:
    """(input, output, depfile or None, the other flags) of a cacheable compile, else None."""
    source = out = dep = None
    rest: list[str] = []
    it = iter(args)
    for a in it:
        if a == "-o":
            out = next(it, None)
        elif a == "-MF":
            dep = next(it, None)
        elif a == "-MD":
            continue
        elif a in ("-E", "-S", "-M", "-MM", "-c", "-g") or a.startswith(("-o", "-MF", "-MT", "-MQ", "-g", "@")):
            return None           # preprocess-only, assembly, debug info, joined forms: glslc itself
        elif not a.startswith("-"):
            if source is not None:
                return None       # several inputs
            source = a
        else:
            rest.append(a)
    if not source or not out or out == "-" or ("-MD" in args) != (dep is not None):
        return None
    return source, out, dep, rest


def _identity(glslc: str) -> bytes:
    st = os.stat(glslc)
    return f"{FORMAT}\0{os.path.realpath(glslc)}\0{st.st_size}\0{st.st_mtime_ns}".encode()


def _count(word: str) -> None:
    path = os.environ.get(STATS_ENV)
    if path:
        try:
            with open(path, "a") as f:
                f.write(word + "\n")
        except OSError:
            pass


def _put(data_from: str, dest: str) -> None:
    """Copy data_from to dest through a temporary beside it: no reader ever sees half a file."""
    folder = os.path.dirname(dest) or "."
    fd, tmp = tempfile.mkstemp(prefix=".glslc-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f, open(data_from, "rb") as src:
            shutil.copyfileobj(src, f)
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _passthrough(glslc: str, args: list[str]) -> int:
    os.execv(glslc, [glslc, *args])
    return 127   # not reached


def main(argv: list[str]) -> int:
    """assemble-glslc --glslc REAL --store DIR -- ARGS...: glslc ARGS, from the store when it can."""
    glslc, store, args = argv[2], Path(argv[4]), argv[6:]
    parsed = _parse(args)
    if parsed is None:
        return _passthrough(glslc, args)
    source, out, dep, rest = parsed
    with tempfile.TemporaryDirectory(prefix="assemble-glslc-") as tmp:
        pre_dep = os.path.join(tmp, "pre.d")
        pre = subprocess.run([glslc, *rest, source, "-E", "-o", "-", "-MD", "-MF", pre_dep],
                             capture_output=True)
        if pre.returncode != 0 or pre.stderr:      # glslc itself says what is wrong
            return _passthrough(glslc, args)
        text = _LINE.sub(rb"\1\3", pre.stdout)      # folders out: two trees, one key
        h = hashlib.sha256(_identity(glslc))
        for part in (*rest, os.path.basename(source)):
            h.update(b"\0" + part.encode())
        h.update(b"\0\0" + text)
        key = h.hexdigest()
        stored = store / key[:2] / f"{key}.spv"
        if stored.is_file():
            _put(str(stored), out)
            if dep is not None:
                deps = Path(pre_dep).read_text().split(": ", 1)[-1]
                Path(dep).write_text(f"{out}: {deps}")
            try:
                os.utime(stored)           # recently used: the last to be pruned
            except OSError:
                pass
            _count("hit")
            return 0
        done = subprocess.run([glslc, *args])
        if done.returncode == 0 and os.path.isfile(out):
            try:
                stored.parent.mkdir(parents=True, exist_ok=True)
                _put(out, str(stored))
            except OSError:
                pass                       # a full or read-only store: the build goes on without it
        _count("miss")
        return done.returncode


# --- the build's side ---------------------------------------------------------------------------

def store_dir(cache: Path) -> Path:
    return Path(cache) / "glslc"


def wrapper_path(cache: Path, glslc: str) -> Path:
    """Where the wrapper for this glslc lives: named by the glslc it runs, so the define that names it
    (and with it the build folder's key) does not change with the interpreter that runs assemble."""
    tag = hashlib.sha256(_identity(glslc)).hexdigest()[:12]
    return store_dir(cache) / "bin" / f"glslc-{tag}"


def enable(cache: Path, glslc: str) -> Path:
    """Write (again) the wrapper for glslc and return its path. Its text names this interpreter and this
    file; written on every build, so a moved or removed virtual environment is never left named."""
    path = wrapper_path(cache, glslc)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (f"#!/bin/sh\n# assemble's cache in front of {glslc} (builder/units/shadercache.py)\n"
            f"exec {_sh(sys.executable)} -I -S {_sh(os.path.abspath(__file__))} --glslc {_sh(glslc)} "
            f"--store {_sh(str(store_dir(cache)))} -- \"$@\"\n")
    try:
        if path.read_text() == text:
            return path
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=".glslc-", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
    return path


def _sh(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def prune(cache: Path, cap: int = CAP_BYTES) -> int:
    """Remove the least recently used SPIR-V files until the store is under 80% of cap; returns how many."""
    files = []
    for p in store_dir(cache).glob("??/*.spv"):
        try:
            st = p.stat()
        except OSError:
            continue
        files.append((st.st_mtime_ns, st.st_size, p))
    total = sum(size for _, size, _ in files)
    if total <= cap:
        return 0
    removed = 0
    for _, size, p in sorted(files):
        if total <= cap * 0.8:
            break
        try:
            p.unlink()
        except OSError:
            continue
        total -= size
        removed += 1
    return removed


def read_stats(path: Path) -> tuple[int, int] | None:
    """(hits, misses) a build's wrapper runs counted; None when none ran (no shader was compiled)."""
    try:
        words = Path(path).read_text().split()
    except OSError:
        return None
    if not words:
        return None
    return words.count("hit"), words.count("miss")


if __name__ == "__main__":
    if len(sys.argv) < 6 or (sys.argv[1], sys.argv[3], sys.argv[5]) != ("--glslc", "--store", "--"):
        sys.stderr.write("usage: shadercache.py --glslc GLSLC --store DIR -- ARGS...\n")
        sys.exit(2)
    sys.exit(main(sys.argv))
