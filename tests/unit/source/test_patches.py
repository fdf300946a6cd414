"""Patches: metadata, conditions, checking against the pristine tree, applying on a copy."""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from builder.source import patches as PT
from builder.config.targets import CudaArch
from builder.config.versions import satisfies
from builder.errors import AssembleError, BuildFailed
from builder.source.features import check_tree
from builder.paths import data_dir
from builder.config.recipe import parse_recipe
from builder.source.fetch import SourceTree
from tests.support.planted import build_planted_module

SHA = "1" * 40
def A(text: str) -> tuple[CudaArch, ...]:
    return CudaArch.parse_list(text, "test")


DL = PT.PatchContext(backends=("cpu",), cuda_version=None, cuda_archs=(), backend_dl=True)

RECIPE = '''name = "r"
description = "d"
backends = ["cpu"]
[pin]
sha = "{sha}"
features = ["backend-dl"]
[[pin.mirrors]]
kind = "git"
url = "https://example.org/llama.cpp.git"
{extra}'''


def recipe(tmp_path: Path, extra: str = "", sha: str = SHA):
    return parse_recipe(tmp_path / "r.toml", RECIPE.format(sha=sha, extra=extra))


def diff(rel: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}"))


def add_patch(pdir: Path, name: str, body: str, meta: str = "") -> Path:
    pdir.mkdir(parents=True, exist_ok=True)
    (pdir / f"{name}.patch").write_text(body)
    (pdir / f"{name}.toml").write_text(f'name = "{name}"\npatch = "{name}.patch"\nfixes = "fixes {name}"\n{meta}')
    return pdir / f"{name}.patch"


def fingerprint(tree: Path) -> dict[str, str]:
    """Every file's content hash and mode, to prove a tree was not touched."""
    out = {}
    for p in sorted(tree.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(tree))] = hashlib.sha256(p.read_bytes()).hexdigest() + oct(p.stat().st_mode)
    return out


CMAKE = 'project(ggml)\noption(GGML_BACKEND_DL "dl" OFF)\n'
# Lines far enough apart that patches to a, b and c do not share diff context.
LOADER = "".join(f"// line {i}\n" if i not in (3, 10, 17) else f"int {'abc'[(i - 3) // 7]} = {(i + 4) // 7};\n"
                 for i in range(21))


@pytest.fixture
def tree(tmp_path):
    t = tmp_path / "src"
    (t / "ggml" / "src").mkdir(parents=True)
    (t / "ggml" / "CMakeLists.txt").write_text(CMAKE)
    (t / "ggml" / "src" / "loader.cpp").write_text(LOADER)
    (t / "link").symlink_to("ggml/CMakeLists.txt")
    return t


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# --- the shipped patches ------------------------------------------------------------

def test_shipped_patches_load():
    patches = PT.load_patches()
    names = [p.name for p in patches]
    assert "backend-loader-no-cwd" in names
    loader = patches[names.index("backend-loader-no-cwd")]
    assert loader.when.backend_dl is True and loader.features == ("backend-loader-cwd",)
    assert [f.name for f in loader.files] == ["backend-loader-no-cwd.patch", "backend-loader-no-cwd.2025-08.patch",
                                              "backend-loader-no-cwd.2025-03.patch"]
    assert "working" in loader.fixes and "\n" not in loader.fixes


def test_readme_example_is_valid_metadata(tmp_path):
    text = (data_dir("patches") / "README.md").read_text()
    example = re.search(r"```toml\n(name = \"example-fix\".*?)```", text, re.S).group(1)
    (tmp_path / "example-fix.toml").write_text(example)
    (tmp_path / "example-fix.patch").write_text(diff("x", "a\n", "b\n"))
    p = PT.load_patch(tmp_path / "example-fix.toml")
    assert p.when.cuda_toolkit == ">=13" and p.when.cuda_archs == A("120,121")


@pytest.mark.parametrize("form", ["search_paths.push_back(fs::current_path());",
                                  'search_paths.push_back("./");'])
def test_loader_patch_refuses_an_older_form(tmp_path, tree, cache, form):
    """The vulnerable search is there, but not in the form the patch edits: refused, named."""
    (tree / "ggml/src/ggml-backend-reg.cpp").write_text(f"void f() {{\n    {form}\n}}\n")
    before = fingerprint(tree)
    with pytest.raises(AssembleError) as err:
        PT.prepare(SourceTree(tree, SHA, {}), recipe(tmp_path), DL)
    e = err.value
    assert "backend-loader-no-cwd" in e.what and SHA in e.what and e.code == 2
    assert "disable" in e.fix
    assert fingerprint(tree) == before
    assert not (cache / "trees").exists() or not any((cache / "trees").iterdir())


