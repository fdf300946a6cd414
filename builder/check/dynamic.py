"""Run a runtime's own code to see what it can do on this host.

Every run uses an empty environment (plus variables the user names explicitly,
such as GGML_VK_VISIBLE_DEVICES for a CPU Vulkan driver) and a scratch working
directory, the way a service manager would start it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from builder.check.integrity import modules_in_bin
from builder.errors import AssembleError
from builder.paths import scratch
from builder.runtime.elf import expand_dirs, read_elf
from builder.runtime.layout import BIN_DIR, LIB_DIR
from builder.runtime.place import patchelf_tool
from builder.proc import run, stop

RUN_TIMEOUT = 120

# Probe one backend module in a clean process: load it as ggml would (RTLD_NOW),
# initialise its registry and list its devices through libggml-base's C API. ggml dlopen()s a
# module by its full path, so ld.so looks for the module's own dependencies in its DT_RPATH and
# then in the executable's: llama-server's (lib/). The probe's interpreter is therefore a copy of
# this Python given llama-server's DT_RPATH (probe_interpreter): a bare `python -c` would search
# the interpreter's paths instead and miss a dependency carried in lib/ (Debian's BLAS module and
# its libblas.so.3), and the host's LD_LIBRARY_PATH is never read (the run's environment is the
# check's own).
_PROBE = r"""
import ctypes, json, sys
runtime, module = sys.argv[1], sys.argv[2]
try:
    base = ctypes.CDLL(runtime + "/lib/libggml-base.so.0", mode=ctypes.RTLD_GLOBAL)
    mod = ctypes.CDLL(module, mode=ctypes.RTLD_LOCAL | 2)
except OSError as exc:
    print(json.dumps({"error": str(exc)})); sys.exit(0)
score = getattr(mod, "ggml_backend_score", None)   # a CPU variant for more features than this CPU has:
if score is not None:                              # ggml never initialises it here, and init could trap
    score.restype = ctypes.c_int
    if score() == 0:
        print(json.dumps({"unsupported": True})); sys.exit(0)
init = getattr(mod, "ggml_backend_init", None)
if init is None:
    print(json.dumps({"error": "no ggml_backend_init symbol"})); sys.exit(0)
init.restype = ctypes.c_void_p
reg = init()
if not reg:
    print(json.dumps({"devices": []})); sys.exit(0)
base.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]; base.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
base.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]; base.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
base.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]; base.ggml_backend_dev_name.restype = ctypes.c_char_p
base.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]; base.ggml_backend_dev_type.restype = ctypes.c_int
names = []
for i in range(base.ggml_backend_reg_dev_count(reg)):
    dev = base.ggml_backend_reg_dev_get(reg, i)
    if base.ggml_backend_dev_type(dev) != 0:  # GGML_BACKEND_DEVICE_TYPE_CPU
        names.append(base.ggml_backend_dev_name(dev).decode())
