"""verify --ops: does each GPU device compute the right numbers?

Upstream's judge, `tests/test-backend-ops test`, runs every case of the chosen ops on one device
and on the CPU backend and compares the two. The runtime carries the program, built from the same
tree with the same defines (layout.TESTS_DIR); this module runs it per device with the checks'
environment (empty but for --check-env) from a scratch folder, reads its per-case results, turns
them into one Check per device, and keeps the last result per device in the runtime's sidecar
record (layout.OPS_RECORD; why a sidecar and not manifest.json: see layout.py).

Output format: `--output sql`. Each case is one `INSERT INTO test_backend_ops (fields) VALUES
('...', ...);` line naming its own fields, with `supported` and `passed` as 0/1. The console
format only colours OK/FAIL, and `--output csv` leaves the `passed` column out (csv_printer's
field list), so neither says per case whether it passed as plainly. A failing comparison prints
its error (e.g. "[SCALE] ERR = 0.045505699 > 0.000000100 ") just before the INSERT on the same line, so a line is
searched, never matched from its start. A case that fails before it has a result (a failed
allocation) has no INSERT line: the exit status catches it.

A device runs as one process with -j threads, or, for a backend whose threads are unsafe (Vulkan), as
runs of its cases, each a process given its range of the cases with -p (opshares: from the program's own list
of the device's supported cases where it can give one), several at once and the next started as one ends;
their cases are merged into one result (parallelism() decides which, per device).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from builder import __version__, ui
from builder.check.opshares import by_odd_digits, ecma_literal, joined, range_runs
from builder.check.report import FAIL, PASS, SKIP, WARN, Check
from builder.config.recipe import DEVICE_PREFIX
from builder.errors import AssembleError
from builder.locks import write_atomic
from builder.paths import cache_dir, scratch
from builder.proc import command_line
from builder.runtime.layout import BACKEND_OPS, OPS_RECORD, TESTS_DIR

# The ops a transformer's forward pass runs on the GPU, by the names test-backend-ops matches with -o
# (ggml_op_desc(): a GLU op is matched by its kind, SWIGLU, never by "GLU", which matches no case).
# Read from the pin's src/llama-graph.cpp, src/llama-kv-cache.cpp and src/models/.
DEFAULT_OPS: tuple[str, ...] = (
    "MUL_MAT",         # every projection: Q/K/V/O, the FFN, the output head; quantized and float types
    "MUL_MAT_ID",      # the experts of a mixture-of-experts FFN
    "FLASH_ATTN_EXT",  # attention when flash attention is on (the server's default where the device has it)
    "SOFT_MAX",        # attention without flash attention, and a MoE router's gate
    "ROPE",            # rotary position embedding of Q and K
    "RMS_NORM",        # the norm of llama-family blocks
    "GET_ROWS",        # token embeddings, MoE expert selection
    "SET_ROWS",        # writes of K and V into the KV cache
    "CPY",             # type conversions (an f16 KV cache, casts)
    "ADD",             # residual connections and biases
    "MUL",             # norm weights, gating
    "SCALE",           # attention's kq scale, embedding scales
    "SWIGLU",          # the gated FFN of llama, qwen, mistral
    "GEGLU",           # the gated FFN of gemma
)


@dataclass(frozen=True)
class CaseRule:
    """Which cases of one op family the inference selection keeps: a case whose params string starts with
    `lead` (a regex naming the family's first fields) keeps only the listed values of each field."""
    lead: str
    allowed: tuple[tuple[str, tuple[str, ...]], ...]

    def assertion(self) -> str:
        """ECMAScript lookaheads (std::regex, what test-backend-ops' -p is read with) at the string's start."""
        return f"(?={self.lead})" + "".join(
            f"(?=(?:.*,)?{name}=(?:{'|'.join(ecma_literal(v) for v in values)})(?:,|$))" for name, values in self.allowed)


# The weight types of llama-quantize's usual presets (Q4_K_M and the other K mixes, Q4_0/Q5_x/Q8_0, IQ4_XS,
# F16/BF16/F32) and MXFP4 (gpt-oss), as test-backend-ops names them.
WEIGHT_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_K", "q3_K", "q4_K", "q5_K",
                "q6_K", "iq4_nl", "iq4_xs", "mxfp4")
# The cases `--ops` alone runs: of the pin's 10,602 cases of DEFAULT_OPS, those a text model's forward pass
# runs under llama-server's defaults (4,206 at the pin; upstream's list explores every type, head size and
# model feature). An op no rule names keeps all its cases. Read from the pin's src/llama-graph.cpp
# (build_attn_mha, build_ffn, build_moe_ffn), common/common.h (cache_type_k/v = f16) and include/llama.h
# (LLAMA_ROPE_TYPE_*):
INFERENCE_CASES: tuple[CaseRule, ...] = (
    # flash attention: the llama-family head sizes, an f16 KV cache (the server's default cache type), the causal
    # mask; no attention sinks (gpt-oss), ALiBi (max_bias) or soft-capping (gemma 2): other models' features
    CaseRule("hsk=", (("hsk", ("64", "128", "256")), ("type_K", ("f16",)), ("mask", ("1",)), ("sinks", ("0",)),
                      ("max_bias", ("0.000000",)), ("logit_softcap", ("0.000000",)))),
    # MUL_MAT and MUL_MAT_ID: weights of the usual types times f32 activations (src1 of every projection)
    CaseRule("type_a=", (("type_a", WEIGHT_TYPES), ("type_b", ("f32",)))),
    # ROPE: normal (llama) and neox (qwen, phi, gemma) modes; not the multimodal m-rope and vision modes
    CaseRule(r"type=\w+,ne_a=\[[^\]]*\],n_dims=", (("mode", ("0", "2")),)),
)


