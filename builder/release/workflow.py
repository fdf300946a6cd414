"""`assemble matrix --emit github-actions`: the whole release workflow, generated from the matrix.

    units     the --only-unit jobs of split recipes (their folders uploaded as artifacts)
    runtimes  one job per matrix entry: check the runner with `assemble doctor` (the rules build
              enforces), build (merging unit folders downloaded from the units stage), package
              (tar.zst + SBOM + provenance + SHA256SUMS), upload
    release   on a tag: every job's files in one folder, one SHA256SUMS checked, a GitHub release

Which runner each job gets comes from a runner map (`[tool.assemble.runners]` in pyproject.toml,
or a TOML file given with --runners): keys are job names (exact) or the kinds `cuda`, `rocm`,
`container`, `vulkan`, `default`; a job takes its own name first, then the first kind it needs in
that order. The map is checked against the matrix: a key that names no job and no kind is refused.
Every job's matrix entry carries its `needs` in words (the same rules as `build`), so the log says
what its runner must have. The YAML is written here (no YAML library is a dependency): block style,
every string quoted the JSON way, which YAML reads as the same string.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder import interpreter
from builder.config import remotecache
from builder.config.glibc import RELEASE_FLOOR
from builder.errors import AssembleError
from builder.release import lock
from builder.release.matrix import Entry, in_repository
from builder.release.formats import DEFAULT_FORMAT, SUMS

KINDS = ("cuda", "rocm", "container", "vulkan", "default")
# A runner label: what GitHub's hosted images and self-hosted labels use (ubuntu-22.04, gpu_amd, x64).
# The label is written into the YAML (runs-on, and the glibc-floor comment), so nothing else may pass.
LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
LABEL_FORM = "letters, digits, '.', '_' and '-', starting with a letter or digit"


@dataclass(frozen=True)
class Runner:
    """Where a kind of job runs by default, and what that means for the runtimes built there."""
    labels: str | tuple[str, ...]
    glibc: str | None           # the C library its runtimes need at least; None: not known here
    codename: str | None = None  # the Ubuntu release of a GitHub-hosted image (its apt sources)
    note: str = ""              # what sets the floor when it is not the runner's own


# The runner choice, in one table. Linux builds run on the oldest GitHub-hosted image that builds the
# recipe (as upstream builds its x64 releases): a runtime needs at least the glibc it was linked
# against, and ubuntu-latest (24.04, glibc 2.39) would shut out 22.04, Debian 12 and RHEL 9.
RUNNERS: dict[str, Runner] = {
    "default": Runner("ubuntu-22.04", RELEASE_FLOOR, "jammy"),
    "vulkan": Runner("ubuntu-22.04", RELEASE_FLOOR, "jammy"),   # + LunarG's SDK for jammy (22.04's headers are too old)
    # docker is there; the toolkit, and so the glibc the runtime is linked against, is the image's
    "container": Runner("ubuntu-22.04", None, "jammy", note="the build image's (containers/<name>.Containerfile)"),
    # GPU toolkits are not on GitHub's hosted runners: self-hosted labels by convention
    "cuda": Runner(("self-hosted", "linux", "x64", "cuda"), None, note="the self-hosted runner's"),
    "rocm": Runner(("self-hosted", "linux", "x64", "rocm"), None, note="the self-hosted runner's"),
}
DEFAULT_RUNNERS = {k: r.labels for k, r in RUNNERS.items()}
CACHE_SECRET = "ASSEMBLE_REMOTE_CACHE"       # the shared compile cache's URL (it may hold a password): a secret
# the runner's Python: the oldest assemble supports (pyproject.toml, via builder.interpreter)
PYTHON = ".".join(str(p) for p in interpreter.floor()[:2])


@dataclass(frozen=True)
class Action:
    repo: str
    sha: str                    # the full commit: a tag can be moved, a commit cannot
    tag: str                    # what the commit was tagged, for people (written as a comment)


# Every action the workflow uses, pinned by commit: the node24 majors, each sha the commit its tag points
# to in the action's own repository (tests/integration/release/test_actions_pinned.py checks each).
ACTIONS = {
    "checkout": Action("actions/checkout", "3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1"),
    "setup-python": Action("actions/setup-python", "5fda3b95a4ea91299a34e894583c3862153e4b97", "v7.0.0"),
    "upload-artifact": Action("actions/upload-artifact", "bbbca2ddaa5d8feaa63e36b76fdaad77386f024f", "v7.0.0"),
    "download-artifact": Action("actions/download-artifact", "3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c", "v8.0.1"),
    "attest-build-provenance": Action("actions/attest-build-provenance", "a2bbfa25375fe432b6a289bc6b6cd05ecd0c4c32",
                                      "v4.1.0"),
}


class Pinned(str):
    """A `uses:` value; the YAML writer puts its tag after it as a comment."""
    tag: str


def uses(key: str) -> Pinned:
    a = ACTIONS[key]
    out = Pinned(f"{a.repo}@{a.sha}")
    out.tag = a.tag
    return out


class Noted(str):
    """A scalar the YAML writer follows with a comment on its own line (a permission and why it is held)."""
    note: str


def noted(value: str, note: str) -> Noted:
    out = Noted(value)
    out.note = note
    return out


class Commented(dict[str, Any]):
    """A mapping the YAML writer opens with a comment line."""
    def __init__(self, comment: str, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.comment = comment


@dataclass(frozen=True)
class RunnerMap:
    labels: dict[str, str | tuple[str, ...]]
    source: str                               # where it was read, for messages

    def key(self, e: Entry) -> str:
        return next(k for k in (e.name, *_kinds(e), "default") if k in self.labels)

    def runs_on(self, e: Entry) -> str | list[str]:
        return self.label(self.key(e))

    def runner(self, e: Entry) -> Runner | None:
        """The table's runner when the job got the table's labels for its kind (so its glibc and apt
        sources are known), else None: a runner the map chose, which the workflow knows nothing of."""
        key = self.key(e)
        return RUNNERS[key] if key in RUNNERS and self.labels[key] == RUNNERS[key].labels else None

    def label(self, key: str) -> str | list[str]:
        v = self.labels[key]
        return list(v) if isinstance(v, tuple) else v


def _kinds(e: Entry) -> list[str]:
    n = e.needs
    return [k for k, has in (("rocm", n.rocm), ("cuda", n.cuda_toolkit), ("container", n.container_engine),
                             ("vulkan", n.vulkan_sdk)) if has]


def load_runners(path: Path | None, entries: list[Entry]) -> RunnerMap:
    """The runner map: --runners FILE, else ./pyproject.toml's [tool.assemble.runners], else defaults."""
    raw, source = {}, "the defaults"
    if path is None and Path("pyproject.toml").is_file():
        candidate = Path("pyproject.toml")
        data = _toml(candidate)
        if isinstance(data.get("tool", {}).get("assemble", {}).get("runners"), dict):
            raw, source = data["tool"]["assemble"]["runners"], f"{candidate} [tool.assemble.runners]"
    elif path is not None:
        data = _toml(path)
        table = data.get("tool", {}).get("assemble", {}).get("runners") if "tool" in data else data.get("runners", data)
        if not isinstance(table, dict):
            raise AssembleError("no runner map in it", where=str(path),
                                fix="write a [runners] table (or [tool.assemble.runners] in pyproject.toml), "
                                    'e.g. cuda = ["self-hosted", "cuda"]')
        raw, source = table, str(path)
    names = {e.name for e in entries}
    labels: dict[str, str | tuple[str, ...]] = dict(DEFAULT_RUNNERS)
    for key, value in raw.items():
        if key not in KINDS and key not in names:
            raise AssembleError(f"runner map key {key!r} is neither a job of this matrix nor a kind", where=source,
                                fix=f"use a job name ({', '.join(sorted(names))}) or one of {', '.join(KINDS)}")
        if isinstance(value, str) and _label(value):
            labels[key] = value
        elif isinstance(value, list) and value and all(isinstance(v, str) and _label(v) for v in value):
            labels[key] = tuple(value)
        else:
            raise AssembleError(f"runner map {key!r}: {value!r} is not a runner label or a list of labels "
                                f"(a label is {LABEL_FORM})", where=source,
                                fix=f'write {key} = "ubuntu-24.04" or {key} = ["self-hosted", "gpu"]')
    return RunnerMap(labels, source)


