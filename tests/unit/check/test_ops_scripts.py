"""scripts/ops-timeline.py and scripts/ops-split-model.py over a kept run made from captured lavapipe output
(tests/data/ops-output), its cases one second apart: what they charge is checked, not only that they run."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys

from tests.support.common import REPO

CAPTURED = REPO / "tests" / "data" / "ops-output"


def _kept(tmp_path):
    """One process's output, case k printed k seconds after the first, and the program's list beside it."""
    lines, k = [], 0
    for line in (CAPTURED / "lavapipe-scale-pass.sql").read_text().splitlines(keepends=True):
        if line.startswith("INSERT"):
            line = re.sub(r"VALUES \('[^']*'", f"VALUES ('2026-12-05T17:00:{k:02d}Z'", line, count=1)
            k += 1
        lines.append(line)
    (tmp_path / "shard-0.out").write_text("".join(lines))
    (tmp_path / "list-0.out").write_text((CAPTURED / "lavapipe-scale-support.sql").read_text())
    return tmp_path


def _script(name, *args):
    return subprocess.run([sys.executable, str(REPO / "scripts" / name), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def test_the_timeline_charges_each_second_to_the_case_printed_after_it(tmp_path):
    got = _script("ops-timeline.py", _kept(tmp_path), "--by", "type")
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines()[0] == "1 processes, 7 cases, 7 process-seconds; first cases 0-0s, last at 6s"
    rows = {ln.split()[0]: ln.split()[1:] for ln in got.stdout.splitlines()[1:]}
    assert rows["SCALE:f32"][:2] == ["4.0s", "4"] and rows["SCALE:bf16"][:2] == ["3.0s", "3"]


def test_the_split_model_plays_every_split_from_the_kept_run(tmp_path):
    """The 4 supported cases cost 1 s each (the bf16 ones are not supported: left out). One slot plays every
    run one after another; two slots end together, whichever way the runs are sized."""
    kept = _kept(tmp_path)
    one = _script("ops-split-model.py", kept, "--processes", 1, "--rounds", 1, "--start", 0)
    two = _script("ops-split-model.py", kept, "--processes", 2, "--rounds", 1, "--start", 0)
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
    assert one.stdout.splitlines()[0] == "4 listed cases, 4 process-seconds by the model"
    assert all("(1 runs)" in ln and "last slot ends     4s, first     4s" in ln for ln in one.stdout.splitlines()[1:])
    assert all("(2 runs)" in ln and "last slot ends     2s, first     2s" in ln for ln in two.stdout.splitlines()[1:])
    assert len(two.stdout.splitlines()) == 3                          # sized by count and by OP_COST_MS


def test_a_slot_that_frees_first_takes_the_next_run():
    model = runpy.run_path(str(REPO / "scripts" / "ops-split-model.py"), run_name="model")
    assert model["played"]([10, 2, 3, 3], 2, 0.0) == [10, 8]          # runs 3 and 4 both go to the second slot
    assert model["played"]([1, 1], 4, 1.0) == [2, 2]                  # no more slots than runs
