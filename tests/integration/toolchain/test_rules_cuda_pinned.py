"""The CUDA patch on a copy of the pinned tree's file (slow tier: the sdist)."""

from __future__ import annotations

import os
import shutil
import subprocess

from builder.toolchain import rules
from tests.support.common import REPO


def test_patch_applies_to_a_copy_of_the_pinned_file(tmp_path, llama_tree):
    """`git apply` on a copy (never the cache): Blackwell keeps the vector kernel past 8192 KV."""
    src = llama_tree / "ggml" / "src" / "ggml-cuda" / "fattn.cu"
    tree = tmp_path / "tree"
    dest = tree / "ggml" / "src" / "ggml-cuda" / "fattn.cu"
    dest.parent.mkdir(parents=True)
    shutil.copy2(src, dest)
    patch = REPO / "patches" / f"{rules.BLACKWELL_PATCH}.patch"
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tmp_path))
    run = lambda *a: subprocess.run(["git", "apply", *a, str(patch)], cwd=tree, env=env,  # noqa: E731
                                    capture_output=True, text=True)
    assert run("--check").returncode == 0, run("--check").stderr
    assert run().returncode == 0
    text = dest.read_text()
    assert "K->ne[1] >= 8192 && cc < GGML_CUDA_CC_BLACKWELL" in text
    assert "!(gqa_ratio > 4 && (Q->ne[0] >= 256 || long_kv_mma))" in text
    assert src.read_text() != text  # the cache copy is untouched
    assert run("-R", "--check").returncode == 0
