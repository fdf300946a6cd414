"""assemble repair through the real CLI on inputs compiled here (tests/unit/prebuilt/test_discover.py):
refusals come in one line before anything is copied; --dry-run says what it would do and writes nothing."""

from __future__ import annotations

import pytest

from tests.support.common import assemble, one_error_line
from tests.unit.prebuilt.test_discover import make_build


def test_inputs_with_different_ggml_bases_are_refused_naming_both(tmp_path):
    a = make_build(tmp_path / "build-a")
    b = make_build(tmp_path / "build-b", extra_base_symbol="ggml_new_api")
    proc = assemble("repair", str(a), str(b), "--out", str(tmp_path / "out"))
    line = one_error_line(proc, 2, [str(a), str(b), "different ggml bases", "exported interfaces differ"])
    assert "one build" in line and not (tmp_path / "out").exists()


def test_a_module_from_another_base_is_refused(tmp_path):
    a = make_build(tmp_path / "a")
    (a / "bin" / "libggml-vulkan.so").unlink()                 # a has no vulkan: the other input adds it
    odd = make_build(tmp_path / "odd", module_needs="ggml_new_api")   # same base exports, module wants more
    proc = assemble("repair", str(a), str(odd), "--out", str(tmp_path / "out"))
    one_error_line(proc, 2, ["libggml-vulkan.so", str(odd), "another ggml base", "ggml_new_api"])
    assert not (tmp_path / "out").exists()


def test_dry_run_says_what_it_would_carry_and_writes_nothing(tmp_path):
    root = make_build(tmp_path / "build-dual", backend_dir="/usr/lib/x86_64-linux-gnu/ggml/backends0")
    proc = assemble("repair", str(root), "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for words in (f"input {root} (folder)", "executables  llama-server", "libggml-cpu-x64.so", "left out     "
                  "bin/libggml-extra.so", "would carry", "bin/llama-server", "lib/libggml-base.so.0.9.4", "left to the host",
                  "libc.so.6", "also searches /usr/lib/x86_64-linux-gnu/ggml/backends0"):
        assert words in out, words
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build-dual"]       # nothing written


@pytest.mark.parametrize("args,words", [
    (["/nonexistent/build"], ["/nonexistent/build"]),
    (["--name", "Bad Name", "{root}"], ["--name", "not a runtime name"]),
    (["{root}", "--accept-loader-risk", " "], ["--accept-loader-risk", "reason"]),
    (["{root}", "--target", "llama-cli"], ["llama-cli", "llama-server"]),
])
def test_bad_input_is_one_line(tmp_path, args, words):
    root = make_build(tmp_path / "b")
    proc = assemble("repair", *[a.replace("{root}", str(root)) for a in args], "--out", str(tmp_path / "out"))
    one_error_line(proc, 2, words)