def selection_filter(rules: tuple[CaseRule, ...]) -> str:
    """A zero-width ECMAScript pattern, anchored at the start: a params string passes when, for every rule whose
    lead it starts with, every field of that rule has an allowed value (a string no lead names passes)."""
    return "^" + "".join(f"(?:(?!{r.lead})|{r.assertion()})" for r in rules)


CASE_SETS = ("inference", "all")   # what a record's `cases` may say: a rule-made selection, or every case


@dataclass(frozen=True)
class Selection:
    """The cases verify --ops runs: every case of `ops`, or with `rules` only those inference runs."""
    ops: tuple[str, ...]
    rules: tuple[CaseRule, ...] = ()

    @property
    def cases(self) -> str:
        return CASE_SETS[0] if self.rules else CASE_SETS[1]

    @property
    def params(self) -> str | None:
        return selection_filter(self.rules) if self.rules else None


DEFAULT_SELECTION = Selection(DEFAULT_OPS, INFERENCE_CASES)
BUDGET_S = 60.0          # per device on the H200 (issue 31); over it is a warning, never a failure
TIMEOUT_S = 1800.0       # a hung device is a failure; NVIDIA's Vulkan driver took 68-143 s for the default selection
PROGRESS_EVERY_S = 30.0  # a running device's count of finished cases, on stderr: a run stopped by a limit leaves a rate
POLL_S = 0.2
MAX_NAMED = 3            # failing cases named in a check's line
RECORD_FORMAT = 3         # 2: each device says which cases ran (cases); 3: its failing cases' re-runs, its cache
_OP_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_INSERT = re.compile(r"INSERT INTO test_backend_ops \(([^)]*)\) VALUES \((.*)\);\s*$")
_VALUE = re.compile(r"'([^']*)'")
PRINTED = " printed"       # sql_rows' key for the text before an INSERT: no column of the program is named so
_SQL_HEADER = re.compile(r"CREATE TABLE |\s+\w+ (?:TEXT|INTEGER|REAL),?$|\);$")
_VALUES = re.compile(r"'[^']*'(?:, '[^']*')*")          # the whole VALUES list: a stray quote breaks it


def parse_op_list(text: str, where: str = "--ops") -> tuple[str, ...]:
    """"ADD,MUL_MAT" -> ("ADD", "MUL_MAT"): op names as test-backend-ops --list-ops prints them."""
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    bad = [n for n in names if not _OP_NAME.fullmatch(n)]
    if not names or bad:
        raise AssembleError(f"not an op list: {text!r}" + (f" ({', '.join(bad)} is not an op name)" if bad else ""),
                            where=where, fix="give comma-separated op names as `tests/test-backend-ops --list-ops` "
                            "prints them, e.g. --ops MUL_MAT,SCALE, or --ops alone for the default list")
    return names


# --- one run -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class OpCase:
    """One case of test-backend-ops' test mode on one device."""
    op: str
    params: str
    supported: bool
    passed: bool
    error: str = ""

    @property
    def label(self) -> str:
        return f"{self.op}({self.params})"


@dataclass(frozen=True)
class Parsed:
    cases: tuple[OpCase, ...]
    unreadable: int = 0          # INSERT lines whose values did not match their fields


def sql_rows(text: str) -> Iterator[dict[str, str] | None]:
    """Each INSERT line of `test-backend-ops --output sql` as {field: value} (every mode: test, support, ...),
    or None for one whose values do not match its fields; other lines are skipped. What the program printed
    before the INSERT on its line (a failing comparison's "[OP] ERR = ... > ...") is under PRINTED."""
    for line in text.splitlines():
        m = _INSERT.search(line)
        if not m:
            continue
        fields = [f.strip() for f in m.group(1).split(",")]
        values = _VALUE.findall(m.group(2)) if _VALUES.fullmatch(m.group(2)) else []
        yield ({**dict(zip(fields, values, strict=True)), PRINTED: line[:m.start()].strip()}
               if len(values) == len(fields) else None)


def parse_sql(text: str, mode: str = "test") -> Parsed:
    """The cases of one mode (test; support: the program's list) of `test-backend-ops --output sql` (other
    lines are ignored)."""
    cases, unreadable = [], 0
    for row in sql_rows(text):
        if row is None:
            unreadable += 1
        elif row.get("test_mode") == mode and row.get("op_name"):
            passed = row.get("passed") == "1"
            # A failing row's own error is what was printed before it. A passing row's prefix is ignored: with -j
            # threads another case's error can land in front of it (the printf is not under the printer's lock).
            cases.append(OpCase(row["op_name"], row.get("op_params", ""), row.get("supported") == "1", passed,
                                (not passed and row.get(PRINTED)) or row.get("error_message", "")))
    return Parsed(tuple(cases), unreadable)


@dataclass(frozen=True)
class OpsRun:
    """What `test-backend-ops test -b DEVICE` did: one process, or all of the device's shards merged."""
    device: str
    ops: tuple[str, ...]
    seconds: float
    parsed: Parsed = field(default_factory=lambda: Parsed(()))
    returncode: int | None = None    # None: it never finished (see `error`)
    error: str | None = None         # could not start, or timed out
    timed_out: bool = False          # stopped at the timeout (the cases counted are those it finished)
    stderr_tail: str = ""            # "shard K/S: ..." where it ran as S processes: K hung or failed first
    # every process that exited non-zero exited 1 having reported a failing case, and printed no other failure:
    # its exit is those cases' (test-backend-ops exits 1 when a case fails), nothing else went wrong
    only_case_failures: bool = False
    shader_cache: str = ""           # a Vulkan device's NVIDIA shader cache before the run: KEPT, EMPTY, THEIRS

    @property
    def ran(self) -> tuple[OpCase, ...]:
        return tuple(c for c in self.parsed.cases if c.supported)

    @property
    def failed(self) -> tuple[OpCase, ...]:
        return tuple(c for c in self.ran if not c.passed)

    @property
    def unsupported(self) -> int:
        return sum(not c.supported for c in self.parsed.cases)

    @property
    def unmatched(self) -> tuple[str, ...]:
        """Listed ops no case was named after (a typo, or GLU instead of SWIGLU): nothing was tested."""
        seen = {c.op for c in self.parsed.cases}
        return tuple(op for op in self.ops if op not in seen)