def test_loader_patch_skipped_once_upstream_fixed_it(tmp_path, tree, cache):
    (tree / "ggml/src/ggml-backend-reg.cpp").write_text("search_paths.push_back(get_executable_path());\n")
    prepared = PT.prepare(SourceTree(tree, SHA, {}), recipe(tmp_path), DL)
    assert prepared.path.parent.name == f"{SHA}-pristine" and prepared.applied == ()
    assert dict(prepared.skipped)["backend-loader-no-cwd"] == "not needed: the tree lacks backend-loader-cwd"


# --- selection and conditions -----------------------------------------------------------

def test_conditions():
    c = PT.Conditions(backends=("cuda",), cuda_toolkit=">=13", cuda_archs=A("120,121"))
    blackwell13 = PT.PatchContext(("cuda", "cpu"), "13.0", A("90,120a-real"), True)
    assert PT.unmet_condition(c, blackwell13) is None
    assert "12.8 does not satisfy >=13" in PT.unmet_condition(c, PT.PatchContext(("cuda",), "12.8", A("120"), True))
    assert "no CUDA toolkit" in PT.unmet_condition(c, PT.PatchContext(("cuda",), None, A("120"), True))
    assert "architecture" in PT.unmet_condition(c, PT.PatchContext(("cuda",), "13.1", A("89,90"), True))
    assert "backend" in PT.unmet_condition(c, PT.PatchContext(("vulkan",), "13.1", A("120"), True))
    assert PT.unmet_condition(PT.Conditions(backend_dl=False), DL) == "GGML_BACKEND_DL is on"
    assert PT.unmet_condition(PT.Conditions(), DL) is None


@pytest.mark.parametrize("version,spec,ok", [
    ("13.0", ">=13", True), ("12.8", ">=13", False), ("13", "==13.0", True), ("12.8.93", ">=12.4,<13", True),
    ("13.0.1", ">=12.4,<13", False), ("12.4", ">12.4", False), ("12.10", ">12.9", True), ("12.8", "!=12.8", False),
    ("V12.8.61", "<=12.8.61", True),
])
def test_version_matches(version, spec, ok):
    assert satisfies(version, spec) is ok


def test_unknown_disabled_patch_is_refused(tmp_path, tree, cache):
    r = recipe(tmp_path, '[patches]\ndisable = { "no-such-patch" = "because" }\n')
    with pytest.raises(AssembleError) as err:
        PT.prepare(SourceTree(tree, SHA, {}), r, DL)
    assert "no-such-patch" in err.value.what and "backend-loader-no-cwd" in err.value.fix


def test_applies_features_absent_and_shas(tmp_path, tree, cache):
    pdir = tmp_path / "patches"
    body = diff("ggml/src/loader.cpp", LOADER, LOADER.replace("int b = 2", "int b = 20"))
    add_patch(pdir, "needs-dl", body, '[applies]\nfeatures = ["backend-dl"]\n')
    add_patch(pdir, "needs-fit", body, '[applies]\nfeatures = ["fit"]\n')
    add_patch(pdir, "until-dl", body, '[applies]\nabsent = ["backend-dl"]\n')
    add_patch(pdir, "other-sha", body, f'[applies]\nshas = ["{"2" * 40}"]\n')
    add_patch(pdir, "cuda13", body, '[when]\nbackends = ["cuda"]\ncuda_toolkit = ">=13"\n')
    chosen, skipped = PT.select(PT.load_patches(pdir), tree, SHA, recipe(tmp_path), DL)
    assert [p.name for p in chosen] == ["needs-dl"]
    assert dict(skipped) == {
        "needs-fit": "not needed: the tree lacks fit",
        "until-dl": "not needed: the tree has backend-dl",
        "other-sha": f"not for {SHA}: the patch lists its commits",
        "cuda13": "not for this build: no backend among cuda is built",
    }


# --- checking and applying ------------------------------------------------------------------

