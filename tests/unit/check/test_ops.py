"""verify --ops without a GPU and without compiling: the SQL parser over output captured from a real
test-backend-ops run on lavapipe, the per-device verdicts, the record, the CLI's refusals.

The program runs (crash, timeout, a device it does not know) use small real executables in a
throw-away runtime folder that print captured output: what is tested is how verify starts, times
and reads a program, not the program."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import sys
import time
from pathlib import Path

import pytest

from builder import ui
from builder.check import ops
from builder.check.ops import (DEFAULT_OPS, DEFAULT_SELECTION, INFERENCE_CASES, MAX_PROCESSES, MIN_RUN_CASES, ROUNDS,
                               CaseRule,
                               DeviceRecord, OpCase, OpsRecord, OpsRun, Parallelism, Parsed, Selection, budget_check,
                               judge, load_record, ops_checks, parallelism, parse_op_list, parse_sql, rounds_for, run_device,
                               selection_filter, shader_cache, write_record)
from builder.check import opshares
from builder.check.opshares import shard_filter
from builder.check.report import FAIL, PASS, SKIP, WARN
from builder.cli import main as cli
from builder.errors import AssembleError
from builder.runtime.layout import BACKEND_OPS, OPS_RECORD, TESTS_DIR
from tests.support.common import REPO

CAPTURED = REPO / "tests" / "data" / "ops-output"
PASSING = CAPTURED / "lavapipe-scale-pass.sql"     # test-backend-ops test -b Vulkan0 -o SCALE --output sql
FAILING = CAPTURED / "lavapipe-scale-fault.sql"    # the same, by the planted-fault runtime (tests/data/ops-fault)
LISTING = CAPTURED / "lavapipe-scale-support.sql"  # test-backend-ops support -b Vulkan0 -o SCALE --output sql


# --- the parser -----------------------------------------------------------------------------------

def test_parse_real_passing_run():
    parsed = parse_sql(PASSING.read_text())
    assert parsed.unreadable == 0
    assert len(parsed.cases) == 7
    assert {c.op for c in parsed.cases} == {"SCALE"}
    supported = [c for c in parsed.cases if c.supported]
    assert len(supported) == 4 and all(c.passed for c in supported)
    unsupported = [c for c in parsed.cases if not c.supported]
    assert len(unsupported) == 3 and all("type=bf16" in c.params and c.error == "not supported" for c in unsupported)
    assert supported[0].label == "SCALE(type=f32,ne=[10,10,10,10],scale=2.000000,bias=0.000000,inplace=0)"


def test_parse_real_failing_run_of_the_planted_fault():
    """The faulty runtime prints "[SCALE] ERR = ... > ... " on stdout just before a failing case's INSERT,
    on the same line: the case is still read, and judged."""
    text = FAILING.read_text()
    assert "[SCALE] ERR = " in text
    parsed = parse_sql(text)
    assert parsed.unreadable == 0 and len(parsed.cases) == 7
    failed = [c for c in parsed.cases if c.supported and not c.passed]
    assert len(failed) == 4 and all(c.error.startswith("[SCALE] ERR = ") for c in failed)     # its own error
    assert failed[0].error == "[SCALE] ERR = 0.045505699 > 0.000000100"
    assert all(c.error == "" for c in parsed.cases if c.passed)
    check = judge(OpsRun("Vulkan0", ("SCALE",), 2.0, parsed, 1))
    assert check.status == FAIL
    assert check.reason.startswith("4 of 4 op cases differ from the CPU backend: "
                                   "SCALE(type=f32,ne=[10,10,10,10],scale=2.000000,bias=0.000000,inplace=0), ")
    assert check.reason.endswith(" +1 more")


def test_a_row_whose_values_do_not_match_its_fields_is_counted_unreadable():
    line = next(ln for ln in PASSING.read_text().splitlines() if ln.startswith("INSERT"))
    broken = line.replace("'Vulkan0', ", "'Vulk'an0', ", 1)
    parsed = parse_sql(broken)
    assert parsed.cases == () and parsed.unreadable == 1


# --- the verdicts -----------------------------------------------------------------------------------

def _run(cases, **kw) -> OpsRun:
    return OpsRun("Vulkan0", kw.pop("ops", ("SCALE",)), kw.pop("seconds", 1.5), Parsed(tuple(cases)),
                  kw.pop("returncode", 0), **kw)


def _case(i: int, passed: bool = True, supported: bool = True, op: str = "SCALE") -> OpCase:
    return OpCase(op, f"type=f32,ne=[{i},1,1,1]", supported, passed)


def test_pass_says_the_counts_and_the_time():
    check = judge(_run([_case(1), _case(2), _case(3, supported=False, passed=False)], seconds=12.34))
    assert check.status == PASS
    assert check.reason == "2 op cases passed (1 not supported by Vulkan0) in 12.3s"


def test_fail_names_the_first_three_failing_cases_and_how_many_more():
    check = judge(_run([_case(0)] + [_case(i, passed=False) for i in range(1, 6)], returncode=1))
    assert check.status == FAIL
    assert check.reason.startswith("5 of 6 op cases differ from the CPU backend: SCALE(type=f32,ne=[1,1,1,1]), "
                                   "SCALE(type=f32,ne=[2,1,1,1]), SCALE(type=f32,ne=[3,1,1,1]) +2 more")


def test_a_crash_or_timeout_is_a_failure_with_the_end_of_stderr():
    crashed = judge(_run([_case(1)], returncode=-11, stderr_tail="ggml_vulkan: device lost"))
    assert crashed.status == FAIL and "exited -11 after 1 passing cases: ggml_vulkan: device lost" in crashed.reason
    hung = judge(_run([_case(1)], returncode=None, error="timed out after 1800s", stderr_tail="last words"))
    assert hung.status == FAIL and "timed out after 1800s after 1 cases: last words" in hung.reason


def test_an_op_no_case_is_named_after_fails():
    """GLU is in --list-ops, yet cases are named by their kind (SWIGLU): -o GLU runs nothing."""
    check = judge(_run([_case(1)], ops=("SCALE", "GLU")))
    assert check.status == FAIL and "no case is named GLU" in check.reason and "SWIGLU" in check.hint


def test_a_run_with_no_case_at_all_fails():
    """-b names a device test-backend-ops did not load (a module link missing in tests/): it runs nothing, exit 0."""
    check = judge(_run([], stderr_tail="load_backend: loaded CPU backend from tests/libggml-cpu-x64.so"))
    assert check.status == FAIL and check.reason.startswith("test-backend-ops ran no case on Vulkan0: load_backend")
    assert "links in tests/" in check.hint


def test_unreadable_output_fails():
    check = judge(OpsRun("Vulkan0", ("SCALE",), 1.0, Parsed((_case(1),), unreadable=2), 0))
    assert check.status == FAIL and "2 result lines" in check.reason


def test_over_the_budget_is_a_warning_not_a_failure():
    assert budget_check(_run([_case(1)], seconds=59.9)) is None
    slow = budget_check(_run([_case(1)], seconds=75))
    assert slow is not None and slow.status == WARN and "75s, over the 60s budget" in slow.reason


# --- the op list ----------------------------------------------------------------------------------

def test_op_lists():
    assert parse_op_list("SCALE, MUL_MAT,SCALE") == ("SCALE", "MUL_MAT")
    for bad in ("", ",", "scale", "MUL_MAT.*", "ADD(type=f32)"):
        with pytest.raises(AssembleError) as exc:
            parse_op_list(bad)
        assert exc.value.code == 2 and "--list-ops" in exc.value.fix


def test_default_list_names_each_op_as_test_backend_ops_matches_it():
    assert "GLU" not in DEFAULT_OPS and {"SWIGLU", "GEGLU"} <= set(DEFAULT_OPS)
    assert all(parse_op_list(op) == (op,) for op in DEFAULT_OPS)
    assert len(set(DEFAULT_OPS)) == len(DEFAULT_OPS)


# --- running the program --------------------------------------------------------------------------

def _runtime(tmp_path: Path, script: str | None) -> Path:
    runtime = tmp_path / "runtime"
    (runtime / TESTS_DIR).mkdir(parents=True)
    if script is not None:
        program = runtime / TESTS_DIR / BACKEND_OPS
        program.write_text("#!/bin/sh\n" + script)
        program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return runtime


def test_run_reads_the_cases_with_an_empty_environment_from_a_scratch_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SECRET_OF_THE_CALLER", "1")
    runtime = _runtime(tmp_path, f'env > "{tmp_path}/env"; pwd > "{tmp_path}/cwd"; echo "$@" > "{tmp_path}/argv"\n'
                                 f'cat "{PASSING}"\n')
    result = run_device(runtime, "Vulkan0", ("SCALE",), {"GGML_VK_VISIBLE_DEVICES": "0"}, parallel=Parallelism())
    assert judge(result).status == PASS and len(result.ran) == 4
    assert not result.timed_out
    assert (tmp_path / "argv").read_text().split() == ["test", "-b", "Vulkan0", "-o", "SCALE", "-j", "1",
                                                           "--output", "sql"]
    env = (tmp_path / "env").read_text()
    assert "GGML_VK_VISIBLE_DEVICES=0" in env and "SECRET_OF_THE_CALLER" not in env
    assert not (tmp_path / "cwd").read_text().startswith(str(runtime))


def test_a_crashing_program_fails_with_its_last_words(tmp_path, monkeypatch):
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    runtime = _runtime(tmp_path, f'head -n 21 "{PASSING}"\necho "GGML_ASSERT(buf != NULL) failed" >&2\nkill -SEGV $$\n')
    check = judge(run_device(runtime, "Vulkan0", ("SCALE",), {}, parallel=Parallelism()))
    assert check.status == FAIL
    assert "exited -11 after 2 passing cases" in check.reason and "GGML_ASSERT(buf != NULL) failed" in check.reason


def test_a_failure_printed_without_a_result_is_shown(tmp_path, monkeypatch):
    """The FLASH_ATTN_EXT slice test prints "  FAIL fa_vec slice: ..." on stdout and has no INSERT line."""
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    runtime = _runtime(tmp_path, f'cat "{PASSING}"\necho "  FAIL fa_vec slice: dk=64 dv=64 Q=1 ne=2"\nexit 1\n')
    check = judge(run_device(runtime, "Vulkan0", ("SCALE",), {}, parallel=Parallelism()))
    assert check.status == FAIL and "exited 1 after 4 passing cases" in check.reason
    assert "FAIL fa_vec slice: dk=64" in check.reason and "TEXT" not in check.reason


def test_a_hung_program_is_stopped_and_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    runtime = _runtime(tmp_path, f'head -n 20 "{PASSING}"\necho "still compiling pipelines" >&2\nexec sleep 30\n')
    result = run_device(runtime, "Vulkan0", ("SCALE",), {}, timeout=2, parallel=Parallelism())
    check = judge(result)
    assert check.status == FAIL and "timed out after 2s after 1 cases" in check.reason
    assert result.seconds < 20 and result.timed_out


def test_no_program_is_a_failure_with_the_fix(tmp_path):
    [check] = ops_checks(_runtime(tmp_path, None), ["Vulkan0"], {}, Selection(("SCALE",)), {})
    assert check.status == FAIL and f"carries no {TESTS_DIR}/{BACKEND_OPS}" in check.reason
    assert "backend_ops" in check.hint and "--with-tests" in check.hint


def test_each_device_says_when_it_starts_and_how_it_ended(tmp_path, monkeypatch, capsys):
    """A device's run takes minutes: its start and its end are on stderr as they happen, before the table."""
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ui, "_level", ui.NORMAL)                 # another test's -q must not hide the lines
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    runtime = _runtime(tmp_path, f'case "$3" in CUDA0) cat "{PASSING}";; *) echo "lost the device" >&2; exit 1;; esac\n')
    checks = ops_checks(runtime, ["CUDA0", "Vulkan0"], {}, Selection(("SCALE",)), {})
    assert [c.status for c in checks if c.name.startswith("ops ")][:2] == [PASS, FAIL]
    lines = [line.strip() for line in capsys.readouterr().err.splitlines()]
    assert lines[0] == "test-backend-ops on CUDA0: 1 ops (all cases), 3 worker(s)"       # threads of one process
    assert re.fullmatch(r"test-backend-ops on CUDA0: PASS in \d+\.\ds", lines[1])
    assert lines[2] == "test-backend-ops on Vulkan0: 1 ops (all cases), 3 processes"
    assert re.fullmatch(r"test-backend-ops on Vulkan0: FAIL in \d+\.\ds", lines[3])