print(json.dumps({"devices": names}))
"""


@dataclass(frozen=True)
class Probe:
    devices: tuple[str, ...] = ()
    error: str | None = None
    unsupported: bool = False         # its ggml_backend_score() is 0 on this CPU: ggml would skip it


def module_files(runtime: Path, backend: str) -> list[Path]:
    return [p for p, b in modules_in_bin(runtime) if b == backend]


def _run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return run(argv, env=env, cwd=cwd, timeout=timeout)


def server_search_dirs(runtime: Path) -> tuple[Path, ...]:
    """The folders llama-server's DT_RPATH names, expanded: where ld.so looks for a dlopen()ed module's
    dependencies after the module's own DT_RPATH. A server that cannot be read counts as linked the way
    build and repair link it ($ORIGIN/../lib); one with DT_RUNPATH lends its modules nothing."""
    server = runtime / BIN_DIR / "llama-server"
    try:
        info = read_elf(server)
    except AssembleError:
        info = None
    if info is None:
        return (runtime.resolve() / LIB_DIR,)
    return expand_dirs(info.search_rpath, info)


def probe_interpreter(runtime: Path, folder: Path) -> tuple[str, dict[str, str]]:
    """(a Python to run the probe with, the variables it needs): a copy of this interpreter in `folder`
    whose DT_RPATH is llama-server's (then its own), so the modules it loads find their dependencies
    as in the server. Python finds its standard library through PYTHONHOME, the copy being elsewhere.
    This Python as it is when no copy can be made (then a dependency only lib/ holds is not found)."""
    dirs = list(server_search_dirs(runtime))
    real = Path(sys.executable).resolve()
    try:
        own = read_elf(real)
    except AssembleError:
        own = None
    if own is None or not dirs:
        return sys.executable, {}
    dirs += [d for d in expand_dirs((*own.rpath, *own.runpath), own) if d not in dirs]
    if any(":" in str(d) or "$" in str(d) for d in dirs) or ":" in sys.base_prefix + sys.base_exec_prefix:
        return sys.executable, {}         # an RPATH or PYTHONHOME cannot say such a path
    copy = folder / real.name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(real, copy)
        os.chmod(copy, 0o700)
        done = run([patchelf_tool(), "--force-rpath", "--set-rpath", ":".join(map(str, dirs)), str(copy)],
                   timeout=RUN_TIMEOUT)
    except (OSError, AssembleError, subprocess.TimeoutExpired):
        return sys.executable, {}
    if done.returncode != 0:
        return sys.executable, {}
    needs = {"PYTHONHOME": f"{sys.base_prefix}:{sys.base_exec_prefix}"}
    try:                              # the copy must start, or the probe would blame the module
        works = run([str(copy), "-c", "import ctypes, json"], env=needs, cwd=folder, timeout=RUN_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return sys.executable, {}
    return (str(copy), needs) if works.returncode == 0 else (sys.executable, {})


def probe_module(runtime: Path, module: Path, env: dict[str, str]) -> Probe:
    with scratch("probe-") as cwd:
        python, needs = probe_interpreter(runtime, cwd / "python")
        try:
            proc = _run([python, "-c", _PROBE, str(runtime), str(module)], {**env, **needs}, cwd)
        except subprocess.TimeoutExpired:
            return Probe(error=f"loading {module.name} hung for {RUN_TIMEOUT}s")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Probe(error=f"loading {module.name} crashed (exit {proc.returncode}): {tail}")
    data = json.loads(lines[-1])
    if "error" in data:
        return Probe(error=data["error"])
    if data.get("unsupported"):
        return Probe(unsupported=True)
    return Probe(devices=tuple(data["devices"]))


@dataclass(frozen=True)
class Listed:
    devices: list[str] = field(default_factory=list)
    error: str | None = None
    descriptions: dict[str, str] = field(default_factory=dict)   # "Vulkan0" -> "llvmpipe (LLVM 15.0.6, 256 bits)"


_DEVICE_LINE = re.compile(r"^\s+([A-Za-z]+\d+): (.*?)(?: \(\d+ MiB, \d+ MiB free\))?\s*$")


def list_devices(runtime: Path, env: dict[str, str]) -> Listed:
    with scratch("neutral-") as cwd:
        run = server_run(runtime, env, cwd)
    if run.not_started:
        return Listed(error=f"llama-server --list-devices did not start ({run.not_started})")
    assert run.proc is not None          # it started
    found = [m for ln in run.proc.stdout.splitlines() if (m := _DEVICE_LINE.match(ln))]
    return Listed([m.group(1) for m in found], descriptions={m.group(1): m.group(2) for m in found})


@dataclass(frozen=True)
class ServerRun:
    """One `llama-server --list-devices`: a check may read its output only if it started."""
    proc: subprocess.CompletedProcess[str] | None
    not_started: str | None = None    # why not: the first error line (None: it ran and listed devices)


# ld.so's LD_DEBUG trace lines ("  1234:\tfile=..."): never the error that stopped a start
_TRACE_LINE = re.compile(r"^\s*\d+:\s")


def server_run(runtime: Path, env: dict[str, str], cwd: Path) -> ServerRun:
    """Run llama-server --list-devices; it started only if it exited 0 and listed its devices."""
    try:
        proc = _run([str(runtime / "bin" / "llama-server"), "--list-devices"], env, cwd)
    except subprocess.TimeoutExpired:
        return ServerRun(None, f"--list-devices hung for {RUN_TIMEOUT}s")
    except OSError as exc:
        return ServerRun(None, f"cannot execute bin/llama-server: {exc.strerror or exc}")
    if proc.returncode == 0 and "Available devices" in proc.stdout:
        return ServerRun(proc)
    errors = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip() and not _TRACE_LINE.match(ln)]
    return ServerRun(proc, f"exit {proc.returncode}: {errors[0] if errors else 'no error output'}")


# A module that looks like a CPU backend variant to ggml's loader (libggml-cpu-*.so exporting
# ggml_backend_score above any real variant) and whose constructor writes a marker at dlopen().
_PLANT_SOURCE = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted_loaded(void) {
    FILE *f = fopen(%(marker)s, "w");
    if (f) { fputs("planted module loaded\n", f); fclose(f); }
}
__attribute__((visibility("default"))) int ggml_backend_score(void) { return 1 << 30; }
__attribute__((visibility("default"))) void *ggml_backend_init(void) { return (void *) 0; }
"""
PLANT_NAME = "libggml-cpu-planted.so"