def test_patches_apply_in_order_on_a_copy(tmp_path, tree, cache):
    pdir = tmp_path / "patches"
    step1 = LOADER.replace("int a = 1", "int a = 10")
    add_patch(pdir, "a-first", diff("ggml/src/loader.cpp", LOADER, step1))
    add_patch(pdir, "b-second", diff("ggml/src/loader.cpp", LOADER, LOADER.replace("int c = 3", "int c = 30")))
    before = fingerprint(tree)
    prepared = PT.prepare(SourceTree(tree, SHA, {}), recipe(tmp_path), DL, patches_dir=pdir)
    assert [a.name for a in prepared.applied] == ["a-first", "b-second"]
    assert (prepared.path / "ggml/src/loader.cpp").read_text() == step1.replace("int c = 3", "int c = 30")
    assert fingerprint(tree) == before  # the pristine tree is untouched
    assert (prepared.path / "link").is_symlink()
    assert prepared.applied[0].sha256 == hashlib.sha256((pdir / "a-first.patch").read_bytes()).hexdigest()
    # a different patch set gets a different tree; the first stays as it was
    (pdir / "b-second.patch").write_text(diff("ggml/src/loader.cpp", LOADER, LOADER.replace("int c = 3", "int c = 33")))
    other = PT.prepare(SourceTree(tree, SHA, {}), recipe(tmp_path), DL, patches_dir=pdir)
    assert other.path != prepared.path and "int c = 30" in (prepared.path / "ggml/src/loader.cpp").read_text()
    assert not [p for p in (cache / "trees").iterdir() if p.name.startswith(".")]  # no temp leftovers


def test_non_applying_patch_stops_before_any_copy(tmp_path, tree, cache):
    pdir = tmp_path / "patches"
    add_patch(pdir, "good", diff("ggml/src/loader.cpp", LOADER, LOADER.replace("int a = 1", "int a = 10")))
    add_patch(pdir, "stale", diff("ggml/src/loader.cpp", LOADER.replace("int b = 2", "int b = 7"), LOADER))
    before = fingerprint(tree)
    with pytest.raises(AssembleError) as err:
        PT.prepare(SourceTree(tree, SHA, {}), recipe(tmp_path), DL, patches_dir=pdir)
    assert "patch stale does not apply to llama.cpp " + SHA in err.value.what
    assert err.value.details and "loader.cpp" in err.value.details
    assert fingerprint(tree) == before
    assert not (cache / "trees").exists() or not any((cache / "trees").iterdir())


def test_conflicting_patches_fail_naming_both(tmp_path, tree, cache):
    pdir = tmp_path / "patches"
    add_patch(pdir, "a", diff("ggml/src/loader.cpp", LOADER, LOADER.replace("int b = 2", "int b = 10")))
    add_patch(pdir, "b", diff("ggml/src/loader.cpp", LOADER, LOADER.replace("int b = 2", "int b = 20")))
    with pytest.raises(BuildFailed) as err:
        PT.prepare(SourceTree(tree, SHA, {}), recipe(tmp_path), DL, patches_dir=pdir)
    assert "patch b" in err.value.what and "after a" in err.value.what and "conflict" in err.value.what