def _label(v: str) -> bool:
    return LABEL_RE.fullmatch(v) is not None


def _toml(path: Path) -> dict[str, Any]:
    if path.exists() and not path.is_file():      # a FIFO or a device would block the read, a folder fails it
        raise AssembleError("the runner map is not a regular file", where=str(path),
                            fix="pass a TOML file with a [runners] table")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise AssembleError(f"cannot read the runner map ({exc})", where=str(path),
                            fix="fix the TOML, or pass --runners FILE") from None


# --- the workflow -----------------------------------------------------------------------------
#
# One job per matrix entry, so each runtime waits only for the unit jobs it merges (a CUDA unit that
# fails does not hold back the CPU runtime). Every value that comes from a recipe reaches a script
# through `env:` and a quoted variable, never through `${{ }}` inside `run:`.

INSTALL_STEP = "install-assemble"
TIMEOUT_BUILD, TIMEOUT_RELEASE = 360, 30  # minutes (360 is a GitHub-hosted job's limit)
# Every run: step of every job: -u and pipefail as well as -e (GitHub's default `bash -e {0}` lets a
# failed `curl | tar` or an unset variable pass), and no profile or rc file.
SHELL = "bash --noprofile --norc -euo pipefail {0}"
LOCK_ENV = "ASSEMBLE_LOCK"                # the lock's text, carried by the workflow (builder.release.lock)
# Only a build of the default branch writes the shared compile cache; any other ref (a tag, a branch
# run by hand) reads it: whoever writes the cache puts objects into what a tag ships.
CACHE_READ_ONLY = "${{ github.ref != format('refs/heads/{0}', github.event.repository.default_branch) }}"
CACHE_ENVIRONMENTS = ("compile-cache-write", "compile-cache-read")   # the default branch's, every other ref's
CACHE_ENVIRONMENT = ("${{ github.ref == format('refs/heads/{0}', github.event.repository.default_branch) "
                     f"&& '{CACHE_ENVIRONMENTS[0]}' || '{CACHE_ENVIRONMENTS[1]}' }}}}")