def test_a_running_device_says_how_many_cases_it_has_finished(tmp_path, monkeypatch, capsys):
    """Every PROGRESS_EVERY_S the count of finished cases of all its shards: a run stopped by a limit still
    leaves a rate (on 2026-12-05 the H100's Vulkan0 was stopped with nothing but its start line)."""
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ui, "_level", ui.NORMAL)
    monkeypatch.setattr(ops, "PROGRESS_EVERY_S", 0.3)
    runtime = _runtime(tmp_path, f'cat "{PASSING}"\nsleep 1.5\n')
    result = run_device(runtime, "Vulkan0", ("SCALE",), {}, parallel=Parallelism(processes=2))
    assert judge(result).status == PASS and len(result.parsed.cases) == 14
    lines = [line.strip() for line in capsys.readouterr().err.splitlines()]
    counts = [re.fullmatch(r"test-backend-ops on Vulkan0: (\d+) cases finished after \ds", ln) for ln in lines]
    assert lines and all(counts), lines
    assert int(counts[-1].group(1)) == 14             # 7 cases in each of the two shards' output


# --- a failing case run again ---------------------------------------------------------------------

RERUN_FAKE = """
import pathlib, re, sys, zlib
argv, here = sys.argv[1:], pathlib.Path(sys.argv[0]).parent
text = pathlib.Path({failing!r}).read_text()
if "-p" not in argv:                                    # the device's run: the planted fault's 4 failing cases
    print(text + {extra!r}); sys.exit(1)
pattern = argv[argv.index("-p") + 1]
counter = here / ("runs-" + str(zlib.crc32(pattern.encode())))
n = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(n + 1))
fails = n < {fails}                                     # this case's first `fails` re-runs fail again
source = text if fails else pathlib.Path({passing!r}).read_text()
lines = [ln for ln in source.splitlines() if "INSERT" in ln and re.search(pattern, ln.split("'")[9])]
print("\\n".join(lines)); sys.exit(1 if fails else 0)
"""


