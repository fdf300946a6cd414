"""`assemble pin` and `pin --earliest` on git histories built here, where every feature's
presence at every commit is known by construction.

The histories are written with `git fast-import` (hundreds of commits in well under a
second): a first-parent main line, side branches merged back (merge commits), files
that change at most commits (many blob versions), a feature that moves between
files, and one that is added, removed and added back.
"""

from __future__ import annotations

import json
import random
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from builder.cli import main as cli
from builder.cli.commands import pin as pin_cmd
from builder.config.recipe import parse_recipe, read_lock
from builder.errors import AssembleError
from builder.source import features as F
from builder.source import pin as P
from builder.source.gitobjects import GitRepo
from tests.support.common import assemble

# The strings the real registry's detectors look for (see builder/data/features.toml).
TEXT = {
    "device-list": '{"--list-devices"},',
    "device": '{"-dev", "--device"},',
    "override-tensor": '{"-ot", "--override-tensor"},',
    "fit": '{"-fit", "--fit"},',
    "jinja": '{"--jinja"},',
}
CMAKE_DL = 'option(GGML_BACKEND_DL "ggml: build backends as dynamic libraries" OFF)\n'
MTP = '    {"draft-mtp",     COMMON_SPECULATIVE_TYPE_DRAFT_MTP},\n'


@dataclass
class Model:
    """The intended state: files at each main-line commit, and the commits' shas."""
    states: list[dict[str, str]] = field(default_factory=list)   # main line, oldest first
    main: list[str] = field(default_factory=list)                # first-parent shas, oldest first
    side: dict[str, dict[str, str]] = field(default_factory=dict)  # side-branch sha -> files


def fast_import(repo: Path, commits: list[dict]) -> dict[int, str]:
    """Write commits with fast-import; each is {mark, branch, files, parents: [marks]}. -> mark: sha"""
    out = []
    for n, c in enumerate(commits):
        msg = c.get("msg", f"commit {c['mark']}").encode()
        out.append(f"commit refs/heads/{c['branch']}\nmark :{c['mark']}\n"
                   f"committer T <t@example.org> {1_600_000_000 + n * 60} +0000\n".encode())
        out.append(b"data %d\n%s\n" % (len(msg), msg))
        for i, parent in enumerate(c["parents"]):
            out.append(f"{'from' if i == 0 else 'merge'} :{parent}\n".encode())
        out.append(b"deleteall\n")  # every commit states its whole tree
        for path, text in sorted(c["files"].items()):
            data = text.encode()
            out.append(f"M 100644 inline {path}\n".encode() + b"data %d\n%s\n" % (len(data), data))
        out.append(b"\n")
    marks = repo / "marks"
    subprocess.run(["git", "--git-dir", str(repo), "fast-import", "--quiet", f"--export-marks={marks}"],
                   input=b"".join(out), check=True)
    result = {}
    for line in marks.read_text().split("\n"):
        if line:
            mark, sha = line.split()
            result[int(mark[1:])] = sha
    return result


def init_bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    subprocess.run(["git", "--git-dir", str(path), "symbolic-ref", "HEAD", "refs/heads/main"], check=True)
    return path


def arg_cpp(flags: list[str], n: int) -> str:
    # A line that changes at most commits, so common/arg.cpp has hundreds of blob versions.
    return "// common/arg.cpp\n" + "".join(TEXT[f] + "\n" for f in flags) + f"// revision {n // 2}\n"


# Known points on the main line (first-parent index; 0 = root). The history has 400.
N = 400
BACKEND_DL_AT = 50
LIST_DEVICES_AT, DEVICE_AT = 80, 120          # device-select needs both strings
OT_ADDED, OT_REMOVED, OT_READDED = 150, 200, 260
MTMD_AT, MTMD_MOVED = 100, 220                 # examples/llava/mtmd.h -> tools/mtmd/mtmd.h
MTP_MERGE = 300                                # arrives through the merge of a side branch
MERGES = (130, 240, MTP_MERGE, 350)            # main-line indices that are merge commits
FIT_RANGE = (10, 40)                           # present only here: gone at head