@dataclass(frozen=True)
class VulkanSdk:
    """LunarG's SDK for Linux as one tarball, checked by its sha256 before it is unpacked (no apt key is
    trusted): headers, glslc and SPIRV-Headers, newer than builder.toolchain.rules.VULKAN_TESTED. The digest
    was published beside the SDK and appears the same in two unrelated public build scripts."""
    version: str
    sha256: str

    @property
    def url(self) -> str:
        return f"https://sdk.lunarg.com/sdk/download/{self.version}/linux/vulkansdk-linux-x86_64-{self.version}.tar.xz"


VULKAN_SDK = VulkanSdk("1.4.328.1", "241e75b56c91c0d210ed07a7c638ec05a3e5b0e4c66ba9f0ba0f102d823ad6bf")


@dataclass(frozen=True)
class Pinning:
    """Which assemble every job installs. repo None: the repository the workflow runs in is assemble's
    own, and each job installs the checkout it runs on (the tag's: its recipes and patches are the ones
    built, and a private repository needs no URL). repo set: that repository at `ref`, a 40-hex commit."""
    ref: str | None             # the commit the workflow was generated from (repo None), or the one installed
    repo: str | None = None


def job_id(e: Entry) -> str:
    return ("unit-" if e.unit is not None else "runtime-") + e.name.replace(".", "_")


def _arg_env(flag: str, i: int) -> str:
    return "BUILD_" + flag.strip("-").upper().replace("-", "_") + (f"_{i}" if i else "")


def _build_line(e: Entry, out: str) -> tuple[str, dict[str, Any]]:
    """`assemble build` with each argument in a variable of its own (the values live in env)."""
    env, words = {}, []
    seen: dict[str, int] = {}
    for flag, value in e.build_args:
        i = seen[flag] = seen.get(flag, -1) + 1
        name = _arg_env(flag, i)
        env[name] = value
        words.append(f'{flag} "${name}"')
    return f'assemble build {" ".join(words)} --out "{out}"', env