def build_plant(folder: Path, marker: Path) -> Path | None:
    """Compile the marker module into folder/PLANT_NAME; None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    out = folder / PLANT_NAME
    with scratch("plant-src-") as tmp:
        src = tmp / "planted.c"
        src.write_text(_PLANT_SOURCE % {"marker": json.dumps(str(marker))})   # a valid C string literal
        proc = run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(src)])
    return out if proc.returncode == 0 else None


@dataclass(frozen=True)
class Planted:
    loaded: bool | None               # None: could not tell
    how: str                          # which proof was used, or why none


def planted_module_loaded(runtime: Path, env: dict[str, str]) -> Planted:
    """Start llama-server from a scratch folder holding a planted libggml-cpu-*.so: was it loaded?

    With a C compiler the plant's constructor leaves a marker (proof that its code ran);
    without one the plant is a copy of the runtime's CPU module and ld.so's own trace
    (LD_DEBUG=files) shows whether dlopen() mapped it.
    """
    with scratch("planted-") as tmp:
        cwd, markdir = tmp / "cwd", tmp / "marker"     # the marker is kept out of the working directory
        cwd.mkdir()
        markdir.mkdir()
        marker = markdir / "planted-module-ran"
        plant = build_plant(cwd, marker)
        compiled = plant is not None
        if plant is None:
            cpu = module_files(runtime, "cpu")
            if not cpu:
                return Planted(None, "no C compiler and no CPU module to plant")
            plant = cwd / PLANT_NAME
            shutil.copyfile(cpu[0], plant)
        run = server_run(runtime, {**env, "LD_DEBUG": "files"}, cwd)
        if marker.exists():       # proof of a load, whether or not the server then got far
            return Planted(True, f"the constructor of {plant} ran")
        if run.proc is not None and str(plant) in run.proc.stderr:
            return Planted(True, f"ld.so mapped {plant}")
        if run.not_started:       # a server that never started proves nothing about what it would load
            return Planted(None, f"llama-server did not start ({run.not_started})")
        proc = run.proc
        assert proc is not None          # it started
        if compiled:
            return Planted(False, "a planted libggml-cpu-*.so in the working directory was ignored "
                           "(its constructor never ran)")
        if "file=" not in proc.stderr:
            return Planted(None, "no C compiler for a marker module, and no ld.so trace (secure-execution mode)")
        return Planted(False, "a planted libggml-cpu-*.so in the working directory was ignored "
                       "(absent from ld.so's trace)")


@dataclass(frozen=True)
class Searched:
    found: tuple[tuple[str, str], ...] = ()   # (library, requester) looked for on LD_LIBRARY_PATH
    not_run: str | None = None                # why it could not tell


def ld_library_path_searched(runtime: Path, env: dict[str, str]) -> Searched:
    """(library, requester) for each carried library ld.so looked for on LD_LIBRARY_PATH before finding it.

    llama-server --list-devices runs with LD_LIBRARY_PATH naming an empty folder and
    ld.so's search trace on (LD_DEBUG=libs,files): a good runtime finds every carried
    library through DT_RPATH first, so the folder is never tried for one of them.
    Empty folder: nothing there can break the run. The trace counts only from a run that
    started: a failed start searches everywhere for what it lacks, and proves nothing.
    """
    carried = carried_names(runtime)
    with scratch("ldlp-") as tmp:
        decoy, cwd = tmp / "decoy", tmp / "cwd"
        decoy.mkdir()
        cwd.mkdir()
        run = server_run(runtime, {**env, "LD_LIBRARY_PATH": str(decoy), "LD_DEBUG": "libs,files"}, cwd)
    if run.not_started:
        return Searched(not_run=f"llama-server did not start ({run.not_started})")
    proc = run.proc
    assert proc is not None              # it started
    if "find library=" not in proc.stderr:
        return Searched(not_run="no ld.so search trace (LD_DEBUG) on this host")
    root, found, requester = str(runtime) + os.sep, [], {}
    current = None
    for line in proc.stderr.splitlines():
        text = line.split(":", 1)[-1].strip()
        if m := _NEEDED_BY.fullmatch(text):
            requester[m.group(1)] = m.group(2)
        elif m := _FIND.match(text):
            current = m.group(1)
        elif text.startswith("trying file=") and current in carried:
            tried = text[len("trying file="):]
            who = os.path.normpath(requester.get(current, "?"))
            if who.startswith(root):
                who = who[len(root):]
            elif who != "?":
                continue              # a host library's own lookup: not the runtime's doing
            if tried.startswith(str(decoy) + os.sep) and (current, who) not in found:
                found.append((current, who))
    return Searched(found=tuple(found))


_NEEDED_BY = re.compile(r"file=(\S+) \[\d+\];\s+(?:needed|dynamically loaded) by (.+?) \[\d+\]")  # paths may hold spaces
_FIND = re.compile(r"^find library=(\S+) \[\d+\]; searching")


def carried_names(runtime: Path) -> set[str]:
    """Every library name the runtime answers for: its files and links, what its manifest lists,
    and each NEEDED name of its files that the policy carries (a deleted copy is still ours)."""
    from builder.runtime import manifest
    from builder.runtime.elf import read_elf
    from builder.runtime.policy import BUNDLE, classify

    names: set[str] = set()
    for folder in ("bin", "lib"):
        d = runtime / folder
        if d.is_dir():
            names |= {p.name for p in d.iterdir()}
    try:
        m = manifest.Manifest.load(runtime)
    except manifest.ManifestInvalid:
        m = None
    if m is not None:
        names |= {Path(r.path).name for r in m.files if r.role != "data"}
        names |= {Path(r.path).name for r in m.symlinks}
    host = m.host_sonames() if m else set()
    for folder in ("bin", "lib"):
        d = runtime / folder
        for p in (sorted(d.iterdir()) if d.is_dir() else ()):
            if p.is_symlink() or not p.is_file():
                continue
            try:
                info = read_elf(p)
            except AssembleError:      # read_elf says every unreadable file this way
                continue
            for n in (info.needed if info else ()):
                if n not in host and classify(n)[0] == BUNDLE:
                    names.add(n)
    return names


@dataclass(frozen=True)
class Smoke:
    error: str | None = None
    predicted: int = 0
    prompt_tokens: int = 0
    seconds: float = 0.0
    prompt_per_second: float | None = None      # the server's own timings (generation and prompt apart)
    predicted_per_second: float | None = None
    foreign: tuple[str, ...] = ()
    log: str | None = None
    observed: dict[str, Any] = field(default_factory=dict)   # what while_loaded saw
    server_log: str = ""                                     # llama-server's stdout and stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess(Protocol):
    """What the readiness wait asks of the server: poll() is None while it runs, else how it ended. A Popen,
    or deploy's systemd unit seen as one."""

    def poll(self) -> int | str | None: ...


