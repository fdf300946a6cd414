"""Upstream's release names against the pinned llama.cpp tree (slow tier: the sdist)."""

from __future__ import annotations

import re


def test_the_grammar_covers_what_the_pinned_release_workflow_links(llama_tree):
    """The release body of the pinned tree's .github/workflows/release.yml links every Linux x64
    archive it publishes; each, with a tag put in, is a name the grammar accepts."""
    from builder.config.upstream import UPSTREAM_LINUX_ARCHIVE
    workflow = (llama_tree / ".github" / "workflows" / "release.yml").read_text()
    links = re.findall(r"/releases/download/\$\{\{ steps\.tag\.outputs\.name \}\}/([^)]*?bin-ubuntu-[^)]*?x64\.tar\.gz)\)",
                       workflow)
    assert len(links) >= 5, links
    for link in links:
        name = re.sub(r"\$\{\{ steps\.tag\.outputs\.name \}\}", "b1234", link)
        name = re.sub(r"\$\{\{ needs\.[\w-]+\.outputs\.openvino_version \}\}", "2025.4", name)
        assert UPSTREAM_LINUX_ARCHIVE.fullmatch(name), name
    assert any("cuda-12.8" in link for link in links)   # upstream does publish a Linux CUDA build