def _rerun_runtime(tmp_path: Path, fails: int, extra: str = "") -> Path:
    """A program whose device run prints the planted fault's output (4 failing SCALE cases, exit 1) and whose
    re-runs of one case (-p) print that case alone: failing in its first `fails` re-runs, passing after."""
    runtime = _runtime(tmp_path, f'exec "{sys.executable}" "$(dirname "$0")/fake.py" "$@"\n')
    (runtime / TESTS_DIR / "fake.py").write_text(RERUN_FAKE.format(failing=str(FAILING), passing=str(PASSING),
                                                                   fails=fails, extra=extra))
    return runtime


def _reruns(runtime: Path) -> list[int]:
    return sorted(int(p.read_text()) for p in (runtime / TESTS_DIR).glob("runs-*"))


def test_a_case_failing_in_few_of_its_reruns_passes_the_device_with_a_warning(tmp_path, monkeypatch):
    """The H200's CUDA0 failed one q5_1 MUL_MAT case in one of three runs (2026-12-06): new random inputs each
    run, a tight error bound. Each failing case runs 8 more times alone; 3 failures of 8 is not a fault."""
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    runtime = _rerun_runtime(tmp_path, fails=3)
    checks = {c.name: c for c in ops_checks(runtime, ["CUDA0"], {}, Selection(("SCALE",)), {})}
    assert _reruns(runtime) == [ops.RECHECK_RUNS] * 4                  # each failing case, 8 re-runs
    assert checks["ops CUDA0"].status == PASS
    flaky = checks["ops CUDA0 flaky"]
    assert flaky.status == WARN and flaky.reason.count("failed 4 of 9 runs") == 4
    first = "SCALE(type=f32,ne=[10,10,10,10],scale=2.000000,bias=0.000000,inplace=0)"
    assert f"{first} failed 4 of 9 runs ([SCALE] ERR = 0.045505699 > 0.000000100)" in flaky.reason
    entry = load_record(runtime).devices[0]
    assert entry.result == PASS and entry.failed == 4 and len(entry.rechecked) == 4


