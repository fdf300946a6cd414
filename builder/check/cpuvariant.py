"""Which CPU backend module ggml loads on this host, and whether it is the best one shipped.

A runtime built with GGML_CPU_ALL_VARIANTS carries one `bin/libggml-cpu-<level>.so` per x86
level (builder.config.cpulevels); ggml's loader dlopen()s each, asks its ggml_backend_score()
and keeps the highest. A variant that fails to load is skipped without a word (release builds
scan with silent=true), so a broken best variant silently costs speed: this check names the one
that loaded and compares it with the best this CPU can run.

How the loaded module is seen. ggml does log "load_backend: loaded CPU backend from PATH"
(GGML_LOG_INFO, ggml-backend-reg.cpp), but llama-server routes ggml's INFO through common's
logger at verbosity 4 (trace) while the default threshold is 3: `llama-server --list-devices`
prints nothing about it by default. With LLAMA_ARG_LOG_VERBOSITY=4 the line appears, yet it is
queued to a logging thread that `--list-devices` does not wait for (exit(0) with a leaked
logger): it was missing in 2 of 40 runs on the 2-core development machine. So the proof is
ld.so's own trace, written synchronously: with LD_DEBUG=files every dlopen() prints
"file=PATH [0];  dynamically loaded by ..." and every dlclose() that unmaps it prints
"file=PATH [0];  destroying link map". The scan opens and closes every variant; the chosen one
is opened again and stays mapped, so the libggml-cpu*.so of bin/ whose link map is still alive
when the process exits is the one ggml loaded. The ggml log line (verbosity 4) is read only
when there is no trace at all (a secure-execution process ignores LD_DEBUG).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.check.cpulevel import HINT, NAME as LEVELS_CHECK, compiled_features, describe
from builder.check.dynamic import RUN_TIMEOUT, probe_module
from builder.check.report import FAIL, PASS, SKIP, Check
from builder.config import cpulevels
from builder.paths import scratch
from builder.proc import run

NAME = "cpu variant"
CPU_PREFIX = "libggml-cpu"
NOT_LOADED = "CPU backend is not loaded"

# ld.so's trace: "   1234:\tfile=/x/libggml-cpu-haswell.so [0];  dynamically loaded by /x/libggml.so.0 [0]"
_FILE_EVENT = re.compile(r"^\s*\d+:\s+file=(.+?) \[\d+\];\s+(dynamically loaded by|destroying link map)")
_ANY_FILE_EVENT = re.compile(r"^\s*\d+:\s+file=", re.M)
_TRACE_LINE = re.compile(r"^\s*\d+:\s")
_GGML_LOADED = re.compile(r"load_backend: loaded CPU backend from (.+?)\s*$", re.M)
_ON = {"ON", "1", "TRUE", "YES", "Y"}


@dataclass(frozen=True)
class Loaded:
    """What one `llama-server --list-devices` showed about the CPU backend."""
    module: str | None                # file name of the CPU module left loaded
    reason: str | None = None         # why none, one line
    started: bool = True              # it ran to its device list (a failed start proves nothing)
    sigill: bool = False              # it died of an illegal instruction


def is_cpu_module(name: str) -> bool:
    return name.startswith(CPU_PREFIX) and (name == CPU_PREFIX + ".so" or name.startswith(CPU_PREFIX + "-")) \
        and name.endswith(".so")


def shipped_modules(runtime: Path) -> tuple[str, ...]:
    """File names of the CPU backend modules in bin/, sorted."""
    d = Path(runtime) / "bin"
    return tuple(sorted(p.name for p in d.iterdir() if is_cpu_module(p.name))) if d.is_dir() else ()


def modules_left_loaded(trace: str, bin_dir: Path | None = None) -> tuple[str, ...] | None:
    """CPU modules (of bin_dir when given) that ld.so mapped and never unmapped; None: no trace."""
    if not _ANY_FILE_EVENT.search(trace):
        return None
    live: dict[str, None] = {}        # ordered: the last opened last
    want = os.path.realpath(bin_dir) if bin_dir is not None else None
    for line in trace.splitlines():
        m = _FILE_EVENT.match(line)
        if not m:
            continue
        path, event = m.group(1), m.group(2)
        if not is_cpu_module(os.path.basename(path)):
            continue
        if want is not None and os.path.realpath(os.path.dirname(path)) != want:
            continue
        live.pop(path, None)
        if event.startswith("dynamically"):
            live[path] = None
    return tuple(os.path.basename(p) for p in live)


def logged_module(text: str) -> str | None:
    """The module named by ggml's "load_backend: loaded CPU backend from PATH", if logged."""
    m = _GGML_LOADED.search(text)
    return os.path.basename(m.group(1)) if m else None


