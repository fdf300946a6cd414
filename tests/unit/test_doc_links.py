"""Every link between the docs, and every docs/ path the code, scripts and tests name, leads to a file
that exists: a moved or renamed page cannot leave a dead reference behind."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
_DOCS_PATH = re.compile(r"(?<![\w/.-])docs/[A-Za-z0-9_./-]+\.(?:md|json)\b")

# Targets another branch of the same issue adds; each entry must name that branch. The test fails once
# the target exists too, so the entry is removed at the merge instead of rotting here.
PENDING = {"docs/guide/deploy.md": "branch deploy (issue 30: the `assemble deploy` guide)"}


def _markdown_files():
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _dead_links():
    dead = []
    for page in _markdown_files():
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)       # code blocks hold commands, not links
        for target in _MD_LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                dead.append((str(page.relative_to(ROOT)), target, str(path.relative_to(ROOT))))
    return dead


def test_every_relative_link_in_the_readme_and_the_docs_resolves():
    dead = [d for d in _dead_links() if d[2] not in PENDING]
    assert not dead, dead


def test_the_pending_targets_are_still_pending():
    for target, where in PENDING.items():
        assert not (ROOT / target).exists(), f"{target} exists now ({where}): remove it from PENDING"
    assert {d[2] for d in _dead_links()} <= set(PENDING)


def test_every_docs_path_named_in_code_scripts_tests_and_docs_exists():
    sources = [*ROOT.glob("builder/**/*.py"), *ROOT.glob("builder/data/*.toml"), *ROOT.glob("tests/**/*.py"),
               *(p for p in (ROOT / "scripts").iterdir() if p.is_file()), *ROOT.glob("patches/*"),
               *ROOT.glob(".ci/*"), *_markdown_files()]
    missing = sorted({(str(src.relative_to(ROOT)), name) for src in sources if src.is_file()
                      if src != Path(__file__).resolve()            # this file's own examples are dead on purpose
                      for name in _DOCS_PATH.findall(src.read_text(errors="replace"))
                      if not (ROOT / name).exists() and name not in PENDING})
    assert not missing, missing


def test_the_checker_finds_a_dead_link(tmp_path):
    """The pattern the first test relies on: a link to a moved page is found, a URL is not a path."""
    text = "see [the rocm page](../rocm.md) and [upstream](https://github.com/ggml-org/llama.cpp)"
    assert _MD_LINK.findall(text) == ["../rocm.md", "https://github.com/ggml-org/llama.cpp"]
    assert _DOCS_PATH.findall("docs/rocm.md, (docs/lab/2026-11-29-rocm.md) and mydocs/x.md") == \
        ["docs/rocm.md", "docs/lab/2026-11-29-rocm.md"]
