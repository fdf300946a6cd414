"""verify --ops on Mesa's lavapipe (Vulkan on the CPU): the vulkan runtime's own test-backend-ops
passes on Vulkan0 and the record is written; a runtime whose SCALE shader was broken by a
test-only patch FAILS naming SCALE. The second is what shows the check can fail."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from builder.check.ops import (DEFAULT_OPS, DEFAULT_SELECTION, MAX_RECHECKED, MEAN_CASE_MS, OP_COST_MS, RECHECK_RUNS,
                               ROUNDS, Parallelism, load_record, rounds_for,
                               sql_rows)
from builder.check.opshares import by_odd_digits, joined, range_runs
from tests.support.common import REPO, TEST_CACHE, assemble
from tests.support.tiers import compiles

LAVAPIPE = ("--check-env", "GGML_VK_VISIBLE_DEVICES=0")   # ggml skips CPU Vulkan devices unless asked
FAULT = REPO / "tests" / "data" / "ops-fault"
# The default list is about 10,600 cases (5,308 of them FLASH_ATTN_EXT); lavapipe on the 2-core CI
# machine had run 246 after 10 min 50 s in one process (docs/guide/verify.md). The CI runs take ops with few
# cases that still cover a shader each (SCALE: the planted fault's op): 94 cases in 7.6 s in one process
# (measured 2026-12-02). verify now runs Vulkan0 as one process per core, each with its share of the cases
# (builder/check/ops.py, SHARDED_BACKENDS): two on that machine, whose cases are judged and recorded as one
# run, so nothing here depends on the count.
SHORT = "SCALE,RMS_NORM,SWIGLU"


def _copy(runtime, tmp_path):
    out = tmp_path / runtime.name
    shutil.copytree(runtime, out, symlinks=True)
    return out


def test_vulkan_runtime_passes_ops_and_records_it(vulkan_runtime, tmp_path):
    runtime = _copy(vulkan_runtime, tmp_path)
    proc = assemble("verify", str(runtime), "--ops", SHORT, *LAVAPIPE, "--json")
    report = json.loads(proc.stdout)
    ops = {c["name"]: c for c in report["checks"] if c["name"].startswith("ops")}
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ops["ops Vulkan0"]["status"] == "pass", ops
    assert "op cases passed" in ops["ops Vulkan0"]["reason"]
    assert ops["ops record"]["status"] == "pass"
    record = load_record(runtime)                 # validated as it is read back
    assert record is not None
    [entry] = record.devices
    assert (entry.device, entry.result, entry.failed) == ("Vulkan0", "pass", 0)
    assert entry.passed > 0 and entry.ops == tuple(SHORT.split(",")) and entry.cases == "all"
    assert "llvmpipe" in entry.description and entry.driver.startswith("Vulkan")
    # the record is the one unlisted file a runtime may hold: a plain verify still passes with it
    again = assemble("verify", str(runtime), *LAVAPIPE)
    assert again.returncode == 0, again.stderr


def test_a_missing_module_link_fails_the_device(vulkan_runtime, tmp_path):
    """Without tests/libggml-vulkan.so test-backend-ops never loads Vulkan: it runs nothing and exits 0."""
    runtime = _copy(vulkan_runtime, tmp_path)
    (runtime / "tests" / "libggml-vulkan.so").unlink()
    proc = assemble("verify", str(runtime), "--ops", "SCALE", *LAVAPIPE, "--json")
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert proc.returncode == 1
    assert checks["ops Vulkan0"]["status"] == "fail"
    assert checks["ops Vulkan0"]["reason"].startswith("test-backend-ops ran no case on Vulkan0"), checks["ops Vulkan0"]
    assert load_record(runtime).devices[0].result == "fail"


def test_default_list_is_what_runs_without_a_list(vulkan_runtime, tmp_path):
    """--ops alone runs DEFAULT_OPS: every name in it matches cases of the pin's test-backend-ops."""
    listed = subprocess.run([str(vulkan_runtime / "tests" / "test-backend-ops"), "--list-ops"], env={},
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    names = {ln.strip() for ln in listed.stdout.splitlines() if ln.startswith("  ")}
    assert set(DEFAULT_OPS) <= names, set(DEFAULT_OPS) - names


def _support(runtime, cwd, *pattern):
    """(op, params) of every case test-backend-ops lists for the default ops in support mode (no computing)."""
    argv = [str(runtime / "tests" / "test-backend-ops"), "support", "-b", "Vulkan0", "-o", ",".join(DEFAULT_OPS),
            "--output", "sql", *(("-p", pattern[0]) if pattern else ())]
    proc = subprocess.run(argv, env={"GGML_VK_VISIBLE_DEVICES": "0"}, cwd=cwd, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = list(sql_rows(proc.stdout))
    assert None not in rows
    return sorted((r["op_name"], r["op_params"]) for r in rows if r and r["test_mode"] == "support")


# 28 s on the 2-core dev machine, fixtures warm (69 support-mode runs of the program over the whole list, two
# at once; measured 2026-12-05; 20 s before, with 21 runs one at a time).
def test_the_program_reads_the_selection_and_its_runs_as_they_say(vulkan_runtime, tmp_path):
    """The inference selection's -p, read by the pin's own std::regex, keeps exactly the cases Python's re
    keeps of the whole list (4,206 of 10,602 at the pin); the 64 runs made from that list as verify makes them
    (ranges of like cases, sized by cost round by round, joined to the selection) split it exactly as Python's
    re says; so do the odd-digit shares."""
    everything = _support(vulkan_runtime, tmp_path)
    wanted = [(op, params) for op, params in everything if re.search(DEFAULT_SELECTION.params, params)]
    assert len(everything) > 10_000 and 0 < len(wanted) < len(everything) / 2
    assert {op for op, _ in wanted} == set(DEFAULT_OPS)          # every op keeps cases
    assert _support(vulkan_runtime, tmp_path, DEFAULT_SELECTION.params) == wanted
    cost: dict[str, float] = {}
    for op, params in wanted:                     # as verify weighs them (every listed case, supported or not)
        cost[params] = cost.get(params, 0.0) + OP_COST_MS.get(op, MEAN_CASE_MS)
    rounds = rounds_for(len(cost), Parallelism(processes=16, rounds=ROUNDS))
    assert rounds == ROUNDS                         # the default selection is long enough for every round
    runs = range_runs([params for _, params in wanted], 16, rounds, cost)
    assert runs is not None and len(runs) == 16 * ROUNDS
    patterns = [joined(DEFAULT_SELECTION.params, run) for run in runs]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        found = list(pool.map(lambda pattern: _support(vulkan_runtime, tmp_path, pattern), patterns))
    assert found == [[c for c in wanted if re.search(pattern, c[1])] for pattern in patterns]
    assert sorted(c for run in found for c in run) == wanted
    odd = [_support(vulkan_runtime, tmp_path, pattern) for pattern in by_odd_digits(DEFAULT_SELECTION.params, 3)]
    assert sorted(c for share in odd for c in share) == wanted


# faulty_runtime: cold after vulkan_runtime, ninja 78 s wall (every shader generated again for the new build
# folder, 102 s CPU, which ccache does not see; its compiles ccache hits but the SCALE shader's); measured
# 2026-12-05 in a cold .ci/run on a 2-core machine (docs/lab/2026-12-05-cold-suite.md). An earlier
# 9 min 48 s (2026-12-02) was under a load of other builds, not glslc: the whole shader generation of a build
# is about 1 min of wall there, and glslc's own preprocessing (-E) costs 73 ms of a 101 ms compile, so a
# cache in front of glslc would save nothing (tried and measured 2026-12-05). Warm 9.2 s (2026-12-02).
@pytest.fixture(scope="module")
@compiles
def faulty_runtime(llama_tree, tmp_path_factory):
    """The vulkan-ops-fault test recipe (llama-server + test-backend-ops, one CPU level) built from
    the pinned tree with tests/data/ops-fault/scale-offset.patch applied: a --source tree prepared
    here, never a patch in patches/. Its objects but the SCALE shader's are the vulkan runtime's
    (the same relative paths under the cache: ccache hits)."""
    src = TEST_CACHE / "ops-fault-src"
    patch = FAULT / "scale-offset.patch"
    stamp = src / ".ops-fault-patch"
    if not (stamp.is_file() and stamp.read_text() == patch.read_text()):
        work = src.with_name(src.name + ".tmp")
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(src, ignore_errors=True)
        shutil.copytree(llama_tree, work, symlinks=True)
        applied = subprocess.run(["git", "apply", str(patch)], cwd=work, capture_output=True, text=True)
        assert applied.returncode == 0, applied.stderr
        (work / stamp.name).write_text(patch.read_text())
        work.rename(src)
    out = tmp_path_factory.mktemp("ops-fault") / "runtime-vulkan-ops-fault"
    assemble("build", "--recipe", str(FAULT / "vulkan-ops-fault.toml"), "--source", str(src), "--out", str(out),
             "--no-verify", "-q", check=True)
    return out


def test_planted_shader_fault_fails_naming_the_op(faulty_runtime, tmp_path):
    runtime = _copy(faulty_runtime, tmp_path)
    proc = assemble("verify", str(runtime), "--ops", "SCALE,RMS_NORM", *LAVAPIPE)
    assert proc.returncode == 1, proc.stderr
    [line] = [ln for ln in proc.stderr.splitlines() if ln.strip().startswith("ops Vulkan0 ")]
    assert "FAIL" in line and "SCALE(" in line and "differ from the CPU backend" in line, line
    assert "RMS_NORM(" not in line                 # only the broken op is named
    entry = load_record(runtime).devices[0]
    assert (entry.result, entry.device) == ("fail", "Vulkan0")
    assert entry.failed > 0 and entry.first_failures and all(f.startswith("SCALE(") for f in entry.first_failures)
    # a real fault fails every re-run: each failing case ran RECHECK_RUNS more times, alone, and failed again
    assert 0 < entry.failed <= MAX_RECHECKED and len(entry.rechecked) == entry.failed
    runs = RECHECK_RUNS + 1
    assert all(f" failed {runs} of {runs} runs ([SCALE] ERR = " in r for r in entry.rechecked), entry.rechecked
    assert f"failed {runs} of {runs} runs" in line and "ops Vulkan0 flaky" not in proc.stderr