def _checkout() -> dict[str, Any]:
    return {"uses": uses("checkout"), "with": {"persist-credentials": False}}


def _install(pin: Pinning) -> list[dict[str, Any]]:
    """Python, then every package from the lock by sha256 (wheels only, nothing resolved), then assemble
    itself with no dependency and no build isolation, so nothing unpinned is fetched on the way."""
    lines = [f'printf \'%s\\n\' "${LOCK_ENV}" > "$RUNNER_TEMP/assemble.lock"',
             'python -m pip install --require-hashes --only-binary=:all: --no-deps -r "$RUNNER_TEMP/assemble.lock"']
    env: dict[str, Any] = {}
    if pin.repo is None:
        lines.append("python -m pip install --no-deps --no-build-isolation --no-index .")
    else:
        env = {"ASSEMBLE_REPO": pin.repo, "ASSEMBLE_REF": pin.ref}
        lines.append('python -m pip install --no-deps --no-build-isolation "assemble @ git+${ASSEMBLE_REPO}@${ASSEMBLE_REF}"')
    lines += ["python -m pip check", "assemble --version"]
    return [
        {"uses": uses("setup-python"), "with": {"python-version": PYTHON}},
        {"name": "Install assemble and its locked dependencies", "id": INSTALL_STEP,
         **({"env": env} if env else {}), "run": "\n".join(lines)},
    ]


def _toolchain(e: Entry, runner: Runner | None) -> list[dict[str, Any]]:
    """What the job's recipe needs on a GitHub-hosted image; on any other runner, `doctor` alone judges."""
    if runner is None or runner.codename is None or not e.needs.vulkan_sdk or e.needs.container_engine:
        return []
    return [{"name": f"Vulkan SDK {VULKAN_SDK.version} (LunarG's tarball, checked by sha256)",
             "env": {"VULKAN_SDK_URL": VULKAN_SDK.url, "VULKAN_SDK_SHA256": VULKAN_SDK.sha256},
             "run": "\n".join([
                 'sdk="$RUNNER_TEMP/vulkan-sdk"',
                 'curl -fsSL --retry 3 -o "$sdk.tar.xz" "$VULKAN_SDK_URL"',
                 'echo "$VULKAN_SDK_SHA256  $sdk.tar.xz" | sha256sum -c --strict -',
                 'mkdir -p "$sdk"',
                 'tar -xJf "$sdk.tar.xz" -C "$sdk" --strip-components=1',
                 'echo "VULKAN_SDK=$sdk/x86_64" >> "$GITHUB_ENV"',
                 'echo "$sdk/x86_64/bin" >> "$GITHUB_PATH"',
                 # the loader the runtime's verify loads: the image's own archive, signed by its own key
                 "sudo apt-get update -y",
                 "sudo apt-get install -y --no-install-recommends libvulkan1",
             ])}]


# Why a job runs on a self-hosted runner (zizmor's auditor persona asks; the test reads this comment).
SELF_HOSTED_WHY = ("self-hosted: GPU toolkits are not on GitHub's hosted runners; use runners that serve "
                   "this repository alone, never a public fork's pull requests")


def _floor(e: Entry, runner: Runner | None, runs_on: str | list[str]) -> str:
    labels = runs_on if isinstance(runs_on, str) else ", ".join(runs_on)
    why = f"; {SELF_HOSTED_WHY}" if "self-hosted" in (runs_on if isinstance(runs_on, list) else [runs_on]) else ""
    if runner is not None and runner.glibc:
        return f"glibc floor {runner.glibc}: its runtimes are built on {labels} (glibc {runner.glibc}){why}"
    return f"glibc floor: {runner.note if runner else 'the runner map chose ' + labels + ': its'} glibc{why}"


def _units_built(e: Entry) -> dict[str, Any]:
    """A split recipe's merge job runs even when a unit job did not succeed, and fails naming it: a job
    GitHub skips has no result the release can tell from "not needed", so a skip would pass for built."""
    return {"name": "Every unit this runtime merges was built",
            "env": {"UNITS": "${{ toJSON(needs) }}"},
            "run": "\n".join([
                ('failed=$(python3 -c \'import json, os; print(" ".join(sorted(k + "=" + v["result"] '
                 'for k, v in json.loads(os.environ["UNITS"]).items() if v["result"] != "success")))\')'),
                'if [ -n "$failed" ]; then echo "::error::units not built: $failed"; exit 1; fi',
             ])}