def interpret(proc: subprocess.CompletedProcess[str], bin_dir: Path | None = None) -> Loaded:
    """Read one run of `llama-server --list-devices` (LD_DEBUG=files, log verbosity 4)."""
    if proc.returncode in (-signal.SIGILL, 128 + signal.SIGILL):
        return Loaded(None, "llama-server died of SIGILL (illegal instruction): code built for a newer CPU "
                      "than this one ran", started=False, sigill=True)
    if proc.returncode != 0 or "Available devices" not in proc.stdout:
        errors = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip() and not _TRACE_LINE.match(ln)]
        return Loaded(None, f"llama-server --list-devices did not start (exit {proc.returncode}: "
                      f"{errors[0] if errors else 'no error output'})", started=False)
    left = modules_left_loaded(proc.stderr, bin_dir)
    if left is None:
        name = logged_module(proc.stdout + "\n" + proc.stderr)
        if name is None:
            return Loaded(None, "cannot tell: no ld.so trace (LD_DEBUG ignored here) and ggml's log did not "
                          "name a CPU backend")
        return Loaded(name)
    if not left:
        return Loaded(None, NOT_LOADED)
    if len(left) > 1:
        return Loaded(None, f"more than one CPU module stayed loaded: {', '.join(left)}")
    return Loaded(left[0])