@pytest.mark.parametrize("fails", [4, 8])
def test_a_case_failing_again_in_half_of_its_reruns_fails_the_device(tmp_path, monkeypatch, fails):
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    runtime = _rerun_runtime(tmp_path, fails=fails)
    checks = {c.name: c for c in ops_checks(runtime, ["CUDA0"], {}, Selection(("SCALE",)), {})}
    assert checks["ops CUDA0"].status == FAIL and "ops CUDA0 flaky" not in checks
    assert checks["ops CUDA0"].reason.startswith(
        "4 of 4 op cases differ from the CPU backend: SCALE(type=f32,ne=[10,10,10,10],scale=2.000000,bias=0.000000,"
        f"inplace=0) failed {1 + fails} of 9 runs ([SCALE] ERR = 0.045505699 > 0.000000100), ")
    entry = load_record(runtime).devices[0]
    assert entry.result == FAIL and all(f"failed {1 + fails} of 9 runs" in r for r in entry.rechecked)


def test_more_failing_cases_than_a_chance_fail_without_reruns(tmp_path, monkeypatch):
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ops, "MAX_RECHECKED", 3)
    runtime = _rerun_runtime(tmp_path, fails=0)
    checks = {c.name: c for c in ops_checks(runtime, ["CUDA0"], {}, Selection(("SCALE",)), {})}
    assert checks["ops CUDA0"].status == FAIL and _reruns(runtime) == []
    assert load_record(runtime).devices[0].rechecked == ()


def test_a_flaky_case_does_not_hide_another_failure_of_its_process(tmp_path, monkeypatch):
    """A failure printed without a result (the FLASH_ATTN_EXT slice test) in the same process: the exit is not
    only the cases', so the device fails though every failing case passed its re-runs."""
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    runtime = _rerun_runtime(tmp_path, fails=0, extra="  FAIL fa_vec slice: dk=64 dv=64 Q=1 ne=2")
    checks = {c.name: c for c in ops_checks(runtime, ["CUDA0"], {}, Selection(("SCALE",)), {})}
    assert _reruns(runtime) == [ops.RECHECK_RUNS] * 4
    assert checks["ops CUDA0"].status == FAIL and "exited 1" in checks["ops CUDA0"].reason
    assert "FAIL fa_vec slice" in checks["ops CUDA0"].reason


# --- a device run as several processes (Vulkan) ----------------------------------------------------

def _sharded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int, script: str) -> Path:
    """A runtime whose program gives no list of its cases (support mode prints nothing), so the device's cases
    are split by odd digits, and runs `script` with $SHARD set to its shard's number (from its -p)."""
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    which = "".join(f'[ "$7" = {shlex.quote(shard_filter(k, cores))} ] && SHARD={k}\n' for k in range(cores))
    return _runtime(tmp_path, f'[ "$1" = support ] && exit 0\nSHARD=none\n{which}echo "$@" > "{tmp_path}/argv.$SHARD"\n'
                              f'{script}')


def test_a_vulkan_device_runs_one_process_per_core_each_with_its_share_at_once(tmp_path, monkeypatch):
    """Each process meets the others before it prints (a file each in the shared scratch folder): they ran at
    once, or the first would have waited alone until the deadline."""
    meet = ('touch "started.$SHARD"; n=0\n'
            'while [ "$(ls started.* | wc -l)" -lt 3 ]; do n=$((n+1)); [ $n -gt 400 ] && exit 3; sleep 0.05; done\n')
    runtime = _sharded(tmp_path, monkeypatch, 3, meet + f'env > "{tmp_path}/env.$SHARD"\ncat "{PASSING}"\n')
    result = run_device(runtime, "Vulkan0", ("SCALE",), {"GGML_VK_VISIBLE_DEVICES": "0"}, timeout=60)
    assert judge(result).status == PASS, judge(result)
    assert (len(result.parsed.cases), len(result.ran)) == (21, 12)          # 7 cases, 4 run, in each of 3 shards
    for k in range(3):
        assert (tmp_path / f"argv.{k}").read_text().split() == [
            "test", "-b", "Vulkan0", "-o", "SCALE", "-p", shard_filter(k, 3), "-j", "1", "--output", "sql"]
        env = (tmp_path / f"env.{k}").read_text()
        assert "GGML_VK_VISIBLE_DEVICES=0" in env and "ASSEMBLE_CACHE" not in env
    assert not (tmp_path / "argv.none").exists()


def test_a_crashing_shard_fails_the_device_naming_it_and_the_others_still_count(tmp_path, monkeypatch):
    crash = f'head -n 21 "{PASSING}"\necho "GGML_ASSERT(buf != NULL) failed" >&2\nkill -SEGV $$\n'
    runtime = _sharded(tmp_path, monkeypatch, 3, f'if [ "$SHARD" = 1 ]; then {crash}fi\ncat "{PASSING}"\n')
    result = run_device(runtime, "Vulkan0", ("SCALE",), {})
    check = judge(result)
    assert result.returncode == -11 and len(result.ran) == 4 + 2 + 4
    assert check.status == FAIL
    assert "exited -11 after 10 passing cases: shard 1/3: GGML_ASSERT(buf != NULL) failed" in check.reason


def test_hung_shards_are_all_killed_at_the_deadline_and_what_they_did_counts(tmp_path, monkeypatch):
    hang = f'head -n 20 "{PASSING}"\necho "still compiling pipelines" >&2\necho $$ > "{tmp_path}/pid.$SHARD"\n'
    runtime = _sharded(tmp_path, monkeypatch, 3, f'if [ "$SHARD" != 0 ]; then {hang}exec sleep 30; fi\n'
                                                 f'cat "{PASSING}"\n')
    start = time.monotonic()
    result = run_device(runtime, "Vulkan0", ("SCALE",), {}, timeout=2)
    assert time.monotonic() - start < 20 and result.timed_out and result.returncode is None
    check = judge(result)
    assert check.status == FAIL
    assert "timed out after 2s after 6 cases: shard 1/3: still compiling pipelines" in check.reason
    for k in (1, 2):
        with pytest.raises(ProcessLookupError):
            os.kill(int((tmp_path / f"pid.{k}").read_text()), 0)