def _build_job(e: Entry, runners: RunnerMap, pin: Pinning) -> dict[str, Any]:
    unit = e.unit is not None
    out = "unit-out" if unit else "runtime"
    line, args_env = _build_line(e, out)
    runner = runners.runner(e)
    runs_on = runners.runs_on(e)
    steps = [*([_units_built(e)] if e.after else []), _checkout(), *_install(pin), *_toolchain(e, runner),
             {"name": "Check this runner (the rules build enforces)",
              "run": 'echo "needs: $NEEDS"\nassemble doctor --recipe "$BUILD_RECIPE"'}]
    # each unit folder lands in ./<artifact>/, the folder the job's --unit-from names
    steps += [{"name": f"Unit folder {a}", "uses": uses("download-artifact"), "with": {"name": a, "path": a}}
              for a in e.unit_folders]
    # The compile cache is the remote one (config.remotecache) when the secret is set, and none when it is
    # not; only the default branch writes it (CACHE_READ_ONLY), read with the locked ccache. GitHub's
    # actions/cache is not used: any workflow of the default branch writes it and a tag build restores it.
    steps.append({"name": "Build",
                  "env": {remotecache.ENV: "${{ secrets.%s }}" % CACHE_SECRET,  # noqa: UP031 -- no brace escaping
                          remotecache.READ_ONLY_ENV: CACHE_READ_ONLY},
                  "run": line})
    if unit:
        steps.append({"uses": uses("upload-artifact"),
                      "with": {"name": e.artifact, "path": f"{out}/", "if-no-files-found": "error"}})
    else:
        steps += [{"name": "Package", "run": f'assemble package "{out}" --format {DEFAULT_FORMAT} --out-dir dist'},
                  {"uses": uses("upload-artifact"),
                   "with": {"name": f"runtime-{e.name}", "path": "dist/", "if-no-files-found": "error"}}]
    return Commented(_floor(e, runner, runs_on), {
        "name": f"{'unit' if unit else 'runtime'} {e.name}",
        **({"needs": [f"unit-{n.replace('.', '_')}" for n in e.after],
            "if": "${{ !cancelled() }}"} if e.after else {}),
        "runs-on": runs_on,
        "timeout-minutes": TIMEOUT_BUILD,
        "permissions": {"contents": noted("read", "read the repository, nothing else")},
        # The shared cache's URL is an environment's secret: the default branch's environment holds a
        # login that may write, every other ref's one that may only read (docs/guide/release.md, §4).
        "environment": CACHE_ENVIRONMENT,
        "env": {"BUILD_NAME": e.name, "NEEDS": e.needs.summary, **args_env},
        "steps": steps,
    })


# The release job's script. A release is final only when every runtime job's result is `success`: a
# skipped job was not built, so anything else makes a draft whose notes name what is missing. A release
# that exists already (a re-run) takes the files only while it is a draft; a published one is never
# changed (its assets are what users checked), and the job says so and fails.
_PUBLISH = r"""missing=$(python3 -c 'import json, os; print(" ".join(sorted(k.removeprefix("runtime-") + " (" + v["result"] + ")" for k, v in json.loads(os.environ["RUNTIMES"]).items() if v["result"] != "success")))')
notes="Runtimes built by assemble; verify each file with: gh attestation verify FILE --repo $GH_REPO, then sha256sum -c SHA256SUMS"
draft=()
if [ -n "$missing" ]; then
  draft=(--draft)
  notes="INCOMPLETE, a draft: not built: $missing. $notes"
  echo "::warning::not built: $missing: the release is a draft"
fi
if state=$(gh release view "$TAG" --repo "$GH_REPO" --json isDraft --jq .isDraft 2>/dev/null); then
  if [ "$state" != "true" ]; then
    echo "::error::release $TAG is published: its assets are never replaced; nothing was uploaded"
    exit 1
  fi
  gh release upload "$TAG" release/* --repo "$GH_REPO" --clobber
  gh release edit "$TAG" --repo "$GH_REPO" --notes "$notes"
  echo "release $TAG exists as a draft: its files were replaced; it stays a draft for a person to publish"
else
  gh release create "$TAG" release/* --repo "$GH_REPO" --title "$TAG" "${draft[@]}" --notes "$notes"
fi"""