def observe(runtime: Path, env: dict[str, str], wrapper: tuple[str, ...] = ()) -> Loaded:
    """Run `<wrapper...> bin/llama-server --list-devices` from a scratch folder, with exactly `env`
    plus ld.so's file trace and ggml's INFO log, and say which CPU module it left loaded."""
    runtime = Path(runtime)
    argv = [*wrapper, str(runtime / "bin" / "llama-server"), "--list-devices"]
    full = {**env, "LD_DEBUG": "files", "LLAMA_ARG_LOG_VERBOSITY": "4"}
    with scratch("cpuvariant-") as cwd:
        try:
            proc = run(argv, env=full, cwd=cwd, timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            return Loaded(None, f"llama-server --list-devices hung for {RUN_TIMEOUT}s", started=False)
        except OSError as exc:
            return Loaded(None, f"cannot execute {argv[0]}: {exc.strerror or exc}", started=False)
    return interpret(proc, runtime / "bin")


def loaded_cpu_module(runtime: Path, env: dict[str, str], wrapper: tuple[str, ...] = ()) -> tuple[str | None, str | None]:
    """(file name of the CPU backend module ggml loaded, None) or (None, one-line reason).

    `wrapper` goes before the executable (e.g. ("qemu-x86_64", "-cpu", "Nehalem")). See the
    module's docstring for how the loaded module is told: ld.so's LD_DEBUG=files trace."""
    seen = observe(runtime, env, wrapper)
    return seen.module, seen.reason


def why_not_loaded(runtime: Path, module: Path, env: dict[str, str]) -> str:
    """One line on why ggml's scan passed over `module`, which it never says: loaded alone, as the
    scan does, its dlopen() error or its score."""
    probe = probe_module(runtime, module, env)
    if probe.error:
        return f"loading it alone: {probe.error}"
    if probe.unsupported:
        return "its ggml_backend_score() says this CPU cannot run it"
    return "it loads alone"


# --- judging --------------------------------------------------------------------------


def _file(level: str) -> str:
    return f"{CPU_PREFIX}-{level}.so"


def _missing(level: cpulevels.CpuLevel, flags: frozenset[str]) -> str:
    return " ".join(sorted(level.cpu_flags() - set(flags)))


def single_level_features(defines: dict[str, Any] | None) -> tuple[str, ...] | None:
    """The GGML_<ISA> options a single-level build turned ON (None: none recorded)."""
    if not defines or not any(f"GGML_{f}" in defines for f in cpulevels.FEATURES):
        return None
    return tuple(f for f in cpulevels.FEATURES if str(defines.get(f"GGML_{f}", "")).upper() in _ON)


def _cpu_unit_defines(runtime: Path) -> dict[str, Any] | None:
    from builder.runtime.manifest import Manifest, ManifestInvalid

    try:
        units = Manifest.load(runtime).units
    except ManifestInvalid:
        return None
    unit = next((u for u in units if "cpu" in u.backends), units[0] if units else None)
    return dict(unit.defines) if unit is not None else None


def judge(shipped: tuple[str, ...], seen: Loaded, flags: frozenset[str], defines: dict[str, Any] | None = None,
          why_not: str | None = None) -> Check:
    """The verdict on what loaded. `shipped`: CPU module file names in bin/; `defines`: the CPU
    unit's CMake defines (single-level runtimes); `why_not`: what loading the best level alone said."""
    if not shipped:
        return Check(NAME, SKIP, "not run: no libggml-cpu*.so in bin/ (the CPU backend is not a loadable module)")
    if seen.sigill:
        return Check(NAME, FAIL, seen.reason or "SIGILL", "run bin/llama-server --list-devices under gdb to see "
                     "which library holds the instruction")
    if not seen.started:
        return Check(NAME, SKIP, f"not run: {seen.reason}")
    levels = [lv for n in shipped if (v := cpulevels.variant_of(n)) and (lv := cpulevels.level(v))]
    if not levels:
        return _judge_single(shipped, seen, flags, defines)
    present = tuple(lv.name for lv in levels)
    best = cpulevels.best_level(flags, present) if flags else None
    lowest = min(levels, key=cpulevels.CpuLevel.score)
    hint = "see why: LD_DEBUG=files bin/llama-server --list-devices (which variants dlopen), ldd bin/{}"
    if seen.module is None:
        if seen.reason != NOT_LOADED:
            return Check(NAME, SKIP, f"not run: {seen.reason}")
        if not flags:
            return Check(NAME, FAIL, f"{NOT_LOADED}: the runtime is unusable on this CPU (its flags are unreadable; "
                         f"the lowest level shipped is {lowest.name})", hint.format(_file(lowest.name)))
        if best is None:
            return Check(NAME, FAIL, f"{NOT_LOADED}: the runtime is unusable on this CPU: the lowest level shipped, "
                         f"{lowest.name}, needs {_missing(lowest, flags)}",
                         f"ship a lower level ({cpulevels.LEVELS[0].name} runs on every x86-64)")
        return Check(NAME, FAIL, f"{NOT_LOADED}, although this CPU runs {_file(best.name)}"
                     + (f" ({why_not})" if why_not else ""), hint.format(_file(best.name)))
    variant = cpulevels.variant_of(seen.module)
    got = cpulevels.level(variant) if variant else None
    if got is None:
        return Check(NAME, SKIP, f"not run: {seen.module} loads, a level builder/config/cpulevels.py does not know")
    if not flags:
        return Check(NAME, SKIP, f"not run: {seen.module} loads; this CPU's flags are unreadable (/proc/cpuinfo), "
                     f"so whether it is the best of the {len(levels)} levels shipped cannot be told")
    if not got.runs_on(flags):
        return Check(NAME, FAIL, f"{seen.module} loads, but this CPU lacks {_missing(got, flags)} that it needs: "
                     "ggml's CPU detection and /proc/cpuinfo disagree", hint.format(seen.module))
    if best is not None and got.name != best.name:
        return Check(NAME, FAIL, f"{seen.module} loads, but this CPU runs {_file(best.name)}, shipped beside it: "
                     "full speed silently lost" + (f" ({why_not})" if why_not else ""), hint.format(_file(best.name)))
    return Check(NAME, PASS, f"{seen.module} loads: the best of the {len(levels)} levels shipped for this CPU")


def _judge_single(shipped: tuple[str, ...], seen: Loaded, flags: frozenset[str], defines: dict[str, Any] | None) -> Check:
    name = shipped[0] if len(shipped) == 1 else f"one of {', '.join(shipped)}"
    features = single_level_features(defines)
    if features is None:
        level, what = None, "one level (its instruction-set options are not in the manifest: ggml's defaults)"
    else:
        level = next((lv for lv in cpulevels.LEVELS if set(lv.features) == set(features)), None)
        opts = ", ".join(f"GGML_{f}" for f in features) or "no GGML_ instruction-set option"
        what = f"one level, {level.name} ({opts} ON)" if level else f"one level ({opts} ON)"
    needs = frozenset(flag for f in (features or ()) for flag in cpulevels.FEATURES[f][1])
    lacks = " ".join(sorted(needs - set(flags))) if flags and features is not None else ""
    if seen.module is None:
        if seen.reason != NOT_LOADED:
            return Check(NAME, SKIP, f"not run: {seen.reason}")
        return Check(NAME, FAIL, f"{NOT_LOADED}: the runtime is unusable on this CPU: {name} is {what}"
                     + (f" and this CPU lacks {lacks}" if lacks else ""),
                     'rebuild with [cpu] variants = "all" (the best level picked at run time)')
    if lacks:
        return Check(NAME, FAIL, f"{seen.module} loads, but it is {what} and this CPU lacks {lacks}",
                     'rebuild with [cpu] variants = "all" (the best level picked at run time)')
    if not flags and features:
        return Check(NAME, SKIP, f"not run: {seen.module} loads ({what}); this CPU's flags are unreadable")
    return Check(NAME, PASS, f"{seen.module} loads: {what}")


def cpu_variant_check(runtime: Path, env: dict[str, str], flags: frozenset[str] | None = None) -> Check:
    """Name the CPU variant that loads on this host and whether it is the best one shipped for it."""
    runtime = Path(runtime)
    flags = cpulevels.host_cpu_flags() if flags is None else flags
    shipped = shipped_modules(runtime)
    if not shipped:
        return judge(shipped, Loaded(None), flags)
    seen = observe(runtime, env)
    levels = tuple(v for n in shipped if (v := cpulevels.variant_of(n)) and cpulevels.level(v))
    why_not = None
    best = cpulevels.best_level(flags, levels) if levels and flags else None
    if best is not None and seen.started and seen.module != _file(best.name):
        # The loader says nothing about a variant it skipped: load the best one alone to hear why.
        why_not = why_not_loaded(runtime, runtime / "bin" / _file(best.name), env)
    verdict = judge(shipped, seen, flags, None if levels else _cpu_unit_defines(runtime), why_not)
    return _compiled_as_named(runtime, seen.module, verdict) if verdict.status in (PASS, FAIL) else verdict


def _compiled_as_named(runtime: Path, module: str | None, verdict: Check) -> Check:
    """A pass only if the module loaded holds its level's code: the best name over x64 code loses speed too.
    A failure is told by the same fact when it holds: modules whose code is not what their names say score
    alike, and which of them ggml keeps is the order it read the folder in, so "this CPU runs another" or
    "this CPU lacks what it needs" would name a symptom of that order rather than the cause."""
    level = cpulevels.level(cpulevels.variant_of(module) or "") if module else None
    if level is None or module is None:
        return verdict
    features = compiled_features(runtime / "bin" / module)
    if isinstance(features, str) or features == level.reported():
        return verdict                # unreadable: the CPU levels check names it
    return Check(NAME, FAIL, f"{module} loads, but it was compiled with {describe(features)}, not {level.name}'s: "
                 f"full speed silently lost (see '{LEVELS_CHECK}')", HINT)
