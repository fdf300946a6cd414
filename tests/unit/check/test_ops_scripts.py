"""scripts/ops-timeline.py and scripts/ops-split-model.py over a kept run made from captured lavapipe output
(tests/data/ops-output), its cases one second apart: what they charge is checked, not only that they run."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys

from tests.support.common import REPO

CAPTURED = REPO / "tests" / "data" / "ops-output"


def _kept(tmp_path, late=0):
    """One process's output, case k printed k seconds after the first (from the fourth case on, the last
    supported one, `late` seconds later still), and the program's list beside it."""
    lines, k = [], 0
    for line in (CAPTURED / "lavapipe-scale-pass.sql").read_text().splitlines(keepends=True):
        if line.startswith("INSERT"):
            second = k + (late if k >= 3 else 0)
            line = re.sub(r"VALUES \('[^']*'", f"VALUES ('2026-12-05T17:00:{second:02d}Z'", line, count=1)
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
    assert len(two.stdout.splitlines()) == 4                          # sized by count, weight and price


def test_priced_by_string_a_slow_case_stays_in_its_own_run(tmp_path):
    """The fourth supported case took 5 s, the others 1 s each. Priced by its kind's mean the 8 s spread over
    the 4 cases (two runs of 4 s); priced by string the run holding that case takes 6 s."""
    kept = _kept(tmp_path, late=4)
    args = (kept, "--processes", 2, "--rounds", 1, "--start", 0)
    by_kind, by_string = _script("ops-split-model.py", *args), _script("ops-split-model.py", *args, "--price", "string")
    assert by_kind.returncode == by_string.returncode == 0, by_kind.stderr + by_string.stderr
    assert "last slot ends     4s, first     4s, longest run    4s" in by_kind.stdout.splitlines()[1]
    assert "last slot ends     6s, first     2s, longest run    6s" in by_string.stdout.splitlines()[1]


def test_op_cost_takes_op_ms_pairs_and_refuses_anything_else(tmp_path):
    kept = _kept(tmp_path)
    assert _script("ops-split-model.py", kept, "--op-cost", "SCALE=10,MUL=3").returncode == 0
    bad = _script("ops-split-model.py", kept, "--op-cost", "SCALE")
    assert bad.returncode != 0 and "give OP=MS pairs" in bad.stderr and "Traceback" not in bad.stderr


def test_a_slot_that_frees_first_takes_the_next_run():
    model = runpy.run_path(str(REPO / "scripts" / "ops-split-model.py"), run_name="model")
    assert model["played"]([10, 2, 3, 3], 2, 0.0) == [10, 8]          # runs 3 and 4 both go to the second slot
    assert model["played"]([1, 1], 4, 1.0) == [2, 2]                  # no more slots than runs


def test_the_own_module_view_holds_the_program_the_device_s_module_and_the_cpu_variants_alone(tmp_path):
    """bench-ops --own-module (an experiment): test-backend-ops loads every module beside it, so the view keeps
    the CUDA module of a cuda-vulkan runtime away from its Vulkan processes; the program is a copy (its real
    folder is where it looks for modules), lib/ the runtime's."""
    view_of = runpy.run_path(str(REPO / "scripts" / "bench-ops.py"))["own_module_view"]
    rt = tmp_path / "runtime-cuda-vulkan"
    for d in ("bin", "lib", "tests"):
        (rt / d).mkdir(parents=True)
    program = rt / "tests" / "test-backend-ops"
    program.write_bytes(b"\x7fELF judge")
    program.chmod(0o755)
    for name in ("cuda", "vulkan", "cpu-haswell", "cpu-x64"):
        (rt / "bin" / f"libggml-{name}.so").write_bytes(name.encode())
        (rt / "tests" / f"libggml-{name}.so").symlink_to(f"../bin/libggml-{name}.so")
    view = view_of(rt, "Vulkan0", tmp_path / "views")
    tests = view / "tests"
    assert sorted(p.name for p in tests.iterdir()) == [
        "libggml-cpu-haswell.so", "libggml-cpu-x64.so", "libggml-vulkan.so", "test-backend-ops"]
    copied = tests / "test-backend-ops"
    assert not copied.is_symlink() and copied.read_bytes() == program.read_bytes() and copied.stat().st_mode & 0o111
    assert (tests / "libggml-vulkan.so").resolve() == (rt / "bin" / "libggml-vulkan.so").resolve()
    assert (view / "lib").resolve() == (rt / "lib").resolve()
    cuda = {p.name for p in (view_of(rt, "CUDA0", tmp_path / "views") / "tests").iterdir()}
    assert "libggml-cuda.so" in cuda and "libggml-vulkan.so" not in cuda
