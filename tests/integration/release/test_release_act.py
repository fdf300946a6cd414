"""The emitted release workflow under a real engine, nektos/act (tests/support/act.py): act's own `needs`,
`if:`, expressions, job results and shells; the real checkout, setup-python, upload- and download-artifact
at the commits the workflow pins; stand-ins only for `gh` and the signed attestation (GitHub's servers).

- From a tag to a release: the cpu recipe's workflow, emitted from this checkout, in a repository made of
  this checkout's files and tagged v1.2.3; every job installs assemble and its locked dependencies by
  sha256 from PyPI, builds (the suite's cpu build folder, through the shared ASSEMBLE_CACHE), packages and
  releases; the shared compile cache is a Redis with a password on 127.0.0.1, reached with the read
  environment's login, and the tag's build writes nothing to it.
- Planted failures, on the workflow of two recipes (cpu and the split rocm-cuda-units) whose build steps
  are replaced by a fake package (no compile; the `needs`, `if:`, the merge job's unit check and the whole
  release job are the emitted ones): a failing unit job, a failing runtime job, a tampered artifact, and
  re-runs over a draft and over a published release, each judged from what the gh stand-in recorded.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from builder.config.remotecache import READ_ONLY_ENV
from builder.config.recipe import load_recipe
from builder.release import matrix, workflow
from builder.release.package import SUMS
from scripts.support.remotecache import redis_counts, redis_server
from tests.support import act
from tests.support.common import REPO, TEST_CACHE, assemble

TAG = "v1.2.3"
READER, READER_PASSWORD, ADMIN_PASSWORD = "cache-reader", "reader-pw-1", "admin-pw-1"
# the login docs/guide/release.md gives the read environment (compile-cache-read)
READER_ACL = ("~*", "+get", "+exists", "+ping", "+hello", "+auth")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _tagged_repo(folder: Path, files: dict[str, bytes | Path], tag: str = TAG) -> Path:
    """A git repository holding `files` (relative path -> bytes, or a file to copy), committed and tagged."""
    folder.mkdir(parents=True)
    _git(folder, "init", "-q", "-b", "main")
    for rel, content in files.items():
        dest = folder / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copy2(content, dest, follow_symlinks=False)
        else:
            dest.write_bytes(content)
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "-m", "release")
    _git(folder, "tag", "-a", "-m", tag, tag)
    return folder


def _emit(*args: str) -> str:
    proc = assemble("matrix", "--emit", "github-actions", *args, "--allow-dirty", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# --- planted failures: the emitted workflow, with a stand-in for assemble --------------------------------

# Stands in for `assemble` where a runner would need CUDA and ROCm (and a build would take minutes): it
# records what the emitted steps hand it, checks what the real one would check (each --unit-from folder
# is there, holding what that unit's job uploaded) and writes what the real one writes (a unit folder; a
# package with its SHA256SUMS). PLANT_FAIL / PLANT_TAMPER name the jobs (BUILD_NAME) where it fails, or
# changes its archive after summing it.
STAND_IN = """#!/usr/bin/env python3
# STAND-IN for assemble (tests/integration/release/test_release_act.py), not the real assemble.
import hashlib, json, os, sys
from pathlib import Path
argv, name = sys.argv[1:], os.environ["BUILD_NAME"]
with open(os.environ["PLANT_LOG"], "a") as log:
    log.write(json.dumps({"job": name, "argv": argv}) + "\\n")
if name in os.environ.get("PLANT_FAIL", "").split(","):
    sys.exit(f"a planted failure in {name}")
if argv[0] == "build":
    for i, a in enumerate(argv):
        if a == "--unit-from":
            unit, folder = argv[i + 1].split("=", 1)
            made = Path(folder) / "made-by"
            assert made.is_file() and made.read_text() == unit, (folder, sorted(os.listdir(".")))
    out = Path(argv[argv.index("--out") + 1])
    out.mkdir()
    (out / "made-by").write_text(argv[argv.index("--only-unit") + 1] if "--only-unit" in argv else "runtime")
elif argv[0] == "package":
    dist = Path(argv[argv.index("--out-dir") + 1])
    dist.mkdir()
    (dist / f"runtime-{name}.tar.zst").write_text(f"runtime {name}\\n")
    (dist / f"runtime-{name}.cdx.json").write_text(json.dumps({"name": name}) + "\\n")
    (dist / "SHA256SUMS").write_text("".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\\n"
                                             for p in sorted(dist.iterdir())))
    if name in os.environ.get("PLANT_TAMPER", "").split(","):
        with open(dist / f"runtime-{name}.tar.zst", "a") as f:
            f.write("tampered\\n")