def main_state(i: int) -> dict[str, str]:
    flags = []
    if i >= LIST_DEVICES_AT:
        flags.append("device-list")
    if i >= DEVICE_AT:
        flags.append("device")
    if OT_ADDED <= i < OT_REMOVED or i >= OT_READDED:
        flags.append("override-tensor")
    if FIT_RANGE[0] <= i < FIT_RANGE[1]:
        flags.append("fit")
    files = {
        "README.md": f"llama.cpp at main-line commit {i}\n",
        "common/arg.cpp": arg_cpp(flags, i),
        "ggml/CMakeLists.txt": "project(ggml)\n" + (CMAKE_DL if i >= BACKEND_DL_AT else "") + f"# {i // 7}\n",
        "common/speculative.cpp": "// spec\n" + (MTP if i >= MTP_MERGE else ""),
        "common/common.cpp": '    {"--flash-attn"}\n',  # present from the root on
    }
    if MTMD_AT <= i < MTMD_MOVED:
        files["examples/llava/mtmd.h"] = "// mtmd\n"
    elif i >= MTMD_MOVED:
        files["tools/mtmd/mtmd.h"] = "// mtmd\n"
    return files


def build_history(repo: Path) -> Model:
    """400 main-line commits; at each index in MERGES a side branch of 4 commits (forked 5
    commits earlier) is merged. The MTP side branch has draft-mtp from its 2nd commit on,
    so it is in the history before MTP_MERGE, but not on the first-parent line."""
    commits, model, mark = [], Model(), 0
    main_marks: list[int] = []
    side_marks: dict[int, dict] = {}
    for i in range(N):
        parents = [main_marks[-1]] if main_marks else []
        if i in MERGES:
            fork = main_marks[i - 5]
            prev = fork
            for k in range(4):
                mark += 1
                files = dict(main_state(i - 5))
                files[f"side/{i}.txt"] = f"side {k}\n"
                if i == MTP_MERGE and k >= 1:
                    files["common/speculative.cpp"] = "// spec\n" + MTP
                commits.append({"mark": mark, "branch": f"side{i}", "parents": [prev], "files": files})
                side_marks[mark] = files
                prev = mark
            parents.append(prev)
        mark += 1
        state = main_state(i)
        if i in MERGES:
            state[f"side/{i}.txt"] = "side 3\n"
        # side files from earlier merges stay
        for m in MERGES:
            if m < i:
                state[f"side/{m}.txt"] = "side 3\n"
        commits.append({"mark": mark, "branch": "main", "parents": parents, "files": state,
                        "msg": f"main {i}"})
        main_marks.append(mark)
        model.states.append(state)
    shas = fast_import(repo, commits)
    model.main = [shas[m] for m in main_marks]
    model.side = {shas[m]: f for m, f in side_marks.items()}
    return model


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    repo = init_bare(tmp_path_factory.mktemp("hist") / "llama.git")
    model = build_history(repo)
    return repo, model


def brute_force_run_start(repo: GitRepo, shas: list[str], names: list[str]) -> int | None:
    """Oracle: check every first-parent commit directly; the start of the good run at the end."""
    cache: dict = {}
    good = [F.check_commit(repo, s, names, cache).ok for s in shas]
    if not good[-1]:
        return None
    i = len(good) - 1
    while i > 0 and good[i - 1]:
        i -= 1
    return i


# --- the history itself -------------------------------------------------------------

def test_history_shape(history):
    repo, model = history
    with GitRepo(repo) as r:
        fp = r.first_parent_history("main")
        assert fp == model.main and len(fp) == N
        for i in MERGES:
            parents = r.git("show", "-s", "--format=%P", fp[i]).split()
            assert len(parents) == 2 and parents[0] == fp[i - 1]
        assert len(r.git("rev-list", "main").split()) == N + 4 * len(MERGES)
        versions = {r.entry(s, "common/arg.cpp").oid for s in fp}
        assert len(versions) > 150  # the scan has many blobs to get through


# --- exactness --------------------------------------------------------------------

CASES = [
    # (features, expected first-parent index of the answer, deciding features)
    (["backend-dl"], BACKEND_DL_AT, ("backend-dl",)),
    (["device-select"], DEVICE_AT, ("device-select",)),
    (["device-select", "backend-dl"], DEVICE_AT, ("device-select",)),
    (["override-tensor"], OT_READDED, ("override-tensor",)),           # added, removed, re-added
    (["override-tensor", "backend-dl"], OT_READDED, ("override-tensor",)),
    (["mtmd"], MTMD_AT, ("mtmd",)),                                    # moved without a gap
    (["mtp"], MTP_MERGE, ("mtp",)),                                    # a merge commit
    (["mtp", "device-select", "override-tensor"], MTP_MERGE, ("mtp",)),
    (["flash-attn"], 0, ()),                                           # always there: the root
]