def test_tree_inside_another_repository_is_still_patched(tmp_path, tree, cache):
    """git apply run in a subdirectory of a repository would silently skip the patch."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    pdir = tmp_path / "patches"
    add_patch(pdir, "p", diff("ggml/src/loader.cpp", LOADER, LOADER.replace("int a = 1", "int a = 10")))
    prepared = PT.prepare(SourceTree(tree, SHA, {}), recipe(tmp_path), DL, patches_dir=pdir)
    assert "int a = 10" in (prepared.path / "ggml/src/loader.cpp").read_text()
    assert not (prepared.path / ".git").exists()  # the outer repository is not the tree's
    stale = tmp_path / "patches2"
    add_patch(stale, "p", diff("ggml/src/loader.cpp", "nothing\nlike\nthis\n", "x\n"))
    with pytest.raises(AssembleError, match="does not apply"):
        PT.prepare(SourceTree(tree, SHA, {}), recipe(tmp_path), DL, patches_dir=stale)


def test_unfinished_tree_is_replaced_and_local_trees_recopied(tmp_path, tree, cache):
    pdir = tmp_path / "patches"
    add_patch(pdir, "p", diff("ggml/src/loader.cpp", LOADER, LOADER.replace("int a = 1", "int a = 10")))
    patches = PT.load_patches(pdir)
    dest = cache / "trees" / f"{SHA}-{PT.patch_set_id([p.files[0] for p in patches])}" / "src"
    dest.mkdir(parents=True)
    (dest / "half-copied").write_text("")
    prepared = PT.prepare(SourceTree(tree, SHA, {}), recipe(tmp_path), DL, patches_dir=pdir)
    assert prepared.path == dest and not (dest / "half-copied").exists() and (dest / PT.STAMP).is_file()
    # a local tree without a sha may change between builds: copied afresh each time
    local = PT.prepare(SourceTree(tree, None, {}), recipe(tmp_path), DL, patches_dir=pdir)
    assert local.path.parent.name.startswith("local-")
    (tree / "ggml/src/extra.h").write_text("new\n")
    assert (PT.prepare(SourceTree(tree, None, {}), recipe(tmp_path), DL, patches_dir=pdir).path
            / "ggml/src/extra.h").is_file()
    # a user's --source checkout at the pinned sha may carry uncommitted edits: never a reused copy
    checkout = SourceTree(tree, SHA, {"kind": "local"})
    first = PT.prepare(checkout, recipe(tmp_path), DL, patches_dir=pdir)
    assert first.path != dest and first.path.parent.name.startswith("local-")
    (tree / "ggml/src/extra.h").write_text("edited\n")
    again = PT.prepare(checkout, recipe(tmp_path), DL, patches_dir=pdir)
    assert (again.path / "ggml/src/extra.h").read_text() == "edited\n"


@pytest.mark.parametrize("meta,message", [
    ('name = "other"\npatch = "m.patch"\nfixes = "x"\n', "differs from the file name"),
    ('name = "m"\npatch = "missing.patch"\nfixes = "x"\n', "no patch file"),
    ('name = "m"\npatch = "m.patch"\n', "missing 'fixes'"),
    ('name = "m"\nfixes = "x"\n', "needs a patch file"),
    ('name = "m"\npatch = ["m.patch", "gone.patch"]\nfixes = "x"\n', "no patch file 'gone.patch'"),
    ('name = "m"\npatch = "m.patch"\nfixes = "x"\nfix = "typo"\n', "unknown key"),
    ('name = "m"\npatch = "m.patch"\nfixes = "x"\n[when]\ncuda_toolkit = "13+"\n', "not a comparison"),
    ('name = "m"\npatch = "m.patch"\nfixes = "x"\n[when]\ncuda = "13"\n', "unknown key"),
    ('name = "m"\npatch = "m.patch"\nfixes = "x"\n[applies]\nfeatures = ["warp"]\n', "unknown feature"),
    ('name = "m"\npatch = "m.patch"\nfixes = "x"\n[applies]\nshas = ["abc"]\n', "40-hex"),
    ('name = "m"\npatch = "m.patch"\nfixes = "x"\n[when]\nbackend_dl = "yes"\n', "true or false"),
])
def test_metadata_errors(tmp_path, meta, message):
    (tmp_path / "m.patch").write_text(diff("x", "a\n", "b\n"))
    (tmp_path / "m.toml").write_text(meta)
    with pytest.raises(AssembleError) as err:
        PT.load_patch(tmp_path / "m.toml")
    assert message in err.value.what


# --- the planted module the end-to-end test uses -------------------------------------------

def test_planted_module_runs_its_constructor_when_loaded(tmp_path):
    marker = tmp_path / "marker with space.txt"
    module = build_planted_module(tmp_path / "plant", marker)
    assert module.name == "libggml-cpu-planted.so" and not marker.exists()
    syms = subprocess.run(["nm", "-D", "--defined-only", str(module)], capture_output=True, text=True).stdout
    assert re.search(r" T ggml_backend_score$", syms, re.M) and re.search(r" T ggml_backend_init$", syms, re.M)
    code = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); "
            "print(lib.ggml_backend_score()); print(lib.ggml_backend_init())")
    out = subprocess.run([sys.executable, "-c", code, str(module)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(1 << 30), "0"]
    assert marker.read_text().startswith("planted module loaded")
    other = build_planted_module(tmp_path / "plant", tmp_path / "m2", name="libggml-cuda-x.so")
    assert other.name == "libggml-cuda-x.so" and other.is_file()
    assert os.access(other, os.R_OK)


# --- variants ------------------------------------------------------------------------------

def test_first_applying_variant_is_used_and_recorded(tmp_path, tree, cache):
    pdir = tmp_path / "patches"
    pdir.mkdir()
    (pdir / "v-new.patch").write_text(diff("ggml/src/loader.cpp", LOADER.replace("int a = 1", "int a = 5"), LOADER))
    (pdir / "v-old.patch").write_text(diff("ggml/src/loader.cpp", LOADER, LOADER.replace("int a = 1", "int a = 10")))
    (pdir / "v.toml").write_text('name = "v"\npatch = ["v-new.patch", "v-old.patch"]\nfixes = "x"\n')
    prepared = PT.prepare(SourceTree(tree, SHA, {}), recipe(tmp_path), DL, patches_dir=pdir)
    [a] = prepared.applied
    assert a.file == "v-old.patch" and a.sha256 == hashlib.sha256((pdir / "v-old.patch").read_bytes()).hexdigest()
    assert "int a = 10" in (prepared.path / "ggml/src/loader.cpp").read_text()
    (tree / "ggml/src/loader.cpp").write_text("something else\n")
    with pytest.raises(AssembleError) as err:
        PT.prepare(SourceTree(tree, "3" * 40, {}), recipe(tmp_path), DL, patches_dir=pdir)
    assert "patch v does not apply" in err.value.what and "2 variants" in err.value.what
    assert "v-new.patch" in err.value.details and "v-old.patch" in err.value.details


def llama_repo() -> Path | None:
    for c in (os.environ.get("ASSEMBLE_TEST_LLAMA_REPO"), "/work/.mirror/ngxson+llama.cpp/repo"):
        if c and Path(c).exists():
            return Path(c)
    return None


def test_loader_patch_covers_every_upstream_form_since_2025_03(tmp_path):
    """Every version of ggml-backend-reg.cpp on upstream's first-parent history whose loader
    searches the working directory either takes exactly one variant, after which it no
    longer does, or (the 2024 forms only) is refused."""
    from builder.source.gitobjects import GitRepo
    repo = llama_repo()
    if repo is None:
        pytest.skip("no llama.cpp clone with history (set ASSEMBLE_TEST_LLAMA_REPO)")
    loader = next(p for p in PT.load_patches() if p.name == "backend-loader-no-cwd")
    rel = "ggml/src/ggml-backend-reg.cpp"
    work = tmp_path / "t"
    (work / "ggml" / "src").mkdir(parents=True)
    taken, refused = {}, []
    with GitRepo(repo) as r:
        log = r.git("log", "--first-parent", "--format=%H %cs", "HEAD", "--", rel).split("\n")
        for line in filter(None, log):
            sha, date = line.split()
            entry = r.entry(sha, rel)
            if entry is None:
                continue
            (work / rel).write_bytes(r.read(entry.oid)[1])
            if not check_tree(work, ["backend-loader-cwd"]).ok:
                continue
            ok = [v for v in loader.files if PT._git_apply(work, v, "--check").returncode == 0]
            assert len(ok) <= 1, (sha, ok)
            if not ok:
                refused.append(date)
                continue
            taken[sha] = ok[0].name
            assert PT._git_apply(work, ok[0]).returncode == 0
            assert not check_tree(work, ["backend-loader-cwd"]).ok, sha
    assert refused and max(refused) < "2025-03-11" and min(refused) >= "2024-12-01"
    assert set(taken.values()) >= {"backend-loader-no-cwd.2025-08.patch", "backend-loader-no-cwd.2025-03.patch"}


def test_copy_of_a_git_tree_answers_git_like_the_source(tmp_path, tree, cache):
    """CMake asks git for the commit and build number; the copy borrows the source's objects."""
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@e", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@e")
    for i in range(3):
        (tree / "n.txt").write_text(f"{i}\n")
        if i == 0:
            subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
        subprocess.run(["git", "add", "-A"], cwd=tree, check=True, env=env)
        subprocess.run(["git", "commit", "-qm", f"c{i}"], cwd=tree, check=True, env=env)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True).stdout.strip()
    git_before = fingerprint(tree / ".git")
    pdir = tmp_path / "patches"
    add_patch(pdir, "p", diff("ggml/src/loader.cpp", LOADER, LOADER.replace("int a = 1", "int a = 10")))
    prepared = PT.prepare(SourceTree(tree, sha, {}), recipe(tmp_path), DL, patches_dir=pdir)

    def git(*args):
        return subprocess.run(["git", *args], cwd=prepared.path, capture_output=True, text=True).stdout.strip()
    assert git("rev-parse", "HEAD") == sha and git("rev-list", "--count", "HEAD") == "3"
    assert (prepared.path / ".git" / "index").is_file()
    assert git("status", "--porcelain", "--untracked-files=no") == "M ggml/src/loader.cpp"
    assert fingerprint(tree / ".git") == git_before  # the source repository was only read
    assert not list((prepared.path / ".git" / "objects").glob("??/*"))  # no object was copied