def _listing_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int, listing: Path = LISTING) -> Path:
    """A runtime whose program lists `listing` in support mode and, in test mode, prints the captured passing run's
    rows whose params string its -p finds (Python's re reads these patterns as std::regex does); every call
    leaves its argv, a line each, in argv.PID."""
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    runtime = _runtime(tmp_path, None)
    program = runtime / TESTS_DIR / BACKEND_OPS
    program.write_text(f"""#!{sys.executable}
import os, re, sys
args = sys.argv[1:]
open(os.path.join({str(tmp_path)!r}, f"argv.{{os.getpid()}}"), "w").write("\\n".join(args) + "\\n")
pattern = args[args.index("-p") + 1] if "-p" in args else ""
for line in open({str(listing)!r} if args[0] == "support" else {str(PASSING)!r}):
    params = re.search(r"VALUES \\((?:'[^']*', ){{4}}'([^']*)'", line)
    if params is None or re.search(pattern, params.group(1)):
        sys.stdout.write(line)
""")
    program.chmod(0o755)
    return runtime


def _supported_params(listing: Path = LISTING) -> list[str]:
    return [c.params for c in parse_sql(listing.read_text(), "support").cases if c.supported]


def test_a_vulkan_device_gets_the_programs_list_cut_into_runs_each_case_run_once(tmp_path, monkeypatch):
    """The list first (support mode, asked for the selection), then the runs, each a process with its range:
    every case (supported or not) runs in exactly one, and no supported case is left without one."""
    runtime = _listing_runtime(tmp_path, monkeypatch, 3)
    result = run_device(runtime, "Vulkan0", ("SCALE",), {}, params="^(?=type=)")
    assert judge(result).reason.startswith("4 op cases passed (3 not supported by Vulkan0) in ")
    assert sorted(c.params for c in result.parsed.cases) == sorted(c.params for c in parse_sql(PASSING.read_text()).cases)
    assert _patterns(tmp_path, "support") == ["^(?=type=)"]
    runs = _patterns(tmp_path, "test")
    assert len(runs) == 3 and all(run.startswith("^(?=type=)") for run in runs)   # 4 strings: one round of 3
    owned = [[p for p in _supported_params() if re.search(run, p)] for run in runs]
    assert sorted(len(o) for o in owned) == [1, 1, 2]


def test_a_list_long_enough_runs_as_rounds_of_runs(tmp_path, monkeypatch):
    """With runs worth their start (here one case is enough), 2 cores get 2 rounds over 4 strings of equal cost:
    runs of 1/3, 1/3, 1/6 and 1/6 of the cost, cut at whole strings, are 3 runs (2, 1 and 1 strings), more than
    the 2 slots; every case still runs once."""
    monkeypatch.setattr(ops, "MIN_RUN_CASES", 1)
    runtime = _listing_runtime(tmp_path, monkeypatch, 2)
    result = run_device(runtime, "Vulkan0", ("SCALE",), {})
    assert len(_patterns(tmp_path, "test")) == 3 and (len(result.ran), result.unsupported) == (4, 3)


def test_rounds_shrink_until_each_run_is_worth_its_start():
    par = Parallelism(processes=16, rounds=ROUNDS)
    assert rounds_for(3077, par) == ROUNDS                       # the default selection on the H100
    assert rounds_for(16 * MIN_RUN_CASES * 2, par) == 2
    assert rounds_for(79, Parallelism(processes=2, rounds=ROUNDS)) == 1   # SCALE,RMS_NORM,SWIGLU
    assert rounds_for(0, par) == 1


def _path_only(slot: int) -> dict[str, str]:
    return {"PATH": os.environ["PATH"]}


def test_runs_start_as_slots_free_never_more_at_once(tmp_path):
    """Six runs, two slots: each run counts the runs alive when it starts (a file each while it lives)."""
    run = ('touch "alive.$0"; ls alive.* | wc -l > "seen.$0"; echo "ran $0"; sleep 0.3; rm "alive.$0"')
    shards = ops._run_all([["sh", "-c", run, str(k)] for k in range(6)], _path_only, tmp_path,
                          timeout=30, slots=2)
    assert [(s.returncode, s.stdout) for s in shards] == [(0, f"ran {k}\n") for k in range(6)]
    seen = [int((tmp_path / f"seen.{k}").read_text()) for k in range(6)]
    assert max(seen) == 2 and min(seen) >= 1, seen


def test_a_run_not_started_by_the_deadline_never_starts(tmp_path):
    run = 'touch "started.$0"; echo "ran $0"; exec sleep 30'
    start = time.monotonic()
    shards = ops._run_all([["sh", "-c", run, str(k)] for k in range(3)], _path_only, tmp_path,
                          timeout=1, slots=1)
    assert time.monotonic() - start < 15
    assert [(s.returncode, s.stdout) for s in shards] == [(None, "ran 0\n"), (None, ""), (None, "")]
    assert sorted(f.name for f in tmp_path.glob("started.*")) == ["started.0"]


def test_runs_start_in_their_order(tmp_path):
    """The runs come largest first (opshares.run_fractions): one slot starts them in that order."""
    shards = ops._run_all([["sh", "-c", 'echo "$0" >> order', str(k)] for k in range(4)], _path_only,
                          tmp_path, timeout=30, slots=1)
    assert [s.returncode for s in shards] == [0] * 4 and (tmp_path / "order").read_text().split() == ["0", "1", "2", "3"]


