"""Rehearse a generated release workflow here: its jobs in order, each in a clean folder, every `run:`
step executed by bash (as GitHub runs it: `bash --noprofile --norc -eo pipefail`) with the job's and
the step's `env:`, and the real `assemble`. Only what GitHub itself provides is stood in for:

    actions/checkout                  a clone of this repository at HEAD
    actions/setup-python              the Python running the tests
    the pinned `pip install assemble` this checkout's assemble on PATH (the step's ref is checked)
    upload/download-artifact          a folder per artifact name
    attest-build-provenance           each subject file recorded (it must exist and be a file)
    gh                                a recorder on PATH that asserts its arguments, cwd and GH_REPO
    ${{ expressions }}                the values a tag push gives them, from a table: an expression the
                                      table does not know fails the rehearsal (nothing is guessed)
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.support.common import REPO

REPOSITORY = "example-org/runtimes"          # the repository the rehearsed workflow "lives in"
TAG = "v1.2.3"

_GH = r'''#!{python}
"""gh, as the release job calls it: records the call, and fails as gh would when it cannot know
the repository (no --repo, no GH_REPO, cwd outside a git checkout)."""
import json, os, subprocess, sys
argv = sys.argv[1:]
repo = argv[argv.index("--repo") + 1] if "--repo" in argv else None
problems = []
if argv[:2] != ["release", "create"]:
    problems.append(f"unexpected gh call {{argv}}")
if repo is None and not os.environ.get("GH_REPO"):
    inside = subprocess.run(["git", "rev-parse", "--git-dir"], capture_output=True).returncode == 0
    if not inside:
        problems.append("failed to run git: fatal: not a git repository (or any of the parent directories): .git")
if repo is not None and repo != {repository!r}:
    problems.append(f"--repo {{repo}} is not {repository!r}")
if os.environ.get("GH_REPO") not in (None, {repository!r}):
    problems.append(f"GH_REPO={{os.environ.get('GH_REPO')}} is not {repository!r}")
if not os.environ.get("GH_TOKEN"):
    problems.append("no GH_TOKEN: gh would ask to log in")
files = [a for a in argv[3:] if not a.startswith("-") and os.path.exists(a)]
with open({log!r}, "a") as out:
    out.write(json.dumps({{"argv": argv, "cwd": os.getcwd(), "GH_REPO": os.environ.get("GH_REPO"),
                          "files": sorted(os.path.basename(f) for f in files), "problems": problems}}) + "\n")
if problems:
    sys.exit("gh: " + "; ".join(problems))
'''

_ASSEMBLE = '''#!/bin/sh
PYTHONPATH={repo} exec {python} -m builder "$@"
'''


@dataclass
class Rehearsal:
    root: Path                                  # everything lives under it
    ref: str                                    # the assemble commit the workflow must pin
    cache: Path | None = None                   # ASSEMBLE_CACHE for the jobs (the suite's shared one)
    repository: Path = REPO                     # what actions/checkout clones (at its HEAD)
    assemble: str | None = None                 # the pinned install's stand-in (default: this checkout's)
    results: dict[str, str] = field(default_factory=dict)      # job id -> success | failure | skipped
    attested: list[str] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        self.artifacts = self.root / "artifacts"
        self.bin = self.root / "bin"
        self.gh_log = self.root / "gh.jsonl"
        for d in (self.artifacts, self.bin):
            d.mkdir(parents=True, exist_ok=True)
        gh = self.bin / "gh"
        gh.write_text(_GH.format(python=sys.executable, repository=REPOSITORY, log=str(self.gh_log)))
        gh.chmod(0o755)

    # --- expressions ------------------------------------------------------------------------
    def expression(self, text: str, needs: list[str]) -> str:
        results = [self.results.get(n, "skipped") for n in needs]
        known = {
            "github.ref_name": TAG, "github.repository": REPOSITORY, "github.server_url": "https://github.com",
            "github.token": "rehearsal-token", "github.ref": f"refs/tags/{TAG}",
            "secrets.ASSEMBLE_REMOTE_CACHE": "",
            "true": "true",
            "!cancelled() && startsWith(github.ref, 'refs/tags/')": "true",
            "startsWith(github.ref, 'refs/tags/')": "true",
            "!contains(needs.*.result, 'failure') && !contains(needs.*.result, 'cancelled')":
                str(not ({"failure", "cancelled"} & set(results))).lower(),
        }
        if text not in known:
            raise AssertionError(f"the rehearsal does not know the expression ${{{{ {text} }}}}: teach it")
        return known[text]

    def evaluate(self, value, needs: list[str]) -> str:
        value = str(value)
        out, rest = "", value
        while "${{" in rest:
            head, _, tail = rest.partition("${{")
            inner, sep, rest = tail.partition("}}")
            assert sep, f"unclosed expression in {value!r}"
            out += head + self.expression(inner.strip(), needs)
        return out + rest

    # --- steps ------------------------------------------------------------------------------
    def uses(self, step: dict, job: Path, env: dict) -> None:
        action = step["uses"].split("@")[0]
        sha = step["uses"].split("@")[1]
        assert len(sha) == 40 and all(c in "0123456789abcdef" for c in sha), step["uses"]
        with_ = {k: str(v) for k, v in step.get("with", {}).items()}
        if action == "actions/checkout":
            assert with_.get("persist-credentials") == "False", step
            subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(self.repository), str(job)], check=True)
        elif action == "actions/setup-python":
            pass                                  # the tests' Python is on PATH
        elif action == "actions/upload-artifact":
            src = job / with_["path"]
            files = [p for p in src.rglob("*") if p.is_file()] if src.is_dir() else []
            assert files or with_.get("if-no-files-found") != "error", f"upload {with_['name']}: no files"
            dest = self.artifacts / with_["name"]
            assert not dest.exists(), f"two uploads named {with_['name']}"
            shutil.copytree(src, dest, symlinks=True)
        elif action == "actions/download-artifact":
            if "name" in with_:
                assert (self.artifacts / with_["name"]).is_dir(), f"no artifact {with_['name']}"
                shutil.copytree(self.artifacts / with_["name"], job / with_["path"], symlinks=True)
            else:                                 # a pattern: each artifact in a folder of its name
                for a in sorted(self.artifacts.iterdir()):
                    if fnmatch.fnmatch(a.name, with_["pattern"]):
                        shutil.copytree(a, job / with_["path"] / a.name, symlinks=True)
        elif action == "actions/attest-build-provenance":
            subjects = sorted(job.glob(with_["subject-path"]))
            assert subjects and all(p.is_file() for p in subjects), f"nothing to attest at {with_['subject-path']}"
            self.attested += [p.name for p in subjects]
        else:
            raise AssertionError(f"the rehearsal has no stand-in for {action}")

    def run(self, step: dict, job: Path, env: dict, name: str, needs: list[str]) -> None:
        if step.get("id") == "install-assemble":
            # the pinned install stands in as this checkout's assemble: the pin must be the expected one
            assert env["ASSEMBLE_REF"] == self.ref, (env["ASSEMBLE_REF"], self.ref)
            shim = self.bin / "assemble"
            shim.write_text(self.assemble or _ASSEMBLE.format(repo=REPO, python=sys.executable))
            shim.chmod(0o755)
            return
        script = self.root / "step.sh"
        script.write_text(self.evaluate(step["run"], needs) + "\n")     # GitHub expands ${{ }} first
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=job, env=env,
                              capture_output=True, text=True, timeout=7200)
        self.logs[name] = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise StepFailed(f"{name}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")

    # --- jobs -------------------------------------------------------------------------------
    def job(self, job_id: str, spec: dict) -> str:
        needs = spec.get("needs", [])
        if any(self.results.get(n) != "success" for n in needs) and "if" not in spec:
            self.results[job_id] = "skipped"        # GitHub skips a job whose needs did not all succeed
            return "skipped"
        cond = str(spec.get("if", "true"))          # `if:` may leave out the ${{ }}
        if (self.evaluate(cond, needs) if "${{" in cond else self.expression(cond.strip(), needs)) != "true":
            self.results[job_id] = "skipped"
            return "skipped"
        folder = self.root / "jobs" / job_id
        base = {"PATH": f"{self.bin}:{os.environ['PATH']}", "HOME": os.environ.get("HOME", str(self.root)),
                "GITHUB_REPOSITORY": REPOSITORY, "GITHUB_WORKSPACE": str(folder), "CI": "true",
                **({"ASSEMBLE_CACHE": str(self.cache)} if self.cache else {})}
        base.update({k: self.evaluate(v, needs) for k, v in spec.get("env", {}).items()})
        folder.parent.mkdir(parents=True, exist_ok=True)
        if spec["steps"][0].get("uses", "").split("@")[0] != "actions/checkout":
            folder.mkdir()                          # a job with no checkout starts in an empty folder
        try:
            for i, step in enumerate(spec["steps"]):
                env = dict(base, **{k: self.evaluate(v, needs) for k, v in step.get("env", {}).items()})
                name = f"{job_id}/{step.get('name', step.get('uses', i))}"
                if "uses" in step:
                    self.uses(step, folder, env)
                else:
                    self.run(step, folder, env, name, needs)
        except StepFailed:
            self.results[job_id] = "failure"
            raise
        self.results[job_id] = "success"
        return "success"

    def workflow(self, doc: dict, only: list[str] | None = None, fail_fast: bool = True) -> dict[str, str]:
        """Every job, in the order of their needs (GitHub's), or only those named."""
        jobs = doc["jobs"]
        for job_id in order(jobs):
            if only is None or job_id in only:
                try:
                    self.job(job_id, jobs[job_id])
                except StepFailed:
                    if fail_fast:
                        raise
        return self.results

    def gh_calls(self) -> list[dict]:
        return [json.loads(ln) for ln in self.gh_log.read_text().splitlines()] if self.gh_log.exists() else []


class StepFailed(AssertionError):
    pass


def order(jobs: dict) -> list[str]:
    """The jobs in an order that runs each after its needs (a cycle or an unknown need fails)."""
    done: list[str] = []
    while len(done) < len(jobs):
        ready = [j for j, spec in jobs.items() if j not in done and all(n in done for n in spec.get("needs", []))]
        assert ready, f"jobs wait on each other or on no job: {sorted(set(jobs) - set(done))}"
        done += ready
    return done


def load(text: str) -> dict:
    return yaml.safe_load(text)


def head() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