@pytest.mark.parametrize("names,expected,deciding", CASES, ids=[",".join(c[0]) for c in CASES])
def test_earliest_is_exact(history, names, expected, deciding):
    repo, model = history
    with GitRepo(repo) as r:
        result = P.pin(r, "main", names, earliest=True)
        e = result.earliest
        assert e.commit.sha == model.main[expected], f"got index {model.main.index(e.commit.sha)}"
        assert e.position == expected and e.history == N
        assert e.deciding == deciding
        assert e.parent == (model.main[expected - 1] if expected else None)
        assert brute_force_run_start(r, model.main, names) == expected
        # the found commit has all features, its parent lacks the deciding one(s)
        assert F.check_commit(r, e.commit.sha, names).ok
        if expected:
            assert set(deciding) <= set(F.check_commit(r, e.parent, names).missing)
        # the scan is cheaper than looking at every commit
        assert e.checked < N


def test_readded_feature_is_explained(history):
    repo, model = history
    with GitRepo(repo) as r:
        e = P.pin(r, "main", ["override-tensor", "backend-dl"], earliest=True).earliest
    text = e.explain("main")
    assert "decided by override-tensor" in text
    assert model.main[OT_READDED - 1][:12] in text and '"--override-tensor"' in text
    assert [(x.feature, x.present_until, x.removed_by) for x in e.removals] == [
        ("override-tensor", model.main[OT_REMOVED - 1], model.main[OT_REMOVED])]
    assert "removed by" in text


def test_side_branch_commits_are_not_candidates(history):
    """MTP entered the side branch earlier, but only the merge is on first-parent history."""
    repo, model = history
    with GitRepo(repo) as r:
        with_mtp = [s for s, files in model.side.items() if "draft-mtp" in files["common/speculative.cpp"]]
        assert with_mtp and all(F.check_commit(r, s, ["mtp"]).ok for s in with_mtp)
        e = P.pin(r, "main", ["mtp"], earliest=True).earliest
        assert e.commit.sha == model.main[MTP_MERGE] and e.commit.sha not in with_mtp


def test_earliest_from_an_older_ref(history):
    """REF bounds the history: before the removal, override-tensor's first run is the answer."""
    repo, model = history
    with GitRepo(repo) as r:
        e = P.pin(r, model.main[190], ["override-tensor"], earliest=True).earliest
        assert e.commit.sha == model.main[OT_ADDED] and e.history == 191 and not e.removals
        e = P.pin(r, model.main[280][:10], ["override-tensor"], earliest=True).earliest
        assert e.commit.sha == model.main[OT_READDED] and e.history == 281
        with pytest.raises(AssembleError, match="override-tensor"):
            P.pin(r, model.main[230], ["override-tensor"], earliest=True)


def test_no_commit_has_all_features(history):
    """fit exists only in 10..39 and device-select from 120: never together, and head lacks fit."""
    repo, model = history
    with GitRepo(repo) as r:
        with pytest.raises(AssembleError) as err:
            P.pin(r, "main", ["fit", "device-select"], earliest=True)
        assert "lacks 1 feature(s): fit" in err.value.what
        assert brute_force_run_start(r, model.main, ["fit", "device-select"]) is None
        # the same refusal for a ref where the features exist separately but not together
        with pytest.raises(AssembleError, match="lacks 1 feature"):
            P.pin(r, model.main[30], ["fit", "device-select"])


def test_pin_resolves_and_reports_evidence(history):
    repo, model = history
    with GitRepo(repo) as r:
        res = P.pin(r, "main", ["device-select", "backend-dl"])
        assert res.sha == res.head.sha == model.main[-1]
        assert res.earliest is None
        assert "common/arg.cpp contains" in res.report.present["device-select"]
        assert "option(GGML_BACKEND_DL)" in res.report.present["backend-dl"]
        assert P.pin(r, model.main[123][:8], ["device-select"]).sha == model.main[123]


def test_unknown_ref_and_unknown_feature(history):
    repo, _ = history
    with GitRepo(repo) as r:
        with pytest.raises(AssembleError, match="names no commit"):
            P.pin(r, "no-such-branch", ["backend-dl"])
        with pytest.raises(AssembleError, match="unknown feature"):
            P.pin(r, "main", ["warp-drive"])