def test_a_case_the_list_leaves_out_still_runs_once(tmp_path, monkeypatch):
    """Support mode drops upstream's fusion cases (run_whole_graph()), which test mode runs: a range holds
    every string, listed or not."""
    lines = LISTING.read_text().splitlines(keepends=True)
    dropped = next(i for i, ln in enumerate(lines) if "'support', '1'" in ln)
    listing = tmp_path / "support.sql"
    listing.write_text("".join(lines[:dropped] + lines[dropped + 1:]))
    runtime = _listing_runtime(tmp_path, monkeypatch, 2, listing)
    result = run_device(runtime, "Vulkan0", ("SCALE",), {})
    assert len(_supported_params(listing)) == 3 and len(_patterns(tmp_path, "test")) == 2
    assert (len(result.ran), result.unsupported) == (4, 3)
    assert sorted(c.params for c in result.ran) == sorted(_supported_params())


def test_no_more_processes_than_listed_cases_and_odd_digits_for_a_list_with_none_supported(tmp_path, monkeypatch):
    runtime = _listing_runtime(tmp_path, monkeypatch, 16)
    result = run_device(runtime, "Vulkan0", ("SCALE",), {})
    assert len(_patterns(tmp_path, "test")) == 4 and len(result.ran) == 4 and result.unsupported == 3
    (tmp_path / "none").mkdir()
    listing = tmp_path / "none" / "support.sql"
    listing.write_text(LISTING.read_text().replace("'support', '1', '1', 'yes'", "'support', '0', '0', 'no'"))
    runtime = _listing_runtime(tmp_path / "none", monkeypatch, 3, listing)
    result = run_device(runtime, "Vulkan0", ("SCALE",), {})
    assert _patterns(tmp_path / "none", "test") == sorted(shard_filter(k, 3) for k in range(3))
    assert (len(result.ran), result.unsupported) == (4, 3)                # test mode still decides


def test_shares_too_long_for_an_argument_are_split_by_odd_digits(tmp_path, monkeypatch):
    monkeypatch.setattr(opshares, "PATTERN_LIMIT", 50)
    runtime = _listing_runtime(tmp_path, monkeypatch, 2)
    result = run_device(runtime, "Vulkan0", ("SCALE",), {})
    assert _patterns(tmp_path, "test") == sorted(shard_filter(k, 2) for k in range(2))
    assert (len(result.ran), result.unsupported) == (4, 3)                # nothing counted twice


def test_no_gpu_device_is_not_run(tmp_path):
    [check] = ops_checks(_runtime(tmp_path, "exit 0\n"), [], {}, Selection(("SCALE",)), {})
    assert check.status == SKIP and check.reason == "not run: no GPU device"


# --- the record -----------------------------------------------------------------------------------

def _entry(device: str = "Vulkan0", result: str = PASS, **kw) -> DeviceRecord:
    base = dict(device=device, description="llvmpipe (LLVM 15.0.6, 256 bits)", result=result, passed=4, failed=0,
                unsupported=3, first_failures=(), rechecked=(), ops=("SCALE",), cases="all", seconds=1.25, shader_cache="",
                driver="Vulkan: LLVM 15.0.6, 256 bits",
                host="ci", time="2026-12-02T01:05:47+00:00", assemble="0.1.0")
    return DeviceRecord(**{**base, **kw})


def test_record_is_written_atomically_read_back_and_merged_per_device(tmp_path):
    runtime = tmp_path / "rt"
    runtime.mkdir()
    assert write_record(runtime, [_entry("Vulkan0"), _entry("CUDA0")]).status == PASS
    assert write_record(runtime, [_entry("Vulkan0", FAIL, passed=3, failed=1,
                                         first_failures=("SCALE(type=f32)",))]).status == PASS
    record = load_record(runtime)
    assert record is not None
    assert [d.device for d in record.devices] == ["CUDA0", "Vulkan0"]          # CUDA0 kept, Vulkan0 replaced
    assert record.devices[1].result == FAIL and record.devices[1].first_failures == ("SCALE(type=f32)",)
    assert sorted(p.name for p in runtime.iterdir()) == [OPS_RECORD]            # no temporary file left


def test_a_folder_that_cannot_be_written_is_a_warning(tmp_path):
    """/proc/self refuses new files even to root: the check ran, its proof is not kept."""
    check = write_record(Path("/proc/self"), [_entry()])
    assert check.status == WARN and check.reason.startswith(f"not recorded: cannot write {OPS_RECORD}")


@pytest.mark.parametrize("mangle, words", [
    (lambda d: "{", "not JSON"),
    (lambda d: json.dumps({**d, "format": 9}), "format 3"),
    (lambda d: json.dumps({**d, "format": 2}), "format 3"),         # before re-runs were recorded: replaced, not read
    (lambda d: json.dumps({**d, "devices": [{**d["devices"][0], "cases": "some"}]}), "not one of inference, all"),
    (lambda d: json.dumps({**d, "devices": [{**d["devices"][0], "passed": -1}]}), "passed is not a count"),
    (lambda d: json.dumps({**d, "devices": [{**d["devices"][0], "result": "ok"}]}), "neither pass nor fail"),
    (lambda d: json.dumps({**d, "devices": [{**d["devices"][0], "time": "yesterday"}]}), "ISO 8601"),
    (lambda d: json.dumps({**d, "devices": [{k: v for k, v in d["devices"][0].items() if k != "driver"}]}), "keys"),
])
def test_a_bad_record_is_refused_when_read(tmp_path, mangle, words):
    good = json.loads(OpsRecord((_entry(),)).to_json())
    (tmp_path / OPS_RECORD).write_text(mangle(good))
    with pytest.raises(AssembleError) as exc:
        load_record(tmp_path)
    assert words in exc.value.what and OPS_RECORD in exc.value.fix


