"""What repair leaves out, on Debian's real packages (slow tier: a cold cache downloads them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.common import assemble, one_error_line
from tests.support.debianllama import debian_llama_debs
from tests.support.tiers import downloads
from tests.unit.prebuilt import test_left_out as quick_tier

STATIC, _repair = quick_tier.STATIC, quick_tier._repair
build, pristine = quick_tier.build, quick_tier.pristine       # fixtures shared with the quick tier


# cold: Debian's llama.cpp/ggml .debs without HIP/CUDA (10.9 MB, seconds), prefetched; warm 0 s
@pytest.fixture(scope="module")
@downloads(warm=debian_llama_debs)
def sid_debs() -> dict[str, Path]:
    return debian_llama_debs()


def test_debians_vulkan_package_given_as_a_second_input_merges(tmp_path, sid_debs):
    from scripts.support.vendorlibs import extract_deb
    first = tmp_path / "debian-cpu"
    for name in ("libggml0", "libllama0", "llama.cpp-tools"):
        extract_deb(sid_debs[name], first, lambda _: True)
    vulkan = str(sid_debs["libggml0-backend-vulkan"])
    dry = assemble("repair", str(first), vulkan, "--dry-run", *STATIC, cwd=tmp_path)   # as a real run here would
    assert dry.returncode == 0, dry.stderr
    for words in (f"input {vulkan} (debs): backend modules only", "contributes  vulkan", "bin/libggml-vulkan.so",
                  f"{first}/usr/libexec/x86_64-linux-gnu/ggml/test-gguf  (not a llama-* executable"):
        assert words in dry.stdout, words


def test_debians_vulkan_package_with_another_ggml_names_the_versions(tmp_path, build, sid_debs):
    (build / "bin" / "libggml-vulkan.so").unlink()
    vulkan = str(sid_debs["libggml0-backend-vulkan"])
    proc, _ = _repair(tmp_path, str(build), vulkan)
    one_error_line(proc, 2, [vulkan, "different ggml bases", "libggml-vulkan.so is of ggml 0.27.0",
                             "libggml0-backend-vulkan 0.27.0-1", "base is ggml 0.9.4"])