def test_earliest_needs_features(history):
    repo, _ = history
    with GitRepo(repo) as r:
        with pytest.raises(AssembleError, match="lists no features"):
            P.pin(r, "main", [], earliest=True)


# --- random histories against the brute-force oracle ---------------------------------

@pytest.mark.parametrize("seed", range(12))
def test_random_histories_match_brute_force(tmp_path, seed):
    """Features toggled at random points (removals and re-additions included), with merges."""
    rng = random.Random(seed)
    n = rng.randint(30, 90)
    names = ["backend-dl", "override-tensor", "jinja"]
    on = {name: [rng.random() < 0.5] for name in names}
    for name in names:
        for _ in range(1, n):
            flip = rng.random() < 0.12
            on[name].append(on[name][-1] != flip)
        on[name][-1] = True  # head has them all, so a pin exists
    commits, main_marks, mark = [], [], 0

    def state(i):
        flags = [f for f in ("override-tensor", "jinja") if on[f][i]]
        return {"common/arg.cpp": arg_cpp(flags, i * 2),
                "ggml/CMakeLists.txt": "x\n" + (CMAKE_DL if on["backend-dl"][i] else "") + f"#{i % 3}\n"}

    for i in range(n):
        parents = [main_marks[-1]] if main_marks else []
        if i > 3 and rng.random() < 0.15:
            mark += 1
            commits.append({"mark": mark, "branch": f"s{i}", "parents": [main_marks[i - 3]],
                            "files": state(i)})  # the side branch already has the merge's tree
            parents.append(mark)
        mark += 1
        commits.append({"mark": mark, "branch": "main", "parents": parents, "files": state(i)})
        main_marks.append(mark)
    repo = init_bare(tmp_path / "r.git")
    shas = fast_import(repo, commits)
    main = [shas[m] for m in main_marks]
    with GitRepo(repo) as r:
        expected = brute_force_run_start(r, main, names)
        e = P.pin(r, "main", names, earliest=True).earliest
        assert e.position == expected and e.commit.sha == main[expected]
        if expected:
            bad = set(F.check_commit(r, main[expected - 1], names).missing)
            assert set(e.deciding) == bad


# --- writing the pin ------------------------------------------------------------------

RECIPE = '''# a comment that must survive
name = "test"
description = "test recipe"
backends = ["cpu"]

[pin]
# the pinned commit
sha = "0000000000000000000000000000000000000000"   # trailing comment
features = ["device-select", "backend-dl"]

[[pin.mirrors]]
kind = "git"
url = "{url}"

[cpu]
variants = "haswell"   # the test repositories have no GGML_CPU_ALL_VARIANTS option
'''


def _run_cmd(argv: list[str]) -> int:
    """`assemble pin ...` parsed by the real command line, run in-process (its errors raise)."""
    return pin_cmd.run(cli.parser().parse_args(argv))


