"""Feature detection on the pinned llama.cpp tree (slow tier: the sdist)."""

from __future__ import annotations

from builder.source import features as F


def test_pinned_tree_has_every_feature(llama_tree):
    tree = llama_tree
    report = F.check_tree(tree, list(F.registry()))
    assert report.missing == ()
    assert report.present["backend-dl"] == "ggml/CMakeLists.txt declares option(GGML_BACKEND_DL)"
    assert report.present["mtmd"] == "tools/mtmd/mtmd.h exists"
    assert report.present["flash-attn"] == "common/arg.cpp contains '\"--flash-attn\"'"