"""
RECIPES = ("--recipe", "cpu", "--recipe", "rocm-cuda-units")


def _planted() -> str:
    """The workflow of cpu + rocm-cuda-units as emitted, but for each job's install step: it puts the
    stand-in on PATH instead of installing assemble (doctor, build, package and every other step,
    `needs` and `if:` are the emitted ones)."""
    doc = yaml.safe_load(_emit(*RECIPES))
    for job in doc["jobs"].values():
        job["steps"] = [{"name": "Stand-in assemble", "id": workflow.INSTALL_STEP, "env": {"STAND_IN": STAND_IN},
                         "run": 'mkdir -p "$RUNNER_TEMP/bin"\nprintf \'%s\' "$STAND_IN" > "$RUNNER_TEMP/bin/assemble"\n'
                                'chmod +x "$RUNNER_TEMP/bin/assemble"\necho "$RUNNER_TEMP/bin" >> "$GITHUB_PATH"'}
                        if s.get("id") == workflow.INSTALL_STEP else s for s in job["steps"]]
    return workflow.to_yaml(doc)


def _run_planted(tmp_path: Path, fail: str = "", tamper: str = "", releases: dict | None = None) -> act.ActRun:
    """The planted workflow under act; what the stand-in was handed is in tmp_path/assemble.jsonl."""
    repo = _tagged_repo(tmp_path / "repo", {".github/workflows/release.yml": _planted().encode()})
    log = tmp_path / "assemble.jsonl"
    log.touch()
    run = act.run(repo / ".github/workflows/release.yml", repo, releases=releases, root=tmp_path / "act",
                  env={"PLANT_LOG": str(log), "PLANT_FAIL": fail, "PLANT_TAMPER": tamper}, timeout=600)
    return run


def _handed(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "assemble.jsonl").read_text().splitlines()]


def _create(run: act.ActRun) -> dict:
    calls = [c for c in run.gh_calls if c["argv"][:2] == ["release", "create"]]
    assert len(calls) == 1, run.gh_calls
    return calls[0]


def test_every_runtime_built_makes_a_final_release_with_every_file_attested(tmp_path):
    """Every job succeeds: each Build step hands assemble exactly its matrix entry's arguments (each one
    word), the split recipe's merge job finds its unit's folder under the name --unit-from gives, and
    the release is final, every released file attested and listed in SHA256SUMS."""
    run = _run_planted(tmp_path)
    assert run.exit_code == 0, run.log[-4000:]
    assert set(run.jobs.values()) == {"success"} and len(run.jobs) == 4, run.jobs
    for e in matrix.entries([load_recipe(r) for r in RECIPES[1::2]]):
        builds = [c["argv"] for c in _handed(tmp_path) if c["job"] == e.name and c["argv"][0] == "build"]
        out = "unit-out" if e.unit else "runtime"
        assert builds == [["build", *[x for pair in e.build_args for x in pair], "--out", out]], (e.name, builds)
    call = _create(run)
    assert "--draft" not in call["argv"] and "INCOMPLETE" not in " ".join(call["argv"]), call
    release = run.releases[act.REPOSITORY][TAG]
    assert release["draft"] is False
    names = set(release["assets"])
    assert names == {"runtime-cpu.tar.zst", "runtime-cpu.cdx.json", "runtime-rocm-cuda-units-gfx1100.tar.zst",
                     "runtime-rocm-cuda-units-gfx1100.cdx.json", SUMS}, names
    assert sorted(Path(s).name for s in run.subjects) == sorted(names)      # every released file attested
    sums = run.asset(SUMS).read_text()
    for name in names - {SUMS}:
        assert hashlib.sha256(run.asset(name).read_bytes()).hexdigest() in sums, name


def test_a_failing_unit_fails_its_runtime_and_the_release_is_a_draft_naming_it(tmp_path):
    """The split recipe's unit fails: its merge job runs and fails naming the unit (never skipped), the
    cpu runtime is still released, as a draft whose notes say what is missing."""
    run = _run_planted(tmp_path, fail="rocm-cuda-units-unit-cuda")
    assert run.jobs["unit-rocm-cuda-units-unit-cuda"] == "failure", run.jobs
    assert run.jobs["runtime-rocm-cuda-units-gfx1100"] == "failure", run.jobs        # failed, not skipped
    assert "units not built: unit-rocm-cuda-units-unit-cuda=failure" in run.job_log("runtime-rocm-cuda-units-gfx1100")
    assert run.jobs["runtime-cpu"] == "success" and run.jobs["release"] == "success", run.jobs
    call = _create(run)
    assert "--draft" in call["argv"], call
    notes = call["argv"][call["argv"].index("--notes") + 1]
    assert notes.startswith("INCOMPLETE, a draft: not built: rocm-cuda-units-gfx1100 (failure)."), notes
    assert set(run.releases[act.REPOSITORY][TAG]["assets"]) == {"runtime-cpu.tar.zst", "runtime-cpu.cdx.json", SUMS}
    assert run.releases[act.REPOSITORY][TAG]["draft"] is True


def test_a_failing_runtime_makes_a_draft(tmp_path):
    run = _run_planted(tmp_path, fail="cpu")
    assert run.jobs["runtime-cpu"] == "failure" and run.jobs["release"] == "success", run.jobs
    call = _create(run)
    notes = call["argv"][call["argv"].index("--notes") + 1]
    assert "--draft" in call["argv"] and "not built: cpu (failure)" in notes, call


def test_a_skipped_runtime_is_not_built_and_makes_a_draft(tmp_path):
    """A job GitHub skips (here, planted: `if: false`) has no files: the release names it and stays a draft."""
    doc = yaml.safe_load(_planted())
    doc["jobs"]["runtime-cpu"]["if"] = "${{ false }}"
    repo = _tagged_repo(tmp_path / "repo", {".github/workflows/release.yml": workflow.to_yaml(doc).encode()})
    (tmp_path / "assemble.jsonl").touch()
    run = act.run(repo / ".github/workflows/release.yml", repo, root=tmp_path / "act", timeout=600,
                  env={"PLANT_LOG": str(tmp_path / "assemble.jsonl")})
    assert run.jobs["runtime-cpu"] == "skipped" and run.jobs["release"] == "success", run.jobs
    call = _create(run)
    notes = call["argv"][call["argv"].index("--notes") + 1]
    assert "--draft" in call["argv"] and "not built: cpu (skipped)" in notes, call


def test_a_tampered_artifact_stops_the_release_before_attest_and_gh(tmp_path):
    run = _run_planted(tmp_path, tamper="cpu")
    assert run.jobs["release"] == "failure", run.jobs
    assert "fails its SHA256SUMS" in run.job_log("release"), run.job_log("release")[-3000:]
    assert run.gh_calls == [] and run.attested == [] and run.releases[act.REPOSITORY] == {}


def test_a_rerun_uploads_into_a_draft_and_never_touches_a_published_release(tmp_path):
    """Re-runs after the release exists: a draft takes the files again (and stays a draft); a published
    release keeps its assets, and the job fails with one line saying so."""
    draft = {TAG: {"draft": True, "assets": {"runtime-cpu.tar.zst": "old"}}}
    run = _run_planted(tmp_path / "one", releases=copy.deepcopy(draft))
    assert run.jobs["release"] == "success", run.log[-3000:]
    assert [c["argv"][:2] for c in run.gh_calls if c["argv"][:2] != ["release", "view"]] == \
        [["release", "upload"], ["release", "edit"]], run.gh_calls
    release = run.releases[act.REPOSITORY][TAG]
    assert release["draft"] is True and run.asset("runtime-cpu.tar.zst").read_text() == "runtime cpu\n"
    assert "exists as a draft: its files were replaced" in run.job_log("release")

    published = {TAG: {"draft": False, "assets": {"runtime-cpu.tar.zst": "old"}}}
    run = _run_planted(tmp_path / "two", releases=copy.deepcopy(published))
    assert run.jobs["release"] == "failure", run.jobs
    assert f"release {TAG} is published: its assets are never replaced; nothing was uploaded" in run.job_log("release")
    assert [c["argv"][:2] for c in run.gh_calls] == [["release", "view"]], run.gh_calls
    assert run.releases[act.REPOSITORY] == published


# --- from a tag to a release, for real --------------------------------------------------------------

def _working_tree() -> dict[str, bytes | Path]:
    """This checkout as it is (tracked and untracked files git does not ignore): what CI would commit."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    return {rel: REPO / rel for rel in listed if rel and ((REPO / rel).is_file() or (REPO / rel).is_symlink())}