def _release_job(runtime_jobs: list[str], runners: RunnerMap) -> dict[str, Any]:
    # Every check exits itself, and a file no SHA256SUMS lists is refused (else a file changed or added
    # after its job summed it would be attested and published).
    # download-artifact puts each artifact in jobs/<name>/, but a lone match straight into jobs/: each
    # folder holding a SHA256SUMS is one job's files, wherever it is; a file outside them all is refused.
    merge = "\n".join([
        "mkdir release",
        ": > all-sums",
        "found=0",
        "while IFS= read -r -d '' sums; do",
        '  d=$(dirname "$sums"); found=$((found + 1))',
        f'  (cd "$d" && sha256sum -c --strict {SUMS}) || {{ echo "::error::$d fails its {SUMS}"; exit 1; }}',
        '  cat "$sums" >> all-sums',
        f'  find "$d" -maxdepth 1 -type f ! -name {SUMS} -exec mv -n -t release {{}} +',
        f"done < <(find jobs -name {SUMS} -print0 | sort -z)",
        'if [ "$found" -eq 0 ]; then echo "::error::no runtime was built: nothing to release"; exit 1; fi',
        f'left=$(find jobs -type f ! -name {SUMS})',
        'if [ -n "$left" ]; then echo "::error::files outside any job\'s folder, or named twice: $left"; exit 1; fi',
        f"sort -k2 all-sums > release/{SUMS}",
        f"(cd release && sha256sum -c --strict {SUMS})",
        # a line is "<64 hex><space><space or *><name>": the name starts at column 67
        (f"unlisted=$(cd release && comm -23 <(find . -type f ! -name {SUMS} -printf '%P\\n' | sort) "
         f"<(cut -c67- {SUMS} | sort))"),
        f'if [ -n "$unlisted" ]; then echo "::error::files no {SUMS} lists: $unlisted"; exit 1; fi',
    ])
    return {
        "name": "release",
        "needs": runtime_jobs,
        # the runtimes that were built are released (as a draft) even when another failed
        "if": "${{ !cancelled() && startsWith(github.ref, 'refs/tags/') }}",
        "runs-on": runners.label("default"),
        "timeout-minutes": TIMEOUT_RELEASE,
        "permissions": {"contents": noted("write", "the release and its files"),
                        "id-token": noted("write", "the OIDC token the build provenance is signed with"),
                        "attestations": noted("write", "the attestations stored beside the repository")},
        "steps": [
            _checkout(),                  # gh reads the repository; --repo says it as well
            {"uses": uses("download-artifact"), "with": {"pattern": "runtime-*", "path": "jobs"}},
            {"name": f"One folder, one {SUMS}, checked", "run": merge},
            # every released file: archives, SBOMs, provenance statements and SHA256SUMS itself
            {"name": "Attest each file (GitHub build provenance)", "uses": uses("attest-build-provenance"),
             "with": {"subject-path": "release/*"}},
            {"name": f"GitHub release: archives, SBOMs, provenance, {SUMS}",
             "env": {"GH_TOKEN": "${{ github.token }}", "GH_REPO": "${{ github.repository }}",
                     "TAG": "${{ github.ref_name }}", "RUNTIMES": "${{ toJSON(needs) }}"},
             "run": _PUBLISH},
        ],
    }


def workflow(entries: list[Entry], runners: RunnerMap, pin: Pinning, name: str = "release") -> dict[str, Any]:
    jobs: dict[str, Any] = {}
    for e in [e for e in entries if e.unit is not None] + [e for e in entries if e.unit is None]:
        in_repository(e)
        if job_id(e) in jobs:
            raise AssembleError(f"two jobs would be called {job_id(e)!r}", where=e.recipe,
                                fix="rename one recipe ('.' and '_' read the same in a job id)")
        jobs[job_id(e)] = _build_job(e, runners, pin)
    jobs["release"] = _release_job([job_id(e) for e in entries if e.unit is None], runners)
    return {"name": name, "on": {"push": {"tags": ["v*", "b*"]}, "workflow_dispatch": {}},
            "permissions": {},
            "defaults": {"run": {"shell": SHELL}},
            # one release per ref at a time; a second push of the same tag waits rather than races
            "concurrency": {"group": "assemble-release-${{ github.ref }}", "cancel-in-progress": False},
            "env": {LOCK_ENV: lock.text()},
            "jobs": jobs}


