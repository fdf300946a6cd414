"""The one way assemble runs another program: every command is said at -v, and each kind of
run has one function.

    run         a short command, output captured (git, patchelf, dpkg-query, a compiler check)
    git         run for git, with an environment that cannot reach outside the given repository
    probe       a short command with a hard time bound; the whole process group dies on timeout
    run_logged  a long command (CMake, Ninja, a container engine): everything to a log file,
                Ninja's [n/N] drawn as a progress bar, the last lines shown when it fails
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder import ui
from builder.errors import AssembleError, BuildFailed

PROBE_TIMEOUT = 5.0        # seconds; a healthy tool answers --version in well under one
_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


def stop(proc: subprocess.Popen[Any], grace: float = 15) -> None:
    """Ask a started process to end, then make it: SIGTERM, `grace` seconds, SIGKILL."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def last_line(proc: subprocess.CompletedProcess[Any]) -> str:
    """What a failed command said last (stderr, else stdout): the one line an error quotes."""
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()
    return lines[-1] if lines else "(no output)"


def command_line(argv: Sequence[str]) -> str:
    return shlex.join(str(a) for a in argv)


def run(argv: Sequence[str | Path], *, cwd: Path | str | None = None, env: Mapping[str, str] | None = None,
        timeout: float | None = None, text: bool = True, input: str | bytes | None = None  # noqa: A002 -- subprocess.run's name
        ) -> subprocess.CompletedProcess[Any]:
    """Run to completion with output captured; never raises for a non-zero exit (the caller words it)."""
    cmd = [str(a) for a in argv]
    ui.detail(f"$ {command_line(cmd)}" + (f"   (in {cwd})" if cwd else ""))
    return subprocess.run(cmd, cwd=cwd, env=None if env is None else dict(env), capture_output=True, text=text,
                          timeout=timeout, input=input, errors="replace" if text else None)


# Variables that point git at another repository, index or object store than the one asked for.
# Everything else the user set (GIT_SSL_CAINFO, proxies, ...) is kept: a network fetch needs it.
_GIT_REPO_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
                  "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_PREFIX", "GIT_QUARANTINE_PATH",
                  "GIT_CEILING_DIRECTORIES")


def git_env(extra: Mapping[str, str] | None = None, ceiling: Path | None = None) -> dict[str, str]:
    """git's environment: no prompts, C locale, none of the caller's repository-locating variables (a
    GIT_DIR or GIT_INDEX_FILE of the user's would point git elsewhere); with `ceiling`, a repository
    above that folder is never found."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_REPO_VARS}
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    if ceiling is not None:
        env["GIT_CEILING_DIRECTORIES"] = str(Path(ceiling).resolve().parent)
    env.update(extra or {})
    return env


def git(*args: str, cwd: Path | str | None = None, env: Mapping[str, str] | None = None,
        own_root: bool = False, timeout: float | None = 600, text: bool = True) -> subprocess.CompletedProcess[Any]:
    """git ARGS in cwd. own_root: cwd is its own repository's top (a repository above it must not be
    found: git would treat cwd as a subfolder and, for `apply`, silently skip the patch's paths)."""
    full = git_env(env, ceiling=Path(cwd) if own_root and cwd else None)
    try:
        return run(["git", *args], cwd=cwd, env=full, timeout=timeout, text=text)
    except FileNotFoundError as exc:
        if exc.filename != "git":        # cwd missing: the caller's matter
            raise
        raise AssembleError("git is not installed: assemble fetches, verifies and patches llama.cpp with it",
                            where="PATH", fix="install git (e.g. apt install git)") from None


# --- bounded probes -------------------------------------------------------------------------

@dataclass(frozen=True)
class Probe:
    """What one short command did: output, exit status, or why it has none."""
    argv: tuple[str, ...]
    returncode: int | None       # None: missing or timed out
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    missing: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