def program(runtime: Path) -> Path:
    return Path(runtime) / TESTS_DIR / BACKEND_OPS


# Backends whose devices test-backend-ops may drive from several workers at once (-j): threads of one process,
# each with its own backend of the device and its own CPU backend (tests/test-backend-ops.cpp, test mode only).
# Vulkan is not one: with -j 2 on Mesa's lavapipe it crashed (SIGSEGV after 26 passing cases, this project's CI,
# 2026-12-02), and upstream's own try of -j 8 (ggml-org/llama.cpp PR 23699) saw heap corruption on Intel's Vulkan
# driver and a lost device under MoltenVK: ggml-vulkan shares one VkDevice and queue between the backends of a
# process.
PARALLEL_BACKENDS = frozenset({"cuda"})
# Backends whose devices run as several test-backend-ops processes at once, each with -j 1 and its run of the
# cases (-p): a process owns its VkInstance and VkDevice, the ordinary case of several programs on one GPU.
# HIP stays one process with one worker (unproven here, and a HIP or CUDA context costs hundreds of MB of device
# memory per process); CUDA keeps its threads (one context).
SHARDED_BACKENDS = frozenset({"vulkan"})
# At most this many processes for a sharded device: each holds a VkDevice and its buffers and compiles the
# pipelines its cases need, and starting costs more the more start at once (an H100 host's Vulkan0, 2026-12-05:
# 1.6 s for one process, 3.8 s each for 16). There, with the odd-digit shares, 16 processes had finished 4,000
# cases after 90 s and 32 had 3,953 (docs/lab/2026-12-02-ops-h200.md).
MAX_PROCESSES = 16
# Rounds of runs of like cases (opshares.range_runs): a sharded device's cases run as MAX_PROCESSES x ROUNDS
# processes, MAX_PROCESSES at once, the next started when one ends, each round's runs smaller than the last's.
# On the H100 (2026-12-05), with 16 fixed shares of R runs ordered by type fields: R = 2, 4 and 8 took 68.4, 67.7
# and 70.2 s, the cases dealt one by one 108 s; 8 processes with 2 runs each took 74.9 s, 24 with 3 took 78.0 s.
# On a faster H100 host (2026-12-05, one run each) 4 rounds took 39.5 s and 16 fixed shares of 4 runs 40.8 s: the
# queue ended its slots within 4 s of each other (the shares within 15 s), but its 48 more starts cost 11% more
# process-seconds.
ROUNDS = 4
# Fewer rounds where the runs would hold fewer cases than this: each run is a process to start (0.4 s on lavapipe,
# 1.6 s on the H100). On lavapipe (the dev machine, 2026-12-05) SCALE,RMS_NORM,SWIGLU (79 cases) took 3.0 s in 2
# processes and 4.2 s as 8 runs; the default selection holds about 48 listed strings a run in 16 x 4.
MIN_RUN_CASES = 32
# Milliseconds a case of each default op cost on an H100's Vulkan0, 16 processes with 4 runs each (2026-12-05;
# scripts/ops-timeline.py over docs/results/h100-2026-12-05c/runs/p16-r4-raw.tgz). The runs are sized in
# *cost* by these (opshares.range_runs): only their ratios matter, a FLASH_ATTN_EXT case costs about eight
# SET_ROWS cases. An op not named costs the mean case of that run. A rough guide only (a case costs more where
# its process compiles its pipelines): the queue of shrinking runs absorbs what they miss.
OP_COST_MS = {"FLASH_ATTN_EXT": 562, "MUL_MAT": 348, "MUL_MAT_ID": 208, "ADD": 174, "SCALE": 143, "GET_ROWS": 126,
              "ROPE": 116, "MUL": 106, "SOFT_MAX": 103, "CPY": 85, "GEGLU": 71, "SWIGLU": 69, "SET_ROWS": 67,
              "RMS_NORM": 56}
MEAN_CASE_MS = 210


@dataclass(frozen=True)
class Parallelism:
    """How test-backend-ops runs one device's cases: `processes` programs at once, each with `threads` workers."""
    threads: int = 1         # -j
    processes: int = 1       # at most this many at once; 1: one process with the selection's -p alone
    rounds: int = 1          # rounds of runs of like cases, each run its own process (opshares.range_runs)

    def describe(self) -> str:
        return f"{self.processes} processes" if self.processes > 1 else f"{self.threads} worker(s)"


def parallelism(device: str) -> Parallelism:
    """One worker per core this process may use, as threads where the backend takes them (PARALLEL_BACKENDS),
    as processes where it takes those (SHARDED_BACKENDS, at most MAX_PROCESSES), else one. Every case is computed
    twice, on the device and on the CPU backend in its reference mode (set_use_ref): on the H200 host the
    default list on one worker ran past 400 s for CUDA0 + Vulkan0 (2026-12-02)."""
    backend = backend_of(device)
    if backend in PARALLEL_BACKENDS:
        return Parallelism(threads=_cores())
    if backend in SHARDED_BACKENDS:
        return Parallelism(processes=min(_cores(), MAX_PROCESSES), rounds=ROUNDS)
    return Parallelism()


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def backend_of(device: str) -> str:
    """"CUDA0" -> "cuda", by the device-name prefixes the recipes know; "" for a name none of them starts."""
    return next((b for b, prefix in DEVICE_PREFIX.items() if device.startswith(prefix)), "")


