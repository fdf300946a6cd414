"""docs/figures.md, the one home of measured figures, is what scripts/figures writes from docs/results/
(so a figure cannot go stale), and the script refuses what it cannot read instead of dropping it."""
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "figures"


def _figures(*args, cwd=ROOT):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd)


def test_the_committed_figures_are_what_the_results_give():
    got = _figures("--check")
    assert got.returncode == 0, got.stderr


def test_a_new_result_makes_the_committed_table_stale_until_it_is_regenerated(tmp_path):
    results, out = tmp_path / "results", tmp_path / "figures.md"
    shutil.copytree(ROOT / "docs" / "results", results)
    assert _figures("--results", str(results), "--out", str(out)).returncode == 0
    before = out.read_text()
    new = results / "ci-2030-01-02"
    new.mkdir()
    (new / "bench-remote-cache.json").write_text(json.dumps({
        "recipe": "cpu", "cpu": "Test CPU", "cores": 2, "cold_seconds": 301.2, "warm_seconds": 9.44,
        "a": {"compiles": 10, "hits": 0, "remote_hits": 0, "launcher": "ccache"},
        "b": {"compiles": 10, "hits": 9, "remote_hits": 9, "launcher": "ccache"}}))
    stale = _figures("--check", "--results", str(results), "--out", str(out))
    assert stale.returncode == 1
    assert stale.stderr.count("\n") == 1 and "fix: run scripts/figures" in stale.stderr
    assert out.read_text() == before                       # --check writes nothing
    assert _figures("--results", str(results), "--out", str(out)).returncode == 0
    text = out.read_text()
    assert "## ci-2030-01-02 (Test CPU)" in text
    assert "| machine A, cold compile into a shared cache (recipe cpu, 2 cores) | 5 min 01 s |" in text
    assert "| machine B, remote hits | 9 of 10 (ccache) |" in text
    assert _figures("--check", "--results", str(results), "--out", str(out)).returncode == 0


def test_a_result_with_no_reader_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    results, out = tmp_path / "results", tmp_path / "figures.md"
    (results / "dev-2030-01-01").mkdir(parents=True)
    (results / "dev-2030-01-01" / "bench-new-thing.json").write_text("{}")
    got = _figures("--results", str(results), "--out", str(out))
    assert got.returncode == 2
    assert got.stderr.count("\n") == 1
    assert "bench-new-thing.json" in got.stderr and "no reader for 'bench-new-thing'" in got.stderr
    assert "fix: add one to READERS" in got.stderr
    assert not out.exists()


def test_record_keeps_a_real_pytest_run_and_refuses_a_failing_one(tmp_path):
    results, out = tmp_path / "results", tmp_path / "figures.md"
    tests = tmp_path / "t"
    tests.mkdir()
    (tests / "test_a.py").write_text("import pytest\n\ndef test_one():\n    pass\n\n"
                                     "def test_two():\n    pass\n\n"
                                     "@pytest.mark.skip(reason='shown as skipped')\ndef test_three():\n    pass\n")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)]
    got = _figures("--record", "tiny", "--machine", "ci", "--results", str(results), "--out", str(out), "--", *cmd)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "2 passed, 1 skipped" in got.stdout                # the run's own output is shown as it goes
    (record,) = results.glob("ci-*/suite-tiny.json")
    data = json.loads(record.read_text())
    assert data["outcomes"] == {"passed": 2, "skipped": 1}
    assert data["seconds"] > 0 and data["command"] == shlex.join(cmd)
    assert data["cpu_seconds"] > 0 and data["load_average_before"] >= 0   # CPU: the figure a shared machine keeps
    assert "of CPU): 2 passed, 1 skipped" in out.read_text()
    assert "2 passed, 1 skipped" in out.read_text()

    (tests / "test_b.py").write_text("def test_fails():\n    assert False\n")
    failing = _figures("--record", "broken", "--machine", "ci", "--results", str(results), "--out", str(out),
                       "--", *cmd)
    assert failing.returncode == 1
    assert "not recorded: the command exited 1" in failing.stderr
    assert not list(results.glob("ci-*/suite-broken.json"))


def test_record_refuses_a_bad_name_before_running_anything(tmp_path):
    marker = tmp_path / "ran"
    got = _figures("--record", "Quick Suite", "--machine", "dev", "--results", str(tmp_path), "--out",
                   str(tmp_path / "f.md"), "--", "touch", str(marker))
    assert got.returncode == 2 and "fix: e.g. --record quick --machine dev" in got.stderr
    assert not marker.exists()


def test_record_sums_the_runs_of_the_last_scripts_test(tmp_path):
    """.ci/run: the quick suite's scripts/test, then the whole suite's, which is two pytest runs."""
    results, out = tmp_path / "results", tmp_path / "figures.md"
    for name, body in (("quick", "def test_q():\n    pass\n"),
                       ("unit", "def test_u1():\n    pass\n\ndef test_u2():\n    pass\n"),
                       ("slow", "import pytest\n\n@pytest.mark.skip(reason='x')\ndef test_s():\n    pass\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"test_{name}.py").write_text(body)
    pytest_ = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider"
    script = (f"echo 'scripts/test: Python 3.13.1 (/venv-a/bin/python)'; {pytest_} {tmp_path / 'quick'} && "
              f"echo 'scripts/test: Python 3.11.2 (/usr/bin/python3)' && "
              f"{pytest_} {tmp_path / 'unit'} && {pytest_} {tmp_path / 'slow'}")
    got = _figures("--record", "two", "--machine", "ci", "--results", str(results), "--out", str(out),
                   "--", "sh", "-c", script)
    assert got.returncode == 0, got.stdout + got.stderr
    (record,) = results.glob("ci-*/suite-two.json")
    data = json.loads(record.read_text())
    assert data["outcomes"] == {"passed": 2, "skipped": 1} and data["python"] == "Python 3.11.2"
    assert len(data["runs"]) == 2 and all(s >= 0 for s in data["runs"])
    assert "; its pytest runs " in out.read_text()


def test_a_bench_ops_run_names_the_environment_it_changed_but_not_the_driver_files(tmp_path):
    results, out = tmp_path / "results", tmp_path / "figures.md"
    (results / "dev-2030-01-03").mkdir(parents=True)
    row = {"device": "Vulkan0", "op": "SCALE,ADD", "cases_selected": "inference", "jobs": 1, "processes": 2,
           "rounds": 1, "schedule": "queue", "modules": "all", "seconds": 3.1, "cases": 79, "failed": 0,
           "unsupported": 3, "capped": False, "returncode": 0, "error": "", "stderr_tail": ""}
    (results / "dev-2030-01-03" / "bench-ops-omp.json").write_text(json.dumps({
        "host": "h", "cap_s": 150, "env": {"VK_DRIVER_FILES": "/usr/share/vulkan/icd.d/x.json", "OMP_THREAD_LIMIT": "1"},
        "rows": [row], "finished": {}}))
    assert _figures("--results", str(results), "--out", str(out)).returncode == 0
    [line] = [ln for ln in out.read_text().splitlines() if "bench-ops.py" in ln]
    assert "2 processes at once, 1 rounds of runs, with OMP_THREAD_LIMIT=1, the whole list" in line
    assert "VK_DRIVER_FILES" not in line and "79 passed, 0 failed, 3.1s" in line