def wait_health(base: str, timeout: float, proc: ServerProcess | None = None) -> str | None:
    """Poll base/health until it answers 200 (None), the server exits, or `timeout` seconds pass (why not).
    The one readiness wait: verify's smoke and deploy's gate use it."""
    import requests                          # here: the CLI starts without loading it
    start = time.monotonic()
    while True:
        if proc is not None and (code := proc.poll()) is not None:
            return f"llama-server exited {code} before /health"
        try:
            if requests.get(base + "/health", timeout=2).status_code == 200:
                return None
        except requests.RequestException:
            pass
        if time.monotonic() - start > timeout:
            return f"/health not ok after {timeout:.0f}s"
        time.sleep(0.3)


SMOKE_PROMPT = " ".join(["the quick brown fox jumps over the lazy dog"] * 15)  # several hundred tokens


def foreign_libraries(pid: int, runtime: Path, owned_names: set[str]) -> tuple[str, ...]:
    """Mapped libraries that the runtime carries a copy of (by file name or SONAME), but that came from elsewhere."""
    from builder.runtime.elf import read_elf

    found = set()
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ()
    root = str(runtime) + os.sep
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or ".so" not in parts[5]:
            continue
        path = parts[5].strip()
        if path.startswith(root) or path in found:
            continue
        names = {Path(path).name}
        try:
            info = read_elf(path)      # maps shows the real file (libgomp.so.1.0.0); its SONAME is the name asked for
            if info is not None and info.soname:
                names.add(info.soname)
        except AssembleError:
            pass
        if names & owned_names:
            found.add(path)
    return tuple(sorted(found))


