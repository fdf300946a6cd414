"""The feature registry and its detectors, on directories and on git commits."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from builder.source import features as F
from builder.errors import AssembleError
from builder.source.gitobjects import GitRepo
from builder.config.recipe import all_recipes, parse_recipe

PINNED = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


# --- the shipped registry --------------------------------------------------------

def test_registry_has_the_real_features():
    reg = F.registry()
    assert len(reg) >= 10
    for name in ("device-select", "backend-dl", "override-tensor", "spec-draft-device", "cuda-nccl",
                 "n-cpu-moe", "fit", "mtp", "backend-loader-cwd"):
        assert name in reg and reg[name].description and reg[name].detectors


def test_every_recipe_names_known_features():
    reg = F.registry()
    for recipe in all_recipes():
        assert recipe.pin.features, recipe.name
        assert set(recipe.pin.features) <= set(reg), recipe.name


# --- detectors on a directory -------------------------------------------------------

def test_check_tree_evidence_and_reasons(tmp_path):
    write(tmp_path, {
        "common/arg.cpp": '{"--list-devices"},\n{"-dev", "--device"},\n',
        "ggml/CMakeLists.txt": "  option( GGML_BACKEND_DL \"doc\" OFF)\n# option(GGML_CUDA_NCCL \"x\" ON)\n",
        "common/common.cpp": '{"--flash-attn"}\n',
    })
    r = F.check_tree(tmp_path, ["device-select", "backend-dl", "cuda-nccl", "fit", "flash-attn", "mtp", "mtmd"])
    assert set(r.present) == {"device-select", "backend-dl", "flash-attn"}
    assert r.missing == ("cuda-nccl", "fit", "mtp", "mtmd")
    # a commented-out option() is not an option
    assert r.reasons["cuda-nccl"] == "ggml/CMakeLists.txt does not declare option(GGML_CUDA_NCCL)"
    assert r.reasons["fit"] == "common/arg.cpp does not contain '\"--fit\"'"
    assert r.reasons["mtp"] == "no common/speculative.cpp"
    # the second alternative file is used when the first lacks the text
    assert r.present["flash-attn"] == "common/common.cpp contains '\"--flash-attn\"'"
    assert "mtmd" in r.missing_text() and "no tools/mtmd/mtmd.h or" in r.missing_text()


def test_all_detectors_must_hold(tmp_path):
    write(tmp_path, {"common/arg.cpp": '{"--list-devices"},\n'})  # --device missing
    r = F.check_tree(tmp_path, ["device-select"])
    assert r.missing == ("device-select",)
    assert r.reasons["device-select"] == "common/arg.cpp does not contain '\"--device\"'"


def test_cmake_dependent_option_counts(tmp_path):
    write(tmp_path, {"ggml/CMakeLists.txt": 'cmake_dependent_option(GGML_CPU_ALL_VARIANTS "x" OFF "A" OFF)\n'
                                            'option(GGML_CUDA_NCCLX "not the same" ON)\n'})
    r = F.check_tree(tmp_path, ["cpu-all-variants", "cuda-nccl"])
    assert list(r.present) == ["cpu-all-variants"] and r.missing == ("cuda-nccl",)


def test_loader_cwd_regex_matches_every_known_form(tmp_path):
    """The forms the loader's working-directory search has had upstream (see docs/lab/2026-11-29-features.md)."""
    forms = ['std::vector<std::string> search_paths = { "./", get_executable_path() };',
             'search_paths.push_back("./");',
             'search_paths.push_back(L"." + path_separator());',
             'search_paths.push_back(fs::current_path());',
             'const fs::path cwd = fs::current_path(cwd_ec);\n    search_paths.push_back(cwd);']
    for text in forms:
        write(tmp_path, {"ggml/src/ggml-backend-reg.cpp": text + "\n"})
        assert F.check_tree(tmp_path, ["backend-loader-cwd"]).ok, text
    write(tmp_path, {"ggml/src/ggml-backend-reg.cpp": "search_paths.push_back(get_executable_path());\n"})
    assert not F.check_tree(tmp_path, ["backend-loader-cwd"]).ok


def test_unknown_feature_names_the_valid_ones(tmp_path):
    with pytest.raises(AssembleError) as err:
        F.check_tree(tmp_path, ["backend-dl", "teleport"])
    assert "teleport" in err.value.what and "device-select" in err.value.fix


def test_missing_tree_is_refused(tmp_path):
    with pytest.raises(AssembleError, match="does not exist"):
        F.check_tree(tmp_path / "nope", ["backend-dl"])


def test_require_stops_with_missing_features_named(tmp_path):
    recipe = parse_recipe(tmp_path / "r.toml", '''name = "r"
description = "d"
backends = ["cpu"]
[pin]
sha = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
features = ["device-select", "backend-dl", "override-tensor"]
[[pin.mirrors]]
kind = "git"
url = "https://example.org/llama.cpp.git"
''')
    write(tmp_path / "src", {"common/arg.cpp": '{"--list-devices"},\n{"-dev", "--device"},\n'})
    with pytest.raises(AssembleError) as err:
        F.require(tmp_path / "src", recipe)
    e = err.value
    assert e.code == 2
    assert "backend-dl" in e.what and "override-tensor" in e.what and "device-select" not in e.what
    assert "assemble pin" in e.fix and "--earliest" in e.fix
    assert "cpu-all-variants" in e.what and "[cpu] variants" in e.fix    # implied by the default, and said so
    write(tmp_path / "src", {"ggml/CMakeLists.txt": "option(GGML_BACKEND_DL x OFF)\noption(GGML_CPU_ALL_VARIANTS y OFF)\n",
                             "common/arg.cpp": '{"--list-devices"},{"--device"},{"--override-tensor"}\n'})
    assert F.require(tmp_path / "src", recipe).ok