# --- YAML, written by hand -------------------------------------------------------------------

# A comment or a plain line holding one of these would end early and let the rest be read as YAML
# (a newline in a runner label once became a job key). Quoted scalars would escape them, but nothing
# the workflow carries should hold one: refusing it finds the input that let one through.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029]")
_CONTROL_OR_NEWLINE = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def _plain(text: str, what: str, newlines: bool = False) -> str:
    """text, when it holds no control character (a literal block may hold newlines and tabs)."""
    if (_CONTROL if newlines else _CONTROL_OR_NEWLINE).search(text):
        raise AssembleError(f"a {what} of the workflow holds a control character: {text!r}",
                            where="the generated workflow",
                            fix="remove it from the input that carried it (a recipe, the runner map, an option)")
    return text


def to_yaml(doc: dict[str, Any], header: str = "") -> str:
    # split at "\n" alone: splitlines() would also split at \x0b or \u2028, hiding them from the guard
    lines = [f"# {_plain(ln, 'comment')}" if ln else "#" for ln in header.rstrip("\n").split("\n") if header]
    _block(doc, 0, lines)
    return "\n".join(lines) + "\n"


def _scalar(v: object) -> str:
    if isinstance(v, str):
        _plain(v, "scalar")
    if isinstance(v, Pinned):
        return f"{json.dumps(str(v))}  # {_plain(v.tag, 'comment')}"
    if isinstance(v, Noted):
        return f"{json.dumps(str(v))}  # {_plain(v.note, 'comment')}"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, dict) and not v:
        return "{}"
    if isinstance(v, list) and not v:
        return "[]"
    return json.dumps(v, ensure_ascii=False)


_MAX_KEY = 1024
_YAML11_BOOLEANS = {"on", "off", "yes", "no", "y", "n", "true", "false"}


def _key(k: str) -> str:
    # "on" is quoted: a YAML 1.1 reader (PyYAML) would read the bare word as true
    plain = k.replace("-", "").replace("_", "").isalnum() and k.lower() not in _YAML11_BOOLEANS
    return k if plain else json.dumps(k)


def _block(v: object, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    if isinstance(v, Commented):
        out.append(f"{pad}# {_plain(v.comment, 'comment')}")
    if isinstance(v, dict):
        for k, x in v.items():
            _plain(k, "key")
            if len(k) > _MAX_KEY:      # YAML's limit for a plain key; names are bounded before (NAME_MAX)
                raise AssembleError(f"a key of the workflow is {len(k)} characters long: {k[:40]!r}...",
                                    where="the generated workflow",
                                    fix="shorten the name that made it (a recipe name, a runner map key)")
            if isinstance(x, str) and "\n" in x.rstrip("\n") and not x.endswith("\n\n") and not x[:1].isspace():
                # a literal block: "|" keeps one final newline, "|-" none
                _plain(x, "literal block", newlines=True)
                out.append(f"{pad}{_key(k)}: {'|' if x.endswith(chr(10)) else '|-'}")
                out.extend(f"{pad}  {ln}" if ln else "" for ln in x.rstrip("\n").split("\n"))
            elif isinstance(x, (dict, list)) and x:
                out.append(f"{pad}{_key(k)}:")
                _block(x, indent + 1, out)
            else:
                out.append(f"{pad}{_key(k)}: {_scalar(x)}")
    elif isinstance(v, list):
        for x in v:
            if isinstance(x, (dict, list)) and x:
                sub: list[str] = []
                _block(x, indent + 1, sub)
                first = sub[0].lstrip()
                out.append(f"{pad}- {first}")
                out.extend(sub[1:])
            else:
                out.append(f"{pad}- {_scalar(x)}")