@dataclass(frozen=True)
class Completion:
    """One POST /completion: what came back (error: why not, one line; the caller adds its context)."""
    error: str | None = None
    predicted: int = 0                          # the tokens generated (timings.predicted_n, else tokens_predicted)
    prompt_tokens: int = 0
    seconds: float = 0.0
    prompt_per_second: float | None = None      # the server's own timings (generation and prompt apart)
    predicted_per_second: float | None = None
    died: bool = False                          # no answer at all: the server died or hung on the request


def complete(base: str, prompt: str, n_predict: int, timeout: float, headers: dict[str, str] | None = None,
             ignore_eos: bool = False) -> Completion:
    """POST base/completion once (temperature 0, no prompt cache) and read the answer's counts and timings.
    The one completion request: verify's smoke measures speeds with it, deploy's gate asks for exactly
    n_predict tokens (ignore_eos) with it."""
    import requests                          # here: the CLI starts without loading it
    t0 = time.monotonic()
    body: dict[str, Any] = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "cache_prompt": False}
    if ignore_eos:
        body["ignore_eos"] = True
    try:
        resp = requests.post(base + "/completion", headers=headers or {}, json=body, timeout=timeout)
    except requests.RequestException as exc:
        return Completion(error=f"the first request failed ({type(exc).__name__})", died=True)
    seconds = time.monotonic() - t0
    if resp.status_code != 200:
        return Completion(error=f"/completion answered {resp.status_code}: {resp.text[:200]}", seconds=seconds)
    try:
        answer = resp.json()
        timings = answer.get("timings") if isinstance(answer.get("timings"), dict) else {}
        predicted = int(timings.get("predicted_n", answer.get("tokens_predicted", 0)))
        prompt_tokens = int(answer.get("tokens_evaluated", timings.get("prompt_n", 0)))
    except (ValueError, AttributeError, TypeError):
        return Completion(error=f"/completion answered no JSON result: {resp.text[:200]}", seconds=seconds)
    return Completion(None, predicted, prompt_tokens, seconds, _rate(timings.get("prompt_per_second")),
                      _rate(timings.get("predicted_per_second")))


def smoke(runtime: Path, model: Path, device_args: list[str], env: dict[str, str], timeout: float = 240,
          while_loaded: Callable[[int], dict[str, Any]] | None = None, ctx: int = 2048) -> Smoke:
    """Start llama-server, wait for /health, send a real completion with a long prompt.

    `while_loaded(pid) -> dict`, if given, runs once the model is loaded (e.g. to sample GPU memory).
    The server's log comes back in `server_log` (a placement check reads its buffer sizes).
    """
    port = free_port()
    owned = carried_names(runtime)
    with scratch("smoke-run-") as cwd:
        log_path = cwd / "server.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen([str(runtime / "bin" / "llama-server"), "-m", str(model), "--host", "127.0.0.1",
                                     "--port", str(port), "-c", str(ctx), "-np", "1", *device_args],
                                    env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        try:
            base = f"http://127.0.0.1:{port}"
            if not_ready := wait_health(base, timeout, proc):
                return Smoke(error=f"{not_ready}: " + _tail(log_path), server_log=_read(log_path))
            observed = while_loaded(proc.pid) if while_loaded else {}
            done = complete(base, SMOKE_PROMPT, 8, timeout)
            if done.error:
                return Smoke(error=f"{done.error}: " + _tail(log_path) if done.died else done.error,
                             server_log=_read(log_path))
            if done.predicted < 1:
                return Smoke(error="no tokens generated", server_log=_read(log_path))
            foreign = foreign_libraries(proc.pid, runtime, owned)
            return Smoke(predicted=done.predicted, prompt_tokens=done.prompt_tokens, seconds=done.seconds,
                         foreign=foreign, observed=observed, prompt_per_second=done.prompt_per_second,
                         predicted_per_second=done.predicted_per_second, server_log=_read(log_path))
        finally:
            stop(proc)


def _read(log: Path) -> str:
    try:
        return log.read_text(errors="replace")
    except OSError:
        return ""


def _rate(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None


def _tail(log: Path, n: int = 3) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])
