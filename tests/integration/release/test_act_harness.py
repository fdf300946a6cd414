"""The act harness (tests/support/act.py) proved on a small hand-written workflow, no llama.cpp: a real
workflow engine (nektos/act) runs each job here, with the real upload-artifact, download-artifact and
setup-python at the commits builder/release/workflow.py pins, and stand-ins only for gh and
attest-build-provenance.

Cost, measured on the shared 2-core machine (load average 6-7, 2026-12-06) with the action store
prepared: the five-job run (the fixture) 3.7 s, or 8.8 s when the pristine Python venv for
setup-python's tool cache is made first (once per test cache); the timeout test 8.6 s; the whole file
13-42 s (the spread is pytest's start on the loaded machine). A store not yet prepared is prepared
first from $ASSEMBLE_TEST_ACTION_SNAPSHOTS (scripts/prepare-actions.py: 4.5 min cold here, nearly all
of it the two npm rebuilds of dist/).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from builder.release.workflow import uses
from tests.support import act
from tests.support.common import REPO

# bytes no shell quoting can mangle, and a size over one zip block
PAYLOAD = "".join(f"line {i} \u00e9\t{i * i}\n" for i in range(5000))

WORKFLOW = f"""
name: harness
on:
  push:
    tags: ["v*"]
permissions: {{}}
jobs:
  upload:
    runs-on: ubuntu-22.04
    steps:
      - uses: {uses("checkout")}
        with:
          persist-credentials: false
      - name: what a tag push says
        run: |
          echo "@CONTEXT ref=${{{{ github.ref }}}} name=${{{{ github.ref_name }}}} repo=${{{{ github.repository }}}} server=${{{{ github.server_url }}}} sha=${{{{ github.sha }}}}"
          test -f payload.txt
      - name: files with a mode and a link
        run: |
          mkdir -p out/sub
          cp payload.txt out/data.txt
          printf '#!/bin/sh\\necho tool\\n' > out/tool && chmod 755 out/tool
          ln -s data.txt out/link
          echo nested > out/sub/nested.txt
      - uses: {uses("upload-artifact")}
        with:
          name: bundle
          path: out/
          if-no-files-found: error
  download:
    needs: upload
    runs-on: [self-hosted, linux, x64]
    steps:
      - uses: {uses("download-artifact")}
        with:
          name: bundle
          path: got
      - uses: {uses("setup-python")}
        with:
          python-version: "3.11"
      - name: the bytes, the link and the mode as upload-artifact keeps them
        run: |
          set -x
          ls -la got got/sub
          echo "@SHA data=$(sha256sum < got/data.txt | cut -d' ' -f1) link=$(sha256sum < got/link | cut -d' ' -f1)"
          test -f got/link && ! test -L got/link
          echo "@MODE tool=$(stat -c %a got/tool)"
          test "$(cat got/sub/nested.txt)" = nested
          echo "@PYTHON $(command -v python) $(python -c 'import platform; print(platform.python_version())')"
          echo "@PIP $(head -1 "$(command -v pip)") $(pip --version | cut -d' ' -f1)"
          case "$(command -v python)" in "$RUNNER_TOOL_CACHE"/Python/3.11.*/x64/bin/python) ;; *) exit 1 ;; esac
  fails:
    runs-on: ubuntu-22.04
    defaults:
      run:
        shell: bash -euo pipefail {{0}}
    steps:
      - run: echo fine | cat
      - name: a failing pipe fails the step
        run: |
          false | cat
          echo "PIPE-NOT-CAUGHT"
  after-fails:
    needs: fails
    runs-on: ubuntu-22.04
    steps:
      - run: echo "AFTER-FAILS-RAN"
  report:
    needs: [download, fails, after-fails]
    if: ${{{{ always() }}}}
    runs-on: ubuntu-22.04
    env:
      RESULTS: ${{{{ join(needs.*.result, ',') }}}}
      ALL_BUILT: ${{{{ !contains(needs.*.result, 'failure') && !contains(needs.*.result, 'cancelled') }}}}
    steps:
      - run: |
          echo "@RESULTS $RESULTS all_built=$ALL_BUILT"
          mkdir release && echo one > release/a.txt && echo two > release/b.txt
      - uses: {uses("attest-build-provenance")}
        with:
          subject-path: release/*
      - name: gh fails as gh does without a token
        run: |
          if GH_TOKEN= gh release view v1.2.3 --repo "$GITHUB_REPOSITORY"; then exit 1; fi
      - name: publish
        env:
          GH_TOKEN: ${{{{ github.token }}}}
          GH_REPO: ${{{{ github.repository }}}}
          TAG: ${{{{ github.ref_name }}}}
        run: |
          echo "@VIEW $(gh release view v0.9.0 --json isDraft --jq .isDraft)"
          if gh release view "$TAG" --json isDraft; then exit 1; fi
          draft=()
          if [ "$ALL_BUILT" != "true" ]; then draft=(--draft); fi
          gh release create "$TAG" release/* --repo "$GH_REPO" --title "$TAG" "${{draft[@]}}" --notes "harness"
"""


def _repo(root: Path, workflow: str) -> Path:
    """A git repository holding the workflow and a payload, tagged v1.2.3 (annotated) at HEAD."""
    repo = root / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".github" / "workflows" / "harness.yml").write_text(workflow)
    (repo / "payload.txt").write_text(PAYLOAD)
    ident = ["-c", "user.name=harness", "-c", "user.email=harness@example.invalid"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], [*ident, "commit", "-qm", "harness"],
                 [*ident, "tag", "-a", "v1.2.3", "-m", "v1.2.3"],
                 ["remote", "add", "origin", f"https://github.com/{act.REPOSITORY}.git"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, timeout=60)
    return repo


@pytest.fixture(scope="module")
def harness_run(tmp_path_factory) -> act.ActRun:
    """One run of the workflow above, a release v0.9.0 planted in the gh stand-in's state (3.7 s warm,
    8.8 s with the first tool-cache venv, on the 2-core machine)."""
    root = tmp_path_factory.mktemp("act")
    repo = _repo(root, WORKFLOW)
    return act.run(repo / ".github" / "workflows" / "harness.yml", repo, root=root / "run", timeout=300,
                   releases={"v0.9.0": {"draft": False, "title": "v0.9.0", "notes": "", "assets": []}})


def _lines(run: act.ActRun, job: str, word: str) -> list[str]:
    return [ln.strip() for ln in run.job_log(job).splitlines() if ln.strip().startswith(word)]


def test_job_results_as_act_reports_them(harness_run):
    r = harness_run
    assert r.jobs == {"upload": "success", "download": "success", "fails": "failure", "after-fails": "skipped",
                      "report": "success"}, r.log[-6000:]
    assert r.exit_code == 1                                       # act: a job failed
    assert not _lines(r, "after-fails", "AFTER-FAILS-RAN")
    (line,) = _lines(r, "report", "@RESULTS")                   # act's order of needs.*.result varies
    words = line.split()
    assert sorted(words[1].split(",")) == ["failure", "skipped", "success"] and words[2] == "all_built=false"


def test_the_tag_push_context(harness_run):
    sha = subprocess.run(["git", "-C", str(harness_run.root.parent / "repo"), "rev-parse", "v1.2.3^{commit}"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert _lines(harness_run, "upload", "@CONTEXT") == [
        f"@CONTEXT ref=refs/tags/v1.2.3 name=v1.2.3 repo={act.REPOSITORY} server=https://github.com sha={sha}"]


def test_artifacts_cross_jobs_as_upload_artifact_keeps_them(harness_run):
    want = hashlib.sha256(PAYLOAD.encode()).hexdigest()
    # the link arrives as a regular file holding its target's bytes; the mode is not kept (zip, no modes)
    assert _lines(harness_run, "download", "@SHA") == [f"@SHA data={want} link={want}"]
    assert _lines(harness_run, "download", "@MODE") == ["@MODE tool=644"]
    assert sorted(p.name for p in harness_run.artifacts.glob("*/*")) == ["bundle"]
    # act's artifact server refuses upload-artifact v7's mime_type and unpadded sig: the relay's two fixes
    relayed = [json.loads(x) for x in (harness_run.root / "artifact-proxy.jsonl").read_text().splitlines()]
    assert [c for r in relayed for c in r["changed"]] == ["mime_type 'application/zip' dropped", "sig padded",
                                                          "sig padded"]
    assert all(r["status"] < 300 for r in relayed)