def probe(argv: Sequence[str | Path], timeout: float = PROBE_TIMEOUT, env: Mapping[str, str] | None = None) -> Probe:
    """Run a short command with a hard time bound.

    The command gets its own process group, and on timeout the whole group is
    killed: a wrapper script whose child still holds the output pipe would
    otherwise keep subprocess.run waiting long after its own timeout.
    """
    cmd = tuple(str(a) for a in argv)
    ui.detail(f"$ {command_line(cmd)}")
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=None if env is None else dict(env), start_new_session=True)
    except OSError:
        return Probe(cmd, None, missing=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            out, err = proc.communicate(timeout=1)
        except subprocess.TimeoutExpired:  # a grandchild left the group and kept the pipe: give up on it
            for pipe in (proc.stdout, proc.stderr):
                if pipe:
                    pipe.close()
            proc.wait()
            out, err = b"", b""
        return Probe(cmd, None, _decode(out), _decode(err), timed_out=True)
    return Probe(cmd, proc.returncode, _decode(out), _decode(err))


def run_probe(argv: Sequence[str | Path], timeout: float = PROBE_TIMEOUT, env: Mapping[str, str] | None = None
              ) -> str | None:
    """stdout+stderr of a short command, or None if it is missing, fails or hangs."""
    p = probe(argv, timeout, env)
    return p.text if p.ok else None


def _decode(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


# --- long, logged runs -------------------------------------------------------------------------

class OuterSteps:
    """Which [n/N] lines are the outer build's own. A nested Ninja (ggml's vulkan-shaders-gen is an
    ExternalProject) prints its own [1/2] [2/2] into the same stream; the outer build always has
    more steps than a nested one, so a line with a smaller total than the largest seen is not ours."""

    def __init__(self) -> None:
        self.total = 0

    def accept(self, done: int, total: int) -> bool:
        if total < self.total:
            return False
        self.total = total
        return True


def run_logged(argv: Sequence[str | Path], log: Path, label: str, *, fix: str, env: Mapping[str, str] | None = None,
               progress: bool = False) -> None:
    """Run, append everything to log (tail -f works), show Ninja's [n/N] as a bar; BuildFailed with
    the last lines and the log's path when it fails."""
    cmd = [str(a) for a in argv]
    log.parent.mkdir(parents=True, exist_ok=True)
    tail: deque[str] = deque(maxlen=25)
    bar = ui.Progress(label, None, unit="steps") if progress else None
    ui.detail(f"$ {command_line(cmd)}")
    with open(log, "a", encoding="utf-8", errors="replace", buffering=1) as out:
        out.write(f"\n$ {command_line(cmd)}\n")
        out.flush()
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    errors="replace", bufsize=1, env=None if env is None else dict(env))
        except OSError as exc:
            raise BuildFailed(f"cannot start {cmd[0]} ({exc.strerror or exc})", where=label, fix=fix) from None
        assert proc.stdout is not None
        steps = OuterSteps()
        for line in proc.stdout:
            out.write(line)
            tail.append(line.rstrip("\n"))
            ui.detail(line.rstrip("\n"))
            m = _STEP.match(line)
            if bar and m and steps.accept(int(m.group(1)), int(m.group(2))):
                bar.update(int(m.group(1)), int(m.group(2)), note=line[m.end():].strip()[-40:] if ui.is_tty() else "")
        rc = proc.wait()
    if bar:
        bar.finish("done" if rc == 0 else "")
    if rc != 0:
        raise BuildFailed(f"{label} failed (exit {rc}); full log: {log}", where=cmd[0], fix=fix,
                          details="\n".join(tail))


def dies_with_us() -> Callable[[], None]:
    """A Popen preexec_fn: the child is SIGKILLed when this process dies, even by SIGKILL (Linux's
    PR_SET_PDEATHSIG survives the exec), so a killed command never leaves a server it started running."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)        # loaded before the fork, not in the child
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(1, signal.SIGKILL)               # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent:                  # the parent died before prctl: nobody to die with
            os._exit(1)
    return preexec
