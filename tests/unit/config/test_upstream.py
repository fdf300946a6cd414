"""config.upstream: the build-number and toolkit-line grammars every name reads."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from builder.config.upstream import BUILD_RE, build_from_describe, build_in_name, toolkit_line


def test_build_tag_in_a_file_name():
    assert build_in_name("llama-b7416-bin-ubuntu-x64.zip") == "b7416"
    assert build_in_name("llama-b7416-bin-ubuntu-vulkan-x64.tar.gz") == "b7416"
    assert build_in_name("b123") == "b123"
    assert build_in_name("libggml0_0.27.0-1_amd64.deb") is None
    assert build_in_name("sub123.zip") is None and build_in_name("llama-cpp.zip") is None


@pytest.mark.parametrize("tag, distance, expect", [
    ("b7416", 0, "b7416"), ("b7416", 3, "b7416+3"), ("v1.2", 0, None), ("b7416", -1, None), ("b", 0, None),
    ("b12345678", 0, None),
])
def test_what_pin_records_for_the_nearest_tag(tag, distance, expect):
    assert build_from_describe(tag, distance) == expect
    if expect:
        assert BUILD_RE.fullmatch(expect)


# --- only names upstream publishes (UPSTREAM_LINUX_ARCHIVE) ------------------------------------

_LINUX_NAME = re.compile(r"(?:cudart-)?llama-b(?:\d+|N+)-bin-ubuntu-[\w.-]*?x64(?:\.tar\.gz|\.zip)")


def _concrete(name: str) -> str:
    return re.sub(r"bN+", "b1234", name)


def test_every_linux_release_name_we_print_or_write_is_one_upstream_publishes():
    """repair --help (the real CLI), the code's comments and docs/ name upstream's Linux archives
    only as upstream's release workflow writes them."""
    from builder.config.upstream import UPSTREAM_LINUX_ARCHIVE
    root = Path(__file__).resolve().parents[3]
    help_text = subprocess.run([sys.executable, "-m", "builder", "repair", "--help"], capture_output=True, text=True,
                               cwd=root, check=True).stdout
    texts = {"repair --help": help_text}
    for path in [*root.glob("builder/**/*.py"), *root.glob("docs/**/*.md")]:
        texts[str(path.relative_to(root))] = path.read_text()
    names = {(where, n) for where, text in texts.items() for n in _LINUX_NAME.findall(text)}
    assert any(where == "repair --help" and "cuda-12.8" in n for where, n in names)
    wrong = [(where, n) for where, n in names if not UPSTREAM_LINUX_ARCHIVE.fullmatch(_concrete(n))]
    assert not wrong, wrong


@pytest.mark.parametrize("name, published", [
    ("llama-b7416-bin-ubuntu-x64.tar.gz", True), ("llama-b7416-bin-ubuntu-vulkan-x64.tar.gz", True),
    ("llama-b7416-bin-ubuntu-cuda-12.8-x64.tar.gz", True), ("cudart-llama-b7416-bin-ubuntu-cuda-13.4-x64.tar.gz", True),
    ("llama-b7416-bin-ubuntu-x64.zip", True),                       # older releases zipped cpu and vulkan
    ("llama-b7416-bin-ubuntu-cuda-12.8-x64.zip", False),            # never published as a zip
    ("llama-b7416-bin-ubuntu-cuda12.8-x64.tar.gz", False),          # upstream writes cuda-12.8
])
def test_the_upstream_linux_archive_grammar(name, published):
    from builder.config.upstream import UPSTREAM_LINUX_ARCHIVE
    assert bool(UPSTREAM_LINUX_ARCHIVE.fullmatch(name)) is published


@pytest.mark.parametrize("cuda, rocm, expect", [
    ("12.8", None, "cuda12.8"), ("12.8.93", None, "cuda12.8"), (None, "6.4", "rocm6.4"),
    ("13.0", "6.4.1", "rocm6.4-cuda13.0"), (None, None, None), ("unknown", None, None),
])
def test_toolkit_line(cuda, rocm, expect):
    assert toolkit_line(cuda, rocm) == expect