@dataclass(frozen=True)
class _Shard:
    """What one of a device's processes left: its exit status (None: killed at the deadline) and output."""
    returncode: int | None
    stdout: str
    stderr: str


def run_device(runtime: Path, device: str, ops: tuple[str, ...], env: dict[str, str],
               timeout: float = TIMEOUT_S, parallel: Parallelism | None = None, keep: Path | None = None,
               params: str | None = None) -> OpsRun:
    """params: a zero-width -p pattern anchored at the start (Selection.params), None for every case;
    keep: an existing folder to run in and leave the raw output in (list-0.out: the program's list of the cases;
    shard-K.out/.err: each process's cases with their test_time, a benchmark's timeline); by default a scratch
    folder, removed afterwards."""
    par = parallel or parallelism(device)
    start = time.monotonic()
    with (contextlib.nullcontext(keep) if keep else scratch("ops-")) as cwd:
        try:
            cache = shader_cache(device, env, cwd)
            patterns = _split(runtime, device, ops, cache.env(env, 0), cwd, params, par, timeout)
            argvs = [[str(program(runtime)), "test", "-b", device, "-o", ",".join(ops),
                      *(("-p", pattern) if pattern else ()), "-j", str(par.threads), "--output", "sql"]
                     for pattern in patterns]
            shards = _run_all(argvs, lambda slot: cache.env(env, slot), cwd,
                              max(0.0, timeout - (time.monotonic() - start)),
                              slots=par.processes, progress=lambda t: ui.info(f"test-backend-ops on {device}: "
                                                         f"{_finished(cwd, len(argvs))} cases finished after {t:.0f}s"))
        except OSError as exc:
            return OpsRun(device, ops, time.monotonic() - start,
                          error=f"cannot execute {TESTS_DIR}/{BACKEND_OPS}: {exc.strerror or exc}")
    seconds = time.monotonic() - start
    parsed = [parse_sql(s.stdout) for s in shards]
    merged = Parsed(tuple(c for p in parsed for c in p.cases), sum(p.unreadable for p in parsed))
    hung = [k for k, s in enumerate(shards) if s.returncode is None]
    failing = [k for k, s in enumerate(shards) if s.returncode != 0]
    told = (hung or failing or [0])[0]              # the shard whose last words are shown
    tail = _tail(shards[told].stderr + "\n" + _stray(shards[told].stdout))
    if len(shards) > 1 and tail:
        tail = f"shard {told}/{len(shards)}: {tail}"
    if hung:
        return OpsRun(device, ops, seconds, merged, error=f"timed out after {timeout:.0f}s", stderr_tail=tail,
                      timed_out=True, shader_cache=cache.state)
    only_cases = all(s.returncode == 1 and any(c.supported and not c.passed for c in p.cases)
                     and "FAIL" not in _stray(s.stdout) for s, p in zip(shards, parsed, strict=True) if s.returncode)
    return OpsRun(device, ops, seconds, merged, shards[told].returncode, stderr_tail=tail,
                  only_case_failures=only_cases, shader_cache=cache.state)


LIST_TIMEOUT_S = 120.0   # the program's list of a device's cases (support mode computes nothing: seconds)


def _split(runtime: Path, device: str, ops: tuple[str, ...], env: dict[str, str], cwd: Path, params: str | None,
           par: Parallelism, timeout: float) -> Sequence[str | None]:
    """Each process's -p (None: no -p), in the order to start them. Several processes: the program's list first
    (support mode, the same -o and -p), then runs of like cases, shrinking round by round in cost (OP_COST_MS),
    over what it lists (opshares.range_runs); where it gives no list, or a pattern would be too long for an
    argument, one odd-digit share per process."""
    if par.processes == 1:
        return [params]
    argv = [str(program(runtime)), "support", "-b", device, "-o", ",".join(ops), *(("-p", params) if params else ()),
            "--output", "sql"]
    begun = time.monotonic()
    [listing] = _run_all([argv], lambda _: env, cwd, min(timeout, LIST_TIMEOUT_S), stem="list")
    found = parse_sql(listing.stdout, mode="support") if listing.returncode == 0 else Parsed(())
    cost: dict[str, float] = {}          # each supported string, weighed by its cases' ops
    for case in found.cases:
        if case.supported:
            cost[case.params] = cost.get(case.params, 0.0) + OP_COST_MS.get(case.op, MEAN_CASE_MS)
    runs = (range_runs(list(cost), par.processes, rounds_for(len(cost), par), cost)
            if cost and not found.unreadable else None)
    if not runs:
        if listing.returncode is None:
            why = f"the list did not come within {LIST_TIMEOUT_S:.0f}s"
        elif listing.returncode:
            why = f"the list exited {listing.returncode}"
        elif not cost:
            why = "no supported case listed"
        elif found.unreadable:
            why = f"{found.unreadable} unreadable lines in the list"
        else:
            why = "a run's pattern is too long for one argument"
        ui.detail(f"{device}: cases split by odd digits ({why})")
        return by_odd_digits(params, par.processes)
    ui.detail(f"{device}: {len(cost)} distinct supported cases listed in {time.monotonic() - begun:.1f}s, "
              f"{len(runs)} runs, {par.processes} at once")
    return [joined(params, run) for run in runs]