# --- registry validation -------------------------------------------------------------

@pytest.mark.parametrize("text,message", [
    ('[[feature]]\nname = "x"\ndescription = "d"\ndetect = [{ file = "a", regex = "(" }]\n', "invalid regular"),
    ('[[feature]]\nname = "x"\ndescription = "d"\ndetect = [{ file = "a", grep = "b" }]\n', "unknown detector"),
    ('[[feature]]\nname = "x"\ndescription = "d"\ndetect = [{ file = "a", contains = "b", regex = "c" }]\n',
     "more than one check"),
    ('[[feature]]\nname = "x"\ndescription = "d"\ndetect = []\n', "at least one detector"),
    ('[[feature]]\nname = "X Y"\ndescription = "d"\ndetect = [{ file = "a" }]\n', "invalid feature name"),
    (('[[feature]]\nname = "x"\ndescription = "d"\ndetect = [{ file = "a" }]\n'
      '[[feature]]\nname = "x"\ndescription = "d"\ndetect = [{ file = "a" }]\n'), "defined twice"),
    ('[[feature]]\nname = "x"\ndetect = [{ file = "a" }]\n', "needs a description"),
    ('[[feature]]\nname = "x"\ndescription = "d"\ndetect = [{ contains = "a" }]\n', "needs a path"),
    ('', "defines no feature"),
])
def test_registry_errors_name_the_key(tmp_path, text, message):
    path = tmp_path / "features.toml"
    with pytest.raises(AssembleError) as err:
        F.parse_registry(path, text)
    assert message in err.value.what and str(path) in err.value.where


# --- the same detectors on git commits ----------------------------------------------------

def _commit_tree(repo: Path, files: dict[str, str], message: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@e", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@e")
    write(repo, files)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", message], cwd=repo, check=True, env=env)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_commit_and_directory_agree(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    first = _commit_tree(repo, {"common/arg.cpp": '{"--fit"}\n', "tools/llava/mtmd.h": "x\n"}, "one")
    second = _commit_tree(repo, {"common/arg.cpp": '{"--jinja"}\n', "ggml/CMakeLists.txt":
                                 "option(GGML_HIP_RCCL x OFF)\n"}, "two")
    names = list(F.registry())
    with GitRepo(repo) as r:
        cache: dict = {}
        at_second = F.check_commit(r, second, names, cache)
        assert at_second == F.check_tree(repo, names)
        assert set(at_second.present) == {"jinja", "hip-rccl", "mtmd"}
        at_first = F.check_commit(r, first, names, cache)
        assert set(at_first.present) == {"fit", "mtmd"}
        assert at_first.present["mtmd"] == "tools/llava/mtmd.h exists"
        # content checks were cached by blob id: the same blob is never read twice
        before = len(cache)
        F.check_commit(r, first, names, cache)
        assert len(cache) == before


def test_git_reader_reads_objects_and_missing_paths(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    sha = _commit_tree(repo, {"a/b/c.txt": "hello\n", "a/d.txt": "x"}, "one")
    with GitRepo(repo) as r:
        entry = r.entry(sha, "a/b/c.txt")
        assert r.read(entry.oid) == ("blob", b"hello\n")
        assert r.entry(sha, "a/b").is_tree
        assert r.entry(sha, "a/b/c.txt/deeper") is None
        assert r.entry(sha, "a/nope") is None
        assert r.resolve("HEAD") == sha
        with pytest.raises(AssembleError, match="missing"):
            r.read("0" * 40)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(AssembleError, match="not a git repository"):
        GitRepo(plain)


def test_fattn_rule_both_forms_and_patched(tmp_path):
    older = "    const bool mma_faster_for_rtx4000 = Q->ne[3] > 1 || (gqa_ratio > 4 && K->ne[1] >= 8192);\n"
    newer = ("if (cc >= GGML_CUDA_CC_ADA_LOVELACE && Q->ne[1] == 1 &&\n"
             "        !(gqa_ratio > 4 && (Q->ne[0] >= 256 || K->ne[1] >= 8192))) {\n")
    patched = ("const bool long_kv_mma = K->ne[1] >= 8192 && cc < GGML_CUDA_CC_BLACKWELL;\n"
               "if (cc >= GGML_CUDA_CC_ADA_LOVELACE && Q->ne[1] == 1 &&\n"
               "        !(gqa_ratio > 4 && (Q->ne[0] >= 256 || long_kv_mma))) {\n")
    for text, present in ((older, True), (newer, True), (patched, False)):
        write(tmp_path, {"ggml/src/ggml-cuda/fattn.cu": text})
        assert F.check_tree(tmp_path, ["fattn-ada-long-kv-mma"]).ok is present, text