def test_a_bad_record_is_replaced_by_the_next_run(tmp_path):
    (tmp_path / OPS_RECORD).write_text("{ half written")
    assert write_record(tmp_path, [_entry()]).status == PASS
    assert load_record(tmp_path) == OpsRecord((_entry(),))


# --- the CLI --------------------------------------------------------------------------------------

def _cli(argv, capsys):
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("extra, words", [
    (["--ops", "--static"], ["--static runs nothing", "--ops"]),
    (["--static", "--ops", "SCALE"], ["--static runs nothing", "--ops"]),
    (["--ops", "scale,ADD"], ["not an op list", "scale", "--list-ops"]),
    (["--ops", "MUL_MAT.*"], ["not an op list", "--list-ops"]),
])
def test_cli_refusals_are_one_line_exit_2(tmp_path, capsys, extra, words):
    runtime = tmp_path / "runtime-vulkan"
    (runtime / "bin").mkdir(parents=True)
    (runtime / "bin" / "llama-server").write_text("")
    code, err = _cli(["verify", str(runtime), *extra], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, err
    assert all(w in lines[0] for w in words), lines[0]
    assert "Traceback" not in err and not (runtime / OPS_RECORD).exists()


def test_a_many_core_host_runs_at_most_max_processes_for_vulkan(monkeypatch):
    """More processes than shares that can hold cases only cost VkDevices (14 of 32 odd-digit shares are empty)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(128)), raising=False)
    assert parallelism("Vulkan0") == Parallelism(threads=1, processes=MAX_PROCESSES, rounds=ROUNDS)
    assert parallelism("CUDA0") == Parallelism(threads=128, processes=1)


def test_cuda_gets_threads_vulkan_processes_and_the_rest_one_of_each(monkeypatch):
    """Vulkan crashed with -j 2 on lavapipe (CI, 2026-12-02): its cores are processes of their own, each with
    its own VkDevice; CUDA's are threads of one process; anything unproven (HIP) runs one worker."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert parallelism("CUDA0") == Parallelism(threads=4, processes=1)
    assert parallelism("Vulkan0") == parallelism("Vulkan1") == Parallelism(threads=1, processes=4, rounds=ROUNDS)
    assert parallelism("ROCm0") == parallelism("Mystery0") == Parallelism(threads=1, processes=1)
    assert Parallelism(4, 1).describe() == "4 worker(s)" and Parallelism(1, 4).describe() == "4 processes"


# --- which cases --ops alone runs -------------------------------------------------------------------

# Params strings as the pin's test-backend-ops prints them (support mode, lavapipe), with whether the inference
# selection keeps them. The slow tier checks the pattern with the real program's std::regex on all 10,602.
SELECTED = [
    (("hsk=128,hsv=128,nh=4,nr23=[4,1],kv=512,nb=1,mask=1,sinks=0,max_bias=0.000000,logit_softcap=0.000000,"
     "prec=f32,type_K=f16,type_V=f16,permute=[0,1,2,3],kv_view=1,v_is_view_of_k=0,n_kv_max=0"), True),
    (("hsk=128,hsv=128,nh=4,nr23=[4,1],kv=512,nb=1,mask=1,sinks=1,max_bias=0.000000,logit_softcap=0.000000,"
     "prec=f32,type_K=f16,type_V=f16,permute=[0,1,2,3],kv_view=1,v_is_view_of_k=0,n_kv_max=0"), False),   # sinks
    (("hsk=576,hsv=512,nh=1,nr23=[20,1],kv=512,nb=3,mask=1,sinks=0,max_bias=0.000000,logit_softcap=0.000000,"
     "prec=f32,type_K=f16,type_V=f16,permute=[0,1,2,3],kv_view=1,v_is_view_of_k=1,n_kv_max=0"), False),   # MLA
    (("hsk=64,hsv=64,nh=4,nr23=[1,1],kv=113,nb=32,mask=1,sinks=0,max_bias=0.000000,logit_softcap=0.000000,"
     "prec=f32,type_K=q5_1,type_V=q5_1,permute=[0,1,2,3],kv_view=1,v_is_view_of_k=0,n_kv_max=0"), False),  # q5_1 KV
    ("type_a=q4_K,type_b=f32,m=16,n=1,k=256,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1,src_overlap=0,m_v=0,pad=0", True),
    (("type_a=iq2_xxs,type_b=f32,m=16,n=1,k=256,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1,src_overlap=0,m_v=0,"
     "pad=0"), False),
    ("type_a=f16,type_b=f16,m=16,n=1,k=256,bs=[1,1],nr=[1,1],per=[0,1,2,3],k_v=0,o=1,src_overlap=0,m_v=0,pad=0", False),
    ("type_a=q4_0,type_b=f32,n_mats=8,n_used=2,b=0,m=512,n=32,k=256,amax=0,m_v=0", True),       # MUL_MAT_ID
    (("type=f32,ne_a=[128,32,2,1],n_dims=128,mode=2,n_ctx=512,fs=1.000000,ef=0.000000,af=1.000000,ff=0,v=0,"
     "inplace=0,n_offs=0"), True),
    (("type=f32,ne_a=[128,32,2,1],n_dims=128,mode=24,n_ctx=512,fs=1.000000,ef=0.000000,af=1.000000,ff=0,v=0,"
     "inplace=0,n_offs=0"), False),                                                                  # vision rope
    # SOFT_MAX has mask, sinks and max_bias too: no rule of its own, so all of its cases
    ("type=f32,ne=[10,5,4,3],mask=0,sinks=0,m_prec=f32,nr23=[1,1],scale=1.000000,max_bias=0.000000,inplace=0", True),
    ("type=f16,ne=[10,5,4,3],nr=[1,1,1,1],nf=1,perm1=0,src_overlap=0", True),                    # ADD
]


@pytest.mark.parametrize("params, kept", SELECTED)
def test_the_inference_selection_keeps_what_a_text_model_runs(params, kept):
    """Python's re reads these lookaheads as ECMAScript does (the slow tier asks the real program)."""
    assert bool(re.search(DEFAULT_SELECTION.params, params)) is kept


def test_a_selection_joins_each_share_from_the_same_start():
    """The selection's lookaheads and a share's pattern make one -p: together the shares keep what the
    selection keeps, each string in exactly one share."""
    sel = DEFAULT_SELECTION.params
    for params, kept in SELECTED:
        shares = [k for k in range(5) if re.search(sel + shard_filter(k, 5)[1:], params)]
        assert len(shares) == (1 if kept else 0), (params, shares)


def test_a_rule_applies_only_to_strings_that_start_with_its_lead():
    rule = CaseRule("hsk=", (("hsk", ("64",)),))
    pattern = selection_filter((rule,))
    assert re.search(pattern, "hsk=64,hsv=64") and not re.search(pattern, "hsk=640,hsv=64")
    assert re.search(pattern, "type=f32,hsk=128")         # another family that has the field: no rule of its own
    assert Selection(("ADD",)).params is None and Selection(("ADD",)).cases == "all"
    assert DEFAULT_SELECTION.cases == "inference" and DEFAULT_SELECTION.rules == INFERENCE_CASES


def _patterns(tmp_path: Path, mode: str) -> list[str]:
    """The -p of each call of the fake program in `mode` (each wrote its argv, a line each, to argv.PID)."""
    calls = [a.read_text().splitlines() for a in tmp_path.glob("argv.*")]
    return sorted(c[c.index("-p") + 1] for c in calls if c[0] == mode)


def test_each_share_gets_the_selection_in_its_own_pattern(tmp_path, monkeypatch):
    """The program is asked for the selection (-p), alone or joined with a share's pattern (by odd digits: this
    program gives no list, its support mode prints test rows)."""
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    runtime = _runtime(tmp_path, f'printf "%s\\n" "$@" > "{tmp_path}/argv.$$"\ncat "{PASSING}"\n')
    run_device(runtime, "Vulkan0", ("SCALE",), {}, parallel=Parallelism(processes=2), params="^(?=type=)")
    assert _patterns(tmp_path, "support") == ["^(?=type=)"]           # the list is asked for the selection
    assert _patterns(tmp_path, "test") == sorted("^(?=type=)" + shard_filter(k, 2)[1:] for k in range(2))
    for a in tmp_path.glob("argv.*"):
        a.unlink()
    run_device(runtime, "Vulkan0", ("SCALE",), {}, parallel=Parallelism(), params="^(?=type=)")
    [argv] = [a.read_text().splitlines() for a in tmp_path.glob("argv.*")]
    assert argv[argv.index("-p") + 1] == "^(?=type=)"


def test_a_vulkan_device_keeps_one_nvidia_shader_cache_folder_per_slot_in_the_tools_cache(tmp_path, monkeypatch):
    """Made here: NVIDIA's driver does not make the folder (the H100's runs of 2026-12-05 left none)."""
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"                                          # the run's folder: scratch or --keep
    run.mkdir()
    cache = shader_cache("Vulkan0", {"GGML_VK_VISIBLE_DEVICES": "0"}, run)
    assert cache.state == ops.EMPTY and cache.root == tmp_path / "cache" / "nvidia-shader-cache" / "Vulkan0"
    env = cache.env({"GGML_VK_VISIBLE_DEVICES": "0"}, 3)
    assert env["__GL_SHADER_DISK_CACHE_PATH"] == str(cache.root / "slot-3") and (cache.root / "slot-3").is_dir()
    assert env["GGML_VK_VISIBLE_DEVICES"] == "0" and "OMP_THREAD_LIMIT" not in env
    (cache.root / "slot-3" / "GLCache").write_bytes(b"pipelines")      # what the driver leaves
    assert shader_cache("Vulkan0", {}, run).state == ops.KEPT           # the next verify finds it
    assert shader_cache("Vulkan1", {}, run).state == ops.EMPTY          # another device has its own
    cuda = shader_cache("CUDA0", {}, run)                               # no Vulkan pipelines: the run's folder
    assert cuda.root == run / "nvidia-shader-cache" and cuda.state == ops.EMPTY
    assert cache.env({"__GL_SHADER_DISK_CACHE": "0"}, 0)["__GL_SHADER_DISK_CACHE"] == "0"
    theirs = {"__GL_SHADER_DISK_CACHE_PATH": "/srv/cache"}
    mine = shader_cache("Vulkan0", theirs, run)
    assert (mine.root, mine.state) == (None, ops.THEIRS) and mine.env(theirs, 5) == theirs


def test_each_run_gets_the_lowest_free_slot(tmp_path):
    """A slot is one process at a time: the runs of one slot share a cache folder, as NVIDIA's driver serves a
    process from the one cache file it takes."""
    seen: list[int] = []

    def env_of(slot: int) -> dict[str, str]:
        seen.append(slot)
        return {"PATH": os.environ["PATH"]}

    hold = ["sh", "-c", "until [ -e last ]; do sleep 0.05; done"]      # holds slot 0 until the last run starts
    runs = [hold, ["true"], ["true"], ["true"], ["touch", "last"]]       # the others pass through slot 1
    shards = ops._run_all(runs, env_of, tmp_path, timeout=30, slots=2)
    assert [s.returncode for s in shards] == [0] * 5 and seen == [0, 1, 1, 1, 1]