def rounds_for(strings: int, par: Parallelism) -> int:
    """The rounds of runs for this many listed strings: par.rounds, fewer where a run would hold fewer than
    MIN_RUN_CASES of them, at least one."""
    return max(1, min(par.rounds, strings // (max(1, par.processes) * MIN_RUN_CASES)))


NVIDIA_CACHE = "nvidia-shader-cache"    # a Vulkan device's: in the tool's cache; another's: in the run's folder
KEPT, EMPTY, THEIRS = "kept", "empty", "the checks' own"      # ShaderCache.state


@dataclass(frozen=True)
class ShaderCache:
    """Where a device's processes keep NVIDIA's compiled Vulkan pipelines (__GL_SHADER_DISK_CACHE_PATH): each
    Vulkan process compiles every pipeline its cases need, on the host's CPU, and the checks' environment has no
    HOME for the driver's own folder. The driver serves a process only from the one cache file it takes in a
    folder (H100, 2026-12-06): a process finds what an earlier user of that file compiled, not what the others
    did. So each slot (one process at a time, opshares' queue) has its own folder: the next process of a slot
    finds what the slot's earlier processes compiled, as in one shared folder, and a later verify finds them
    again: on an H100 (2026-12-06, A S S A S) the whole default list took 71.6 and 74.2 s with one shared
    folder, 76.0 s with the slots' folders empty (797 process-seconds against 808 and 799) and 58.0 and 56.0 s
    with them kept. A folder per process was slower (H100, 2026-12-06, three alternated runs each: 62.6-64.1 s
    against 56.1-61.6 s for one shared folder), as nothing is reused. On an H100 (2026-12-05, 16 processes, each op
    capped at 6 s) MUL_MAT finished 44 cases without a cache, 66 with it empty and 91 with it filled. Mesa
    ignores these variables: on lavapipe its own cache, left alone, made a run slower, not faster (docs/lab/)."""
    root: Path | None        # None: the checks' environment names a folder (every process gets it)
    state: str               # KEPT: pipelines from an earlier verify were there; EMPTY; THEIRS

    def env(self, env: dict[str, str], slot: int) -> dict[str, str]:
        if self.root is None:
            return dict(env)
        folder = self.root / f"slot-{slot}"
        folder.mkdir(parents=True, exist_ok=True)
        return {"__GL_SHADER_DISK_CACHE": "1", "__GL_SHADER_DISK_CACHE_PATH": str(folder),
                "__GL_SHADER_DISK_CACHE_SKIP_CLEANUP": "1", **env}


def shader_cache(device: str, env: dict[str, str], cwd: Path) -> ShaderCache:
    """A Vulkan device's folders in the tool's cache, kept between verifies (per device name); another
    device's (CUDA, HIP: no Vulkan pipelines of its own) in the run's folder, as is a Vulkan device's where
    the tool's cache cannot be made."""
    if "__GL_SHADER_DISK_CACHE_PATH" in env:
        return ShaderCache(None, THEIRS)
    root = cwd / NVIDIA_CACHE
    if backend_of(device) == "vulkan":
        with contextlib.suppress(AssembleError, OSError):
            kept = cache_dir() / NVIDIA_CACHE / device
            kept.mkdir(parents=True, exist_ok=True)
            root = kept
    had = any(f.is_file() for f in root.rglob("*")) if root.is_dir() else False
    return ShaderCache(root, KEPT if had else EMPTY)


def _run_all(argvs: list[list[str]], env_of: Callable[[int], dict[str, str]], cwd: Path, timeout: float,
             slots: int | None = None, progress: Callable[[float], None] | None = None,
             stem: str = "shard") -> list[_Shard]:
    """Run the commands from cwd, at most `slots` at once (None: all), in order, the next started as soon as one
    ends, in the lowest free slot (a command started in slot s runs with env_of(s)), each in its own process
    group with its output in its own files there (never a pipe, which a full one would block), until one
    deadline, calling `progress` with the seconds so far every PROGRESS_EVERY_S. A group still running at the
    deadline is killed, as is every started one when another cannot start (OSError) or the wait is interrupted;
    a command not started by the deadline never starts (returncode None, no output)."""
    procs: dict[int, subprocess.Popen[bytes]] = {}
    slot_of: dict[int, int] = {}
    waiting = list(range(len(argvs)))
    start = said = time.monotonic()
    deadline = start + timeout
    try:
        while True:
            running = [p for p in procs.values() if p.poll() is None]
            while waiting and len(running) < (slots or len(argvs)) and time.monotonic() < deadline:
                k = waiting.pop(0)
                busy = {slot_of[j] for j, p in procs.items() if p.poll() is None}
                slot_of[k] = min(set(range(len(busy) + 1)) - busy)
                procs[k] = _start(argvs[k], env_of(slot_of[k]), cwd, k, stem)
                running.append(procs[k])
            now = time.monotonic()
            if not running or now >= deadline:
                break
            if progress and now - said >= PROGRESS_EVERY_S:
                progress(now - start)
                said = now
            time.sleep(min(POLL_S, max(0.0, deadline - now)))
    finally:
        killed = [p for p in procs.values() if p.poll() is None]
        for proc in killed:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return [_Shard(None if k not in procs or procs[k] in killed else procs[k].returncode,
                   _read(_output(cwd, k, "out", stem)), _read(_output(cwd, k, "err", stem))) for k in range(len(argvs))]


def _start(argv: list[str], env: dict[str, str], cwd: Path, k: int, stem: str) -> subprocess.Popen[bytes]:
    ui.detail(f"$ {command_line([_shown(a) for a in argv])}   (in {cwd})")
    with open(_output(cwd, k, "out", stem), "wb") as out, open(_output(cwd, k, "err", stem), "wb") as err:
        return subprocess.Popen(argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)


def _shown(arg: str, keep: int = 60) -> str:
    """An argument as a -v line shows it: a share's pattern (kilobytes) by its start and length."""
    return arg if len(arg) <= 2 * keep else f"{arg[:keep]}...({len(arg):,} characters)"


def _output(cwd: Path, k: int, stream: str, stem: str = "shard") -> Path:
    return cwd / f"{stem}-{k}.{stream}"


def _finished(cwd: Path, shards: int) -> int:
    """Cases the runs have printed a result for so far (a test-mode INSERT line each)."""
    return sum(_read(_output(cwd, k, "out")).count("'test', ") for k in range(shards))


def _read(path: Path) -> str:
    """A run's output so far; "" for a run not started."""
    try:
        return path.read_bytes().decode(errors="replace")
    except FileNotFoundError:
        return ""


def _stray(stdout: str) -> str:
    """What the program said on stdout besides its SQL (an error printed before a result, a failed slice)."""
    return "\n".join(ln for ln in stdout.splitlines() if ln.strip() and "INSERT INTO" not in ln
                     and not _SQL_HEADER.match(ln))


def _tail(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


# --- a failing case run again ------------------------------------------------------------------

# Each case draws new random inputs (test-backend-ops seeds from std::random_device) and is compared with the
# CPU backend against an error bound, and a few bounds are tight enough that a right kernel exceeds them now
# and then: on the H200 (2026-12-06) CUDA0 failed MUL_MAT(type_a=q5_1,...,m=16,n=1,k=32) in one of three runs
# of the default list, upstream's q5_1 MUL_MAT bound on NVIDIA (llama.cpp issue 11972). A wrong kernel fails
# every time. So each failing case runs again RECHECK_RUNS times, alone, and fails the device only when it
# fails again in at least half of them: a case that fails one run in ten passes this test 99.5% of the time,
# and one that fails every run never does.
RECHECK_RUNS = 8
# More failing cases than this are no chance: the device fails without re-runs. 4: lavapipe's planted SCALE
# fault fails 4 cases, so CI runs the re-runs of a real fault (tests/integration/check/test_verify_ops.py).
MAX_RECHECKED = 4
RECHECK_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Recheck:
    """A failing case run again `runs` times, each run alone in its own process with new random inputs."""
    case: OpCase
    runs: int
    failures: int           # re-runs that failed, crashed, hung or did not report the case
    printed: str = ""       # a failing re-run's error as the program printed it, where the first run gave none

    @property
    def reproduces(self) -> bool:
        return 2 * self.failures >= self.runs

    def describe(self) -> str:
        said = self.case.error if _printed(self.case.error) else self.printed
        return (f"{self.case.label} failed {1 + self.failures} of {1 + self.runs} runs"
                + (f" ({said})" if said else ""))


def _printed(error: str) -> bool:
    """An OpCase error the program printed ("[MUL_MAT] ERR = ... > ..."), not its generic "test failed"."""
    return error.startswith("[")


def recheck(runtime: Path, result: OpsRun, env: dict[str, str], timeout: float = RECHECK_TIMEOUT_S,
            runs: int = RECHECK_RUNS) -> tuple[Recheck, ...]:
    """Each failing case of `result` run `runs` more times, each in its own process (-p: that case's string, and
    nothing else), as many at once as the device takes processes; none where the run did not finish or more
    than MAX_RECHECKED cases failed."""
    failing = list(dict.fromkeys(result.failed))
    if result.error or not failing or len(failing) > MAX_RECHECKED:
        return ()
    ui.info(f"test-backend-ops on {result.device}: {len(failing)} failing case(s), each run {runs} more times")
    argvs = [[str(program(runtime)), "test", "-b", result.device, "-o", case.op, "-p",
              f"^{ecma_literal(case.params)}$", "-j", "1", "--output", "sql"] for case in failing for _ in range(runs)]
    with scratch("ops-recheck-") as cwd:
        cache = shader_cache(result.device, env, cwd)
        shards = _run_all(argvs, lambda slot: cache.env(env, slot), cwd, timeout,
                          slots=parallelism(result.device).processes, stem="recheck")
    found = []
    for i, case in enumerate(failing):
        mine = shards[i * runs:(i + 1) * runs]
        outcomes = [[c for c in parse_sql(s.stdout).cases if (c.op, c.params) == (case.op, case.params)]
                    for s in mine]
        passed = [s.returncode is not None and len(o) == 1 and o[0].supported and o[0].passed
                  for s, o in zip(mine, outcomes, strict=True)]
        printed = next((c.error for o in outcomes for c in o if _printed(c.error)), "")
        found.append(Recheck(case, runs, passed.count(False), printed))
    return tuple(found)


def flaky_check(result: OpsRun, rechecks: tuple[Recheck, ...]) -> Check | None:
    """A warning naming the failing cases that did not fail again in most of their re-runs (judge passed them)."""
    flaky = [r for r in rechecks if not r.reproduces]
    if not flaky or any(r.reproduces for r in rechecks):
        return None
    return Check(f"ops {result.device} flaky", WARN, "; ".join(r.describe() for r in flaky),
                 "each run draws new random inputs: a case that fails in fewer than half of its runs exceeds a "
                 "tight error bound now and then (a right kernel fails every run when wrong); verify --ops again "
                 "to see it")


# --- the check ----------------------------------------------------------------------------------

def check_name(device: str) -> str:
    return f"ops {device}"


def judge(result: OpsRun, rechecks: tuple[Recheck, ...] = ()) -> Check:
    """PASS with the counts and time, or FAIL naming what went wrong: the first failing cases (with their
    re-runs), a crash or a timeout (with the end of stderr), names that matched nothing, output that could not
    be read. Failing cases that each failed again in fewer than half of their re-runs (recheck) pass, and
    flaky_check names them."""
    name, ran, failed = check_name(result.device), result.ran, result.failed
    checked = {(r.case.op, r.case.params): r for r in rechecks}
    if failed and all((c.op, c.params) in checked and not checked[c.op, c.params].reproduces for c in failed):
        failed = ()
    counts = (f"{len(ran)} op cases passed ({result.unsupported} not supported by {result.device}) in "
              f"{result.seconds:.1f}s" + (" (NVIDIA's shader cache kept from an earlier verify: not a first run's time)"
                                          if result.shader_cache == KEPT else ""))
    if result.error:
        return Check(name, FAIL, f"test-backend-ops {result.error} after {len(ran)} cases"
                     + (f": {result.stderr_tail}" if result.stderr_tail else ""),
                     "run tests/test-backend-ops test -b DEVICE -o OPS by hand to see where it stops")
    if failed:
        named = ", ".join(checked[c.op, c.params].describe() if (c.op, c.params) in checked else c.label
                          for c in failed[:MAX_NAMED])
        more = f" +{len(failed) - MAX_NAMED} more" if len(failed) > MAX_NAMED else ""
        return Check(name, FAIL, f"{len(failed)} of {len(ran)} op cases differ from the CPU backend: {named}{more}",
                     "this device computes wrong numbers for these ops: check the driver and the arch the "
                     "module was built for")
    if result.returncode != 0 and not (result.failed and not failed and result.only_case_failures):
        return Check(name, FAIL, f"test-backend-ops exited {result.returncode} after {len(ran)} passing cases"
                     + (f": {result.stderr_tail}" if result.stderr_tail else ""),
                     "a case failed before it had a result (e.g. an allocation), or it crashed: run it by hand")
    if result.parsed.unreadable:
        return Check(name, FAIL, f"{result.parsed.unreadable} result lines of test-backend-ops could not be read",
                     "its --output sql format changed: update builder/check/ops.py")
    if not result.parsed.cases:
        return Check(name, FAIL, f"test-backend-ops ran no case on {result.device}"
                     + (f": {result.stderr_tail}" if result.stderr_tail else ""),
                     f"it loads the backend modules through the links in {TESTS_DIR}/ (to bin/): check them, and "
                     "that the device and op names are the ones llama-server --list-devices and --list-ops print")
    if result.unmatched:
        return Check(name, FAIL, f"no case is named {', '.join(result.unmatched)}: nothing was tested for it",
                     "name ops as `tests/test-backend-ops --list-ops` prints them; a GLU or UNARY op by its "
                     "kind (SWIGLU, GEGLU, SILU)")
    return Check(name, PASS, counts)


def budget_check(result: OpsRun, budget: float = BUDGET_S) -> Check | None:
    if result.error or result.seconds <= budget:
        return None
    return Check(f"ops {result.device} time", WARN, f"{result.seconds:.0f}s, over the {budget:.0f}s budget per "
                 "device", "a warning only: a CPU driver (lavapipe), a small card or NVIDIA's Vulkan driver on slower "
                 "host cores (40-77 s on H100 hosts, 51-69 s on the H200) takes longer; --ops LIST checks only those "
                 "ops (every case of each)")


# --- the record ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceRecord:
    """The last --ops result on one device, and where it was measured."""
    device: str                 # "Vulkan0"
    description: str            # "llvmpipe (LLVM 15.0.6, 256 bits)", as llama-server --list-devices says
    result: str                 # pass | fail
    passed: int
    failed: int
    unsupported: int
    first_failures: tuple[str, ...]
    rechecked: tuple[str, ...]  # each failing case's re-runs (Recheck.describe): "MUL_MAT(...) failed 1 of 9 runs"
    ops: tuple[str, ...]
    cases: str                  # inference: the cases inference runs (INFERENCE_CASES); all: every case of `ops`
    seconds: float
    shader_cache: str           # a Vulkan device's NVIDIA shader cache before the run (ShaderCache.state), else ""
    driver: str                 # the host's driver for this device: "NVIDIA 580.82.07 (CUDA 13.0)", ...
    host: str
    time: str                   # UTC, ISO 8601
    assemble: str

    @classmethod
    def from_dict(cls, data: Any, where: str) -> DeviceRecord:
        if not isinstance(data, dict):
            raise _invalid(where, "a device entry is not an object")
        strings = ("device", "description", "result", "cases", "shader_cache", "driver", "host", "time", "assemble")
        counts = ("passed", "failed", "unsupported")
        if set(data) != set(cls.__dataclass_fields__):
            raise _invalid(where, f"a device entry's keys are {sorted(data)}")
        for key in strings:
            if not isinstance(data[key], str):
                raise _invalid(where, f"{key} is not a string")
        for key in counts:
            if not isinstance(data[key], int) or isinstance(data[key], bool) or data[key] < 0:
                raise _invalid(where, f"{key} is not a count")
        if data["cases"] not in CASE_SETS:
            raise _invalid(where, f"cases {data['cases']!r} is not one of {', '.join(CASE_SETS)}")
        if data["shader_cache"] not in ("", KEPT, EMPTY, THEIRS):
            raise _invalid(where, f"shader_cache {data['shader_cache']!r} is not one of {KEPT}, {EMPTY}, {THEIRS}")
        if data["result"] not in (PASS, FAIL):
            raise _invalid(where, f"result {data['result']!r} is neither pass nor fail")
        if not isinstance(data["seconds"], (int, float)) or isinstance(data["seconds"], bool):
            raise _invalid(where, "seconds is not a number")
        for key in ("first_failures", "rechecked", "ops"):
            if not isinstance(data[key], list) or not all(isinstance(x, str) for x in data[key]):
                raise _invalid(where, f"{key} is not a list of strings")
        try:
            datetime.fromisoformat(data["time"])
        except ValueError:
            raise _invalid(where, f"time {data['time']!r} is not an ISO 8601 time") from None
        return cls(**{**data, "first_failures": tuple(data["first_failures"]), "rechecked": tuple(data["rechecked"]),
                      "ops": tuple(data["ops"]),
                      "seconds": float(data["seconds"])})


@dataclass(frozen=True)
class OpsRecord:
    devices: tuple[DeviceRecord, ...] = ()

    def merged(self, new: Iterable[DeviceRecord]) -> OpsRecord:
        """A device's new entry replaces its previous one; the others stay."""
        by_device = {d.device: d for d in self.devices}
        by_device.update({d.device: d for d in new})
        return OpsRecord(tuple(by_device[k] for k in sorted(by_device)))

    def to_json(self) -> str:
        return json.dumps({"format": RECORD_FORMAT, "devices": [asdict(d) for d in self.devices]}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> OpsRecord:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise _invalid(where, f"not JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT or set(data) != {"format", "devices"}:
            raise _invalid(where, f"not an ops record of format {RECORD_FORMAT}")
        if not isinstance(data["devices"], list):
            raise _invalid(where, "devices is not a list")
        return cls(tuple(DeviceRecord.from_dict(d, where) for d in data["devices"]))


def _invalid(where: str, what: str) -> AssembleError:
    return AssembleError(f"invalid ops record: {what}", where=where,
                         fix=f"delete {OPS_RECORD}: the next verify --ops writes a new one")


def load_record(runtime: Path) -> OpsRecord | None:
    """The runtime's ops record, validated; None when there is none."""
    path = Path(runtime) / OPS_RECORD
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _invalid(str(path), f"unreadable ({exc.strerror or exc})") from None
    return OpsRecord.from_json(text, str(path))


def record_entry(result: OpsRun, check: Check, description: str, driver: str, cases: str,
                 rechecks: tuple[Recheck, ...] = ()) -> DeviceRecord:
    failed = result.failed
    return DeviceRecord(result.device, description, PASS if check.status == PASS else FAIL, len(result.ran) - len(failed),
                        len(failed), result.unsupported, tuple(c.label for c in failed[:MAX_NAMED]),
                        tuple(r.describe() for r in rechecks), result.ops,
                        cases, round(result.seconds, 2), result.shader_cache, driver, socket.gethostname(),
                        datetime.now(UTC).isoformat(timespec="seconds"), __version__)


def write_record(runtime: Path, entries: list[DeviceRecord]) -> Check:
    """Merge the new entries into the record, write it atomically, read it back. A folder this user
    cannot write is a warning: the check ran, only its proof is not kept."""
    path = Path(runtime) / OPS_RECORD
    try:
        try:
            old = load_record(runtime) or OpsRecord()
        except AssembleError:
            old = OpsRecord()            # a broken record is replaced, never merged into
        new = old.merged(entries)
        write_atomic(path, new.to_json())
        if load_record(runtime) != new:
            raise OSError("the record read back differs from what was written")
    except OSError as exc:
        return Check("ops record", WARN, f"not recorded: cannot write {OPS_RECORD} ({exc.strerror or exc})",
                     "verify a copy this user can write to keep the proof with the runtime")
    return Check("ops record", PASS, f"{OPS_RECORD}: " + ", ".join(f"{e.device} {e.result}" for e in entries))


# --- the host's driver for a device ---------------------------------------------------------------

def driver_of(device: str, description: str) -> str:
    """The driver this host runs the device with, as plainly as the host says it."""
    from builder.toolchain import gpus

    backend = backend_of(device)
    nvidia = "NVIDIA" in description.upper() or backend == "cuda"
    if nvidia and (drv := gpus.nvidia_driver()) and drv.version:
        return f"NVIDIA {drv.version}" + (f" (CUDA {drv.cuda})" if drv.cuda else "")
    if backend == "hip" and (amd := gpus.amd_host()):
        return f"ROCm, amdgpu {amd.kernel_driver}"
    if backend == "vulkan":
        m = re.search(r"\(([^()]*\bLLVM[^()]*|Mesa[^()]*)\)", description)
        return f"Vulkan: {m.group(1)}" if m else f"Vulkan: {description or 'driver unknown'}"
    return "unknown"


# --- all devices ----------------------------------------------------------------------------------

def ops_checks(runtime: Path, devices: list[str], descriptions: dict[str, str], selection: Selection,
               env: dict[str, str]) -> list[Check]:
    """One Check per GPU device (and its time), then the record's."""
    if not program(runtime).is_file():
        return [Check("ops", FAIL, f"this runtime carries no {TESTS_DIR}/{BACKEND_OPS}",
                      "build it with [tests] backend_ops = true (the default for a GPU recipe), or package "
                      "it with --with-tests")]
    if not devices:
        return [Check("ops", SKIP, "not run: no GPU device")]
    checks, entries = [], []
    for device in devices:
        # A device's run can take minutes (lavapipe: far more): say which one is running, and how it ended.
        par = parallelism(device)
        ui.info(f"test-backend-ops on {device}: {len(selection.ops)} ops ({selection.cases} cases), {par.describe()}")
        result = run_device(runtime, device, selection.ops, env, parallel=par, params=selection.params)
        rechecks = recheck(runtime, result, env)
        check = judge(result, rechecks)
        ui.info(f"test-backend-ops on {device}: {check.status.upper()} in {result.seconds:.1f}s")
        checks.append(check)
        checks.extend(c for c in (flaky_check(result, rechecks), budget_check(result)) if c)
        description = descriptions.get(device, "")
        entries.append(record_entry(result, check, description, driver_of(device, description), selection.cases,
                                    rechecks))
    checks.append(write_record(runtime, entries))
    return checks