def test_setup_python_gives_the_host_python_offline(harness_run):
    (line,) = _lines(harness_run, "download", "@PYTHON")
    assert line.split()[2].startswith("3.11."), line
    (pip,) = _lines(harness_run, "download", "@PIP")          # the venv's scripts point at its new place
    assert pip.startswith(f"@PIP #!{harness_run.root}/cache/tool_cache/Python/3.11.") and pip.endswith(" pip"), pip


def test_a_failing_pipe_fails_under_the_jobs_default_shell(harness_run):
    assert not _lines(harness_run, "fails", "PIPE-NOT-CAUGHT")
    assert "a failing pipe fails the step" in harness_run.job_log("fails")


def test_gh_and_attest_stand_ins_record_their_calls(harness_run):
    r = harness_run
    (attested,) = r.attested
    assert attested["subject-path"] == ["release/*"] and attested["problems"] == []
    assert r.subjects == ["a.txt", "b.txt"]
    no_token, view, not_yet, create = r.gh_calls
    assert no_token["exit"] == 4 and "gh auth login" in no_token["error"]
    assert view["argv"][:3] == ["release", "view", "v0.9.0"] and view["exit"] == 0     # the planted release
    assert _lines(r, "report", "@VIEW") == ["@VIEW false"]
    assert not_yet["exit"] == 1 and not_yet["error"] == "release not found"
    assert create["argv"][:3] == ["release", "create", "v1.2.3"] and create["GH_REPO"] == act.REPOSITORY
    assert create["files"] == ["a.txt", "b.txt"] and create["exit"] == 0
    release = r.releases[act.REPOSITORY]["v1.2.3"]
    assert release["draft"] is True and release["assets"] == ["a.txt", "b.txt"]   # a job failed: a draft
    assert r.asset("b.txt").read_text() == "two\n"


