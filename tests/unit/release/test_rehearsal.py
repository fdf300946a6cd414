"""The local rehearsal's quick parts (tests/support/rehearsal.py): the generated workflow parsed, its
jobs ordered by their needs, env plumbing into real bash steps, and the release job run for real
(download, one checked SHA256SUMS, attestation subjects, `gh release create` recorded) on runtime
artifacts made here. The release job of the old emitter fails under the same rehearsal, as it failed
on GitHub: gh, with no checkout and no --repo, is "not a git repository". The end-to-end rehearsal,
which builds, is tests/integration/test_workflow_rehearsal.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from builder.config.recipe import load_recipe
from builder.release import matrix, workflow
from builder.release.package import SUMS
from tests.support import rehearsal
from tests.support.common import assemble

HEAD = rehearsal.head()


def _doc(tmp_path, *args: str) -> dict:
    # tmp_path is not assemble's checkout: the workflow is told where the pinned commit lives
    repo = ("--assemble-repo", "https://github.com/example-org/assemble.git")
    proc = assemble("matrix", "--emit", "github-actions", *repo, *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


def _runtime_artifact(r: rehearsal.Rehearsal, name: str, files: dict[str, bytes]) -> None:
    """What a runtime job uploads: its files and their SHA256SUMS (written by the real sha256sum)."""
    folder = r.artifacts / f"runtime-{name}"
    folder.mkdir()
    for f, data in files.items():
        (folder / f).write_bytes(data)
    sums = subprocess.run(["sha256sum", *sorted(files)], cwd=folder, capture_output=True, text=True, check=True)
    (folder / SUMS).write_text(sums.stdout)


def test_jobs_run_after_their_needs():
    doc = workflow.workflow(matrix.entries(), workflow.load_runners(None, matrix.entries()), workflow.Pinning(HEAD))
    order = rehearsal.order(doc["jobs"])
    assert order[-1] == "release"
    for job_id, job in doc["jobs"].items():
        assert all(order.index(n) < order.index(job_id) for n in job.get("needs", []))
    with pytest.raises(AssertionError, match="wait on each other"):
        rehearsal.order({"a": {"needs": ["b"]}, "b": {"needs": ["a"]}})


def test_release_job_from_tag_to_a_recorded_release(tmp_path):
    doc = _doc(tmp_path, "--recipe", "cpu", "--recipe", "vulkan")
    r = rehearsal.Rehearsal(tmp_path / "rehearsal", HEAD,
                            results={"runtime-cpu": "success", "runtime-vulkan": "success"})
    _runtime_artifact(r, "cpu", {"runtime-cpu.tar.zst": b"cpu archive", "runtime-cpu.cdx.json": b"{}"})
    _runtime_artifact(r, "vulkan", {"runtime-vulkan.tar.zst": b"vulkan archive"})
    assert r.job("release", doc["jobs"]["release"]) == "success"
    (call,) = r.gh_calls()
    argv = call["argv"]
    assert argv[:3] == ["release", "create", rehearsal.TAG] and "--draft" not in argv
    assert argv[argv.index("--repo") + 1] == rehearsal.REPOSITORY == call["GH_REPO"]
    assert call["cwd"] == str(r.root / "jobs" / "release") and call["problems"] == []
    assert call["files"] == sorted(["runtime-cpu.tar.zst", "runtime-cpu.cdx.json", "runtime-vulkan.tar.zst", SUMS])
    assert sorted(r.attested) == call["files"]
    release = r.root / "jobs" / "release" / "release"
    check = subprocess.run(["sha256sum", "-c", SUMS], cwd=release, capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.count(": OK") == 3, check.stdout


def test_a_failed_runtime_leaves_a_draft(tmp_path):
    doc = _doc(tmp_path, "--recipe", "cpu", "--recipe", "vulkan")
    r = rehearsal.Rehearsal(tmp_path / "draft", HEAD, results={"runtime-cpu": "success", "runtime-vulkan": "failure"})
    _runtime_artifact(r, "cpu", {"runtime-cpu.tar.zst": b"cpu archive"})
    assert r.job("release", doc["jobs"]["release"]) == "success"
    (call,) = r.gh_calls()
    assert "--draft" in call["argv"] and call["files"] == sorted(["runtime-cpu.tar.zst", SUMS])


def _tamper_changed(folder):
    (folder / "runtime-vulkan.tar.zst").write_bytes(b"changed after its job wrote SHA256SUMS")


def _tamper_added(folder):
    (folder / "runtime-vulkan.extra").write_bytes(b"a file its job's SHA256SUMS does not list")


def _tamper_hidden(folder):
    (folder / ".hidden").write_bytes(b"unlisted, and release/* would not show it to a person either")


@pytest.mark.parametrize("tamper", [_tamper_changed, _tamper_added, _tamper_hidden], ids=lambda f: f.__name__)
def test_a_tampered_artifact_stops_the_release_before_attest_and_gh(tmp_path, tamper):
    """One job's artifact tampered beside a good one: GitHub's `bash -eo pipefail` does not stop at a
    failing check left of `&&` in a loop, so the step must stop itself, before attest and before gh."""
    doc = _doc(tmp_path, "--recipe", "cpu", "--recipe", "vulkan")
    r = rehearsal.Rehearsal(tmp_path / "tampered", HEAD,
                            results={"runtime-cpu": "success", "runtime-vulkan": "success"})
    _runtime_artifact(r, "cpu", {"runtime-cpu.tar.zst": b"cpu archive"})
    _runtime_artifact(r, "vulkan", {"runtime-vulkan.tar.zst": b"vulkan archive"})
    tamper(r.artifacts / "runtime-vulkan")
    with pytest.raises(rehearsal.StepFailed, match="One folder") as failed:
        r.job("release", doc["jobs"]["release"])
    assert "::error::" in str(failed.value)
    assert r.gh_calls() == [] and r.attested == [] and r.results["release"] == "failure"


def test_the_old_release_job_fails_as_it_did_on_github(tmp_path):
    """The release job as the emitter wrote it before issue 27: no checkout, no --repo, no GH_REPO."""
    old = {"needs": ["runtimes"], "if": "startsWith(github.ref, 'refs/tags/')", "runs-on": "ubuntu-latest",
           "steps": [{"uses": f"actions/download-artifact@{workflow.ACTIONS['download-artifact'].sha}",
                      "with": {"pattern": "runtime-*", "path": "jobs"}},
                     {"name": "sums",
                      "run": f"mkdir release\nmv jobs/*/* release/\n(cd release && sha256sum -c {SUMS})"},
                     {"name": "release", "env": {"GH_TOKEN": "${{ github.token }}"},
                      "run": 'gh release create "${{ github.ref_name }}" release/* --title "${{ github.ref_name }}"'}]}
    r = rehearsal.Rehearsal(tmp_path / "old", HEAD, results={"runtimes": "success"})
    _runtime_artifact(r, "cpu", {"runtime-cpu.tar.zst": b"cpu archive"})
    with pytest.raises(rehearsal.StepFailed, match="not a git repository"):
        r.job("release", old)


def test_build_steps_pass_each_argument_as_one_word(tmp_path):
    """Env plumbing: each job's Build step, run by bash with the job's and step's env, hands `assemble`
    exactly the matrix entry's arguments (an argv recorder stands in for assemble in this test only;
    the end-to-end rehearsal runs the real one)."""
    doc = _doc(tmp_path)
    r = rehearsal.Rehearsal(tmp_path / "plumbing", HEAD)
    recorder = r.bin / "assemble"
    recorder.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    recorder.chmod(0o755)
    for e in matrix.entries():
        job = doc["jobs"][workflow.job_id(e)]
        build = next(s for s in job["steps"] if s.get("name") == "Build")
        folder = tmp_path / "jobs" / workflow.job_id(e)
        folder.mkdir(parents=True)
        env = {"PATH": f"{r.bin}:/usr/bin:/bin", **{k: r.evaluate(v, []) for k, v in job["env"].items()},
               **{k: r.evaluate(v, []) for k, v in build["env"].items()}}
        r.run(build, folder, env, e.name, [])
        argv = json.loads(r.logs[e.name])
        out = "unit-out" if e.unit else "runtime"
        assert argv == ["build", *[x for pair in e.build_args for x in pair], "--out", out], (e.name, argv)


def test_unknown_expression_fails_the_rehearsal(tmp_path):
    r = rehearsal.Rehearsal(tmp_path / "x", HEAD)
    assert r.evaluate("a ${{ github.ref_name }} b", []) == f"a {rehearsal.TAG} b"
    with pytest.raises(AssertionError, match="does not know the expression"):
        r.evaluate("${{ github.event.head_commit.message }}", [])


# Stands in for `assemble` where the runner would need CUDA and ROCm: it checks what the real one
# would be handed (each --unit-from folder present, holding what that unit's job uploaded) and writes
# what the real one would write (a unit folder; a packaged folder with its SHA256SUMS).
_SPLIT_ASSEMBLE = '''#!{python}
import hashlib, json, os, sys
from pathlib import Path
argv = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(json.dumps({{"argv": argv, "cwd": os.getcwd()}}) + "\\n")
if argv[0] == "build":
    out = Path(argv[argv.index("--out") + 1])
    for i, a in enumerate(argv):
        if a == "--unit-from":
            unit, folder = argv[i + 1].split("=", 1)
            made = Path(folder) / "made-by"
            assert made.is_file(), f"no unit folder {{folder}} here: {{sorted(os.listdir('.'))}}"
            assert made.read_text() == unit, made.read_text()
    out.mkdir()
    (out / "made-by").write_text(argv[argv.index("--only-unit") + 1] if "--only-unit" in argv else "runtime")
elif argv[0] == "package":
    dist = Path(argv[argv.index("--out-dir") + 1])
    dist.mkdir()
    name = os.environ["BUILD_NAME"] + ".tar.zst"
    (dist / name).write_bytes(b"archive of " + name.encode())
    (dist / "SHA256SUMS").write_text(hashlib.sha256((dist / name).read_bytes()).hexdigest() + "  " + name + "\\n")
'''


def test_split_recipe_merge_path_rehearsed(tmp_path):
    """rocm-cuda-units: the CUDA unit's job uploads its folder, the merge job (which needs only that
    job) downloads it under the name its --unit-from gives, and the release gets the merged runtime."""
    doc = _doc(tmp_path, "--recipe", "rocm-cuda-units")
    log = tmp_path / "assemble.jsonl"
    r = rehearsal.Rehearsal(tmp_path / "split", HEAD,
                            assemble=_SPLIT_ASSEMBLE.format(python=sys.executable, log=str(log)))
    results = r.workflow(doc)
    assert set(results.values()) == {"success"} and next(iter(results)).startswith("unit-"), results
    calls = [json.loads(ln)["argv"] for ln in log.read_text().splitlines()]
    builds = [c for c in calls if c[0] == "build"]
    unit, merge = matrix.entries([load_recipe("rocm-cuda-units")])
    assert builds[0] == ["build", *[x for p in unit.build_args for x in p], "--out", "unit-out"]
    assert builds[1] == ["build", *[x for p in merge.build_args for x in p], "--out", "runtime"]
    (call,) = r.gh_calls()
    assert call["files"] == sorted([f"{merge.name}.tar.zst", SUMS]) and "--draft" not in call["argv"]