def test_the_cpu_workflow_runs_from_a_tag_to_a_release_reading_the_cache_and_writing_nothing(tmp_path, cpu_runtime):
    """cpu_runtime first: the job's `assemble build` (the same recipe, toolchain and defines, the same
    locked ccache) compiles from the suite's ccache objects on a cold cache (~4 min on 2 cores, all
    hits) and reuses its own build folder from then on (the act root below stays at one path). The
    tag's build reads the shared cache and never writes it; the cold run's misses were looked up there."""
    text = _emit("--recipe", "cpu")
    files = {**_working_tree(), ".github/workflows/release.yml": text.encode()}
    repo = _tagged_repo(tmp_path / "repo", files)
    with redis_server(tmp_path / "redis", password=ADMIN_PASSWORD,
                      acl={READER: (READER_PASSWORD, READER_ACL)}) as url:
        admin = url.replace("redis://", f"redis://{ADMIN_PASSWORD}@")
        before = redis_counts(admin)
        reader = url.replace("redis://", f"redis://{READER}:{READER_PASSWORD}@")
        # One root for every run of this test: setup-python puts its tool cache's lib/ in LD_LIBRARY_PATH,
        # which keys the build folder (builder.units.environment.KEYED), so only a fixed tool cache path
        # lets the next run reuse this one's build (on GitHub the tool cache's path is fixed too).
        root = TEST_CACHE / "act-release-cpu"
        shutil.rmtree(root, ignore_errors=True)
        run = act.run(repo / ".github/workflows/release.yml", repo, root=root, timeout=1800,
                      secrets={"ASSEMBLE_REMOTE_CACHE": reader},
                      env={"ASSEMBLE_CACHE": str(TEST_CACHE / "cache")})
        after = redis_counts(admin)
    assert run.exit_code == 0 and run.jobs == {"runtime-cpu": "success", "release": "success"}, run.log[-6000:]
    job = run.job_log("runtime-cpu")
    # installed by hash from the lock, assemble from the tag's own checkout
    assert "pip install --require-hashes --only-binary=:all: --no-deps -r" in text
    assert "Successfully installed" in job and "assemble-0.1.0" in job, job[-3000:]
    assert "(read-only)" in job, job[-4000:]                   # the tag's build was told to only read
    assert after["writes"] == before["writes"] and after["keys"] == before["keys"], (before, after)
    call = _create(run)
    assert "--draft" not in call["argv"] and run.releases[act.REPOSITORY][TAG]["draft"] is False
    names = set(run.releases[act.REPOSITORY][TAG]["assets"])
    archives = [n for n in names if n.endswith(".tar.zst")]
    assert len(archives) == 1 and archives[0].startswith("runtime-cpu-"), names
    assert {n.rsplit(".", 2)[-2] + "." + n.rsplit(".", 1)[-1] for n in names if n != SUMS} >= {"cdx.json", "intoto.json"}
    assert sorted(Path(s).name for s in run.subjects) == sorted(names)
    check = subprocess.run(["sha256sum", "-c", "--strict", SUMS], cwd=run.asset(SUMS).parent,
                           capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.count(": OK") == len(names) - 1, check.stdout
    # the released archive verifies against its own provenance and SHA256SUMS, as a user would check it
    dest = tmp_path / "user"
    dest.mkdir()
    subprocess.run(["tar", "--zstd", "-xf", str(run.asset(archives[0])), "-C", str(dest)], check=True)
    (folder,) = dest.iterdir()
    prov = next(n for n in names if n.endswith(".intoto.json"))
    proc = assemble("verify", str(folder), "--static", "--provenance", str(run.asset(prov)),
                    "--sha256sums", str(run.asset(SUMS)))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(autouse=True)
def _no_read_only_from_the_host(monkeypatch):
    monkeypatch.delenv(READ_ONLY_ENV, raising=False)      # the workflow sets it, nothing else may


def test_the_planted_workflow_is_the_emitted_one_but_for_the_install_step():
    """The planted tests judge the emitted logic: only the install step differs."""
    emitted = yaml.safe_load(_emit(*RECIPES))
    planted = yaml.safe_load(_planted())
    assert {k: v for k, v in planted.items() if k != "jobs"} == {k: v for k, v in emitted.items() if k != "jobs"}
    for job_id, job in emitted["jobs"].items():
        steps = [s for s in job["steps"] if s.get("id") != workflow.INSTALL_STEP]
        assert [s for s in planted["jobs"][job_id]["steps"] if s.get("id") != workflow.INSTALL_STEP] == steps
        assert {k: v for k, v in planted["jobs"][job_id].items() if k != "steps"} == \
            {k: v for k, v in job.items() if k != "steps"}, job_id