def test_a_repository_not_at_the_ref_is_refused(tmp_path):
    repo = _repo(tmp_path, "on: push\njobs: {}\n")
    (repo / "payload.txt").write_text("changed")
    with pytest.raises(act.ActError, match="uncommitted changes"):
        act.run(repo / ".github" / "workflows" / "harness.yml", repo, root=tmp_path / "run")


def test_a_run_past_its_timeout_is_ended_with_everything_it_started(tmp_path):
    """A step that leaves a daemon behind (its own session) and then hangs: act, the step and the
    daemon are all ended at the timeout (run() raises if any outlives it)."""
    hang = """
on:
  push:
    tags: ["v*"]
jobs:
  hang:
    runs-on: ubuntu-22.04
    steps:
      - run: |
          setsid sleep 600 < /dev/null > /dev/null 2>&1 &
          sleep 600
"""
    repo = _repo(tmp_path, hang)
    started = time.monotonic()
    r = act.run(repo / ".github" / "workflows" / "harness.yml", repo, root=tmp_path / "run", timeout=8)
    assert r.exit_code == 124 and "ran past 8 s" in r.log
    assert time.monotonic() - started < 40


def test_a_store_without_the_actions_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(act, "TEST_CACHE", tmp_path)
    monkeypatch.delenv(act.SNAPSHOTS_ENV, raising=False)
    with pytest.raises(act.ActError) as e:
        act.actions_store()
    (line,) = str(e.value).splitlines()
    assert act.SNAPSHOTS_ENV in line and "prepare-actions.py" in line and "-- fix:" in line


# --- scripts/prepare-actions.py on a small snapshot of its own (no npm) ----------------------------