def test_command_writes_sha_keeping_comments(history, tmp_path, capsys):
    repo, model = history
    recipe = tmp_path / "test.toml"
    recipe.write_text(RECIPE.format(url=repo))
    assert _run_cmd(["pin", str(recipe), "--earliest", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pinned"] == model.main[DEVICE_AT] and out["written"] == str(recipe)
    assert out["earliest"]["deciding"] == ["device-select"]
    text = recipe.read_text()
    assert text == RECIPE.format(url=repo).replace("0" * 40, model.main[DEVICE_AT])
    assert parse_recipe(recipe).pin.sha == model.main[DEVICE_AT]
    # --lock leaves the recipe alone and writes the lock beside it
    assert _run_cmd(["pin", str(recipe), "--repo", str(repo), "--ref", "main", "--lock"]) == 0
    assert recipe.read_text() == text
    lock = json.loads((tmp_path / "test.lock.json").read_text())
    assert lock["sha"] == model.main[-1] and read_lock(recipe) == (model.main[-1], None)
    # ... and the lock wins when the recipe is loaded (what `assemble build` builds)
    loaded = parse_recipe(recipe)
    assert loaded.pin.sha == model.main[-1] and loaded.pin.lock == str(tmp_path / "test.lock.json")
    # --dry-run writes nothing
    assert _run_cmd(["pin", str(recipe), "--repo", str(repo), "--dry-run"]) == 0
    assert recipe.read_text() == text
    assert "would pin" in capsys.readouterr().out


def test_command_refuses_missing_features(history, tmp_path):
    repo, model = history
    recipe = tmp_path / "test.toml"
    recipe.write_text(RECIPE.format(url=repo))
    with pytest.raises(AssembleError) as err:
        _run_cmd(["pin", str(recipe), "--ref", model.main[DEVICE_AT - 1]])
    assert "device-select" in err.value.what and err.value.code == 2
    assert "0" * 40 in recipe.read_text()  # untouched


def test_write_recipe_pin_never_writes_a_broken_recipe(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(url="https://example.org/x.git"))
    with pytest.raises(AssembleError):
        P.write_recipe_pin(recipe, "not-a-sha", None)
    with pytest.raises(AssembleError):
        P.write_recipe_pin(recipe, "a" * 40, "7416")          # not upstream's grammar
    assert "0" * 40 in recipe.read_text()
    assert P.write_recipe_pin(recipe, "a" * 40, None) and not P.write_recipe_pin(recipe, "a" * 40, None)


def test_pin_records_the_nearest_upstream_build_number(history, tmp_path, capsys):
    """bNNNN tags (upstream's release numbers): the tag itself, N commits past it, or none at all;
    the recipe's build line follows the sha, and a number that no longer applies is removed."""
    repo, model = history
    recipe = tmp_path / "test.toml"
    recipe.write_text(RECIPE.format(url=repo))
    subprocess.run(["git", "-C", str(repo), "tag", "b100", model.main[DEVICE_AT - 2]], check=True)
    assert _run_cmd(["pin", str(recipe), "--earliest", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pinned"] == model.main[DEVICE_AT] and out["build"] == "b100+2"
    assert parse_recipe(recipe).pin.build == "b100+2"
    assert 'build = "b100+2"' in recipe.read_text()
    subprocess.run(["git", "-C", str(repo), "tag", "-a", "-m", "b102", "b102", model.main[DEVICE_AT]], check=True)
    assert _run_cmd(["pin", str(recipe), "--earliest"]) == 0
    assert "(b102)" in capsys.readouterr().out and parse_recipe(recipe).pin.build == "b102"
    assert recipe.read_text().count("build =") == 1
    # the lock carries its own number, and wins with its sha
    assert _run_cmd(["pin", str(recipe), "--ref", "main", "--lock"]) == 0
    capsys.readouterr()
    # commits reachable from the pin and not from the tag, as upstream counts its build numbers
    distance = int(subprocess.run(["git", "-C", str(repo), "rev-list", "--count", f"b102..{model.main[-1]}"],
                                  capture_output=True, text=True, check=True).stdout)
    assert distance > 0 and read_lock(recipe) == (model.main[-1], f"b102+{distance}")
    assert parse_recipe(recipe).pin.build == read_lock(recipe)[1]
    (tmp_path / "test.lock.json").unlink()
    # tags gone (a shallow clone, a fork): the stale number is removed, never kept beside a new sha
    for tag in ("b100", "b102"):
        subprocess.run(["git", "-C", str(repo), "tag", "-d", tag], check=True, capture_output=True)
    assert _run_cmd(["pin", str(recipe), "--ref", "main"]) == 0
    assert "no bNNNN tag" in capsys.readouterr().out
    assert "build =" not in recipe.read_text() and parse_recipe(recipe).pin.build is None


def test_open_repo_refuses_nonsense(tmp_path):
    with pytest.raises(AssembleError, match="not a URL"):
        P.open_repo(str(tmp_path / "missing"))
    with pytest.raises(AssembleError, match="not a git repository"):
        P.open_repo(str(tmp_path))


def test_open_repo_mirrors_a_url(history, tmp_path, monkeypatch):
    repo, model = history
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    with P.open_repo(f"file://{repo}") as r:
        assert r.path.parent == tmp_path / "cache" / "git"
        assert r.resolve("main") == model.main[-1]
    with P.open_repo(f"file://{repo}") as r:  # second time: fetch into the same mirror
        assert r.resolve("main") == model.main[-1]


def test_directory_and_regex_detectors_on_history(history):
    """find_earliest takes any features: a directory that appears, a regex on a moving file."""
    repo, model = history
    tools_dir = F.Feature("tools-mtmd-dir", "a directory", (F.Detector(("tools/mtmd",), "exists"),))
    regex = F.Feature("dl-regex", "a regex", (F.Detector(("ggml/CMakeLists.txt",), "regex",
                                                         r"^option\(GGML_BACKEND_DL\b"),))
    with GitRepo(repo) as r:
        e = P.find_earliest(r, model.main[-1], [tools_dir])
        assert e.commit.sha == model.main[MTMD_MOVED] and e.reasons == {"tools-mtmd-dir": "no tools/mtmd"}
        e = P.find_earliest(r, model.main[-1], [tools_dir, regex])
        assert e.commit.sha == model.main[MTMD_MOVED] and e.deciding == ("tools-mtmd-dir",)
        e = P.find_earliest(r, model.main[-1], [regex])
        assert e.commit.sha == model.main[BACKEND_DL_AT]


# --- shallow clones ---------------------------------------------------------------------

SHALLOW_N, SHALLOW_DEVICE_AT = 10, 4   # device-select (and backend-dl) from main-line commit 4 on


@pytest.fixture
def shallow_pair(tmp_path):
    """A 10-commit history and a --depth 3 clone of it: (full repo, shallow clone, main-line shas)."""
    full = init_bare(tmp_path / "full.git")
    commits = [{"mark": i + 1, "branch": "main", "parents": [i] if i else [],
                "files": {"common/arg.cpp": arg_cpp(["device-list", "device"] if i >= SHALLOW_DEVICE_AT else [], i * 2),
                          "ggml/CMakeLists.txt": "project(ggml)\n" + CMAKE_DL + f"# {i}\n"}}
               for i in range(SHALLOW_N)]
    marks = fast_import(full, commits)
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "3", "--branch", "main", f"file://{full}", str(shallow)],
                   check=True, capture_output=True)
    return full, shallow, [marks[i + 1] for i in range(SHALLOW_N)]


def test_earliest_refuses_a_shallow_clone(shallow_pair, tmp_path):
    """In a --depth 3 clone the oldest commit kept looks like a root that has every feature:
    --earliest would pin commit 7 instead of 4. It must refuse, in one line, writing nothing."""
    full, shallow, main = shallow_pair
    recipe = tmp_path / "test.toml"
    recipe.write_text(RECIPE.format(url=full))
    before = recipe.read_bytes()
    env = {"ASSEMBLE_CACHE": str(tmp_path / "cache")}
    for repo in (str(shallow), f"file://{shallow}"):  # the clone itself, and a URL mirrored under the cache
        for extra in ((), ("--json",), ("--lock",)):
            proc = assemble("pin", str(recipe), "--repo", repo, "--earliest", *extra, env=env)
            errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
            assert proc.returncode == 2, proc.stderr
            assert len(errors) == 1 and "shallow history" in errors[0] and "git fetch --unshallow" in errors[0]
            assert "Traceback" not in proc.stderr
            # nothing on stdout but, with --json, the same refusal as an object
            assert (json.loads(proc.stdout)["error"]["exit"] == 2) if extra == ("--json",) else proc.stdout == ""
            assert recipe.read_bytes() == before and not (tmp_path / "test.lock.json").exists()
    # the same command on the full history pins commit 4, the answer the shallow clone cannot see
    proc = assemble("pin", str(recipe), "--repo", str(full), "--earliest", "--dry-run", env=env)
    assert proc.returncode == 0 and f"would pin {main[SHALLOW_DEVICE_AT]}" in proc.stdout


def test_plain_pin_works_on_a_shallow_clone(shallow_pair, tmp_path):
    """Without --earliest only REF's own tree is read, which a shallow clone has in full."""
    full, shallow, main = shallow_pair
    with GitRepo(shallow) as r:
        assert r.is_shallow() and P.pin(r, "HEAD", ["device-select", "backend-dl"]).sha == main[-1]
        with pytest.raises(AssembleError, match="shallow history"):
            P.find_earliest(r, main[-1], F.lookup(["device-select"]))
        with pytest.raises(AssembleError) as err:  # a ref cut off by --depth: the fix says why
            P.pin(r, main[2], ["backend-dl"])
        assert "names no commit" in err.value.what and "shallow" in err.value.fix
    with GitRepo(full) as r:
        assert not r.is_shallow()
        assert P.pin(r, "main", ["device-select"], earliest=True).sha == main[SHALLOW_DEVICE_AT]
