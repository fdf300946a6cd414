"""config.upstream: the build-number and toolkit-line grammars every name reads."""

from __future__ import annotations

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


@pytest.mark.parametrize("cuda, rocm, expect", [
    ("12.8", None, "cuda12.8"), ("12.8.93", None, "cuda12.8"), (None, "6.4", "rocm6.4"),
    ("13.0", "6.4.1", "rocm6.4-cuda13.0"), (None, None, None), ("unknown", None, None),
])
def test_toolkit_line(cuda, rocm, expect):
    assert toolkit_line(cuda, rocm) == expect