def _prepare_module():
    spec = importlib.util.spec_from_file_location("prepare_actions", REPO / "scripts" / "prepare-actions.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _snapshot(root: Path) -> tuple[Path, str]:
    """snapshots/o+action/repo: a bare repository with one commit (a file, an executable, a link), tag v1."""
    work = root / "work"
    (work / "dist").mkdir(parents=True)
    (work / "action.yml").write_text("name: a\nruns:\n  using: node24\n  main: dist/index.js\n")
    (work / "dist" / "index.js").write_text("console.log('hi')\n")
    (work / "run.sh").write_text("#!/bin/sh\n")
    (work / "run.sh").chmod(0o755)
    (work / "link").symlink_to("action.yml")
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], [*ident, "commit", "-qm", "a"], [*ident, "tag", "-a", "v1", "-m", "v1"]):
        subprocess.run(["git", "-C", str(work), *args], check=True, capture_output=True, timeout=60)
    bare = root / "snapshots" / "o+action" / "repo"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True, capture_output=True, timeout=60)
    sha = subprocess.run(["git", "-C", str(work), "rev-parse", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    return root / "snapshots", sha


def test_prepare_actions_exports_the_pinned_commit_checked_and_once(tmp_path):
    prep = _prepare_module()
    snapshots, sha = _snapshot(tmp_path)
    store = tmp_path / "store"
    store.mkdir()
    action = prep.Action("o/action", sha, "v1")
    folder = store / f"o+action@{sha}"
    (store / f"o+action@{sha}.part").mkdir()                 # a run killed half-way: replaced
    assert prep.prepare(action, snapshots, store) == "exported"
    marker = json.loads((folder / ".complete").read_text())
    assert marker["sha"] == sha and marker["tag_checked"] is True and marker["rebuilt"] == []
    assert (folder / "dist" / "index.js").read_text() == "console.log('hi')\n"
    assert os.access(folder / "run.sh", os.X_OK) and os.readlink(folder / "link") == "action.yml"
    assert not (store / f"o+action@{sha}.part").exists()
    assert prep.prepare(action, snapshots, store) == "kept"
    # a tag that names another commit, and a folder the script did not make, are refused
    with pytest.raises(prep.Refused, match="tag v1 is"):
        prep.prepare(prep.Action("o/action", "0" * 40, "v1"), snapshots, store)
    (folder / ".complete").unlink()
    with pytest.raises(prep.Refused, match=r"without \.complete"):
        prep.prepare(action, snapshots, store)


def test_gh_stand_in_answers_from_its_state_as_gh_would(tmp_path):
    """The stand-in alone (no act): a planted draft takes an upload only with --clobber, an edit, a view
    with --jq; a published release and a missing one; no token, and no repository outside a checkout."""
    (tmp_path / "bin").mkdir()
    state = act.gh_stand_in(tmp_path / "bin", tmp_path / "gh",
                            {"v1": {"draft": True, "assets": {"a.tar.zst": "old"}}})
    (tmp_path / "a.tar.zst").write_text("new")
    gh = str(tmp_path / "bin" / "gh")
    env = {"PATH": os.environ["PATH"], "GH_TOKEN": "t", "GH_REPO": act.REPOSITORY}

    def call(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([gh, *args], cwd=tmp_path, env={**env, **extra}, capture_output=True, text=True,
                              timeout=60)
    assert (tmp_path / "gh" / "assets" / act.REPOSITORY.replace("/", "+") / "v1" / "a.tar.zst").read_text() == "old"
    assert call("release", "view", "v1", "--json", "isDraft", "--jq", ".isDraft").stdout == "true\n"
    assert call("release", "view", "v2").stderr.strip() == "release not found"
    clash = call("release", "upload", "v1", "a.tar.zst")
    assert clash.returncode == 1 and "already exists" in clash.stderr
    assert call("release", "upload", "v1", "a.tar.zst", "--clobber").returncode == 0
    assert call("release", "edit", "v1", "--draft=false", "--notes", "n").returncode == 0
    release = json.loads(state.read_text())[act.REPOSITORY]["v1"]
    assert release["draft"] is False and release["notes"] == "n" and release["assets"]["a.tar.zst"].startswith("sha256:")
    again = call("release", "create", "v1", "a.tar.zst")
    assert again.returncode == 1 and "already exists" in again.stderr
    assert call("release", "view", "v1", GH_TOKEN="").returncode == 4
    assert "not a git repository" in call("release", "view", "v1", GH_REPO="").stderr
    calls = [json.loads(x) for x in (tmp_path / "gh" / "calls.jsonl").read_text().splitlines()]
    assert [c["exit"] for c in calls] == [0, 1, 1, 0, 0, 1, 4, 1]
