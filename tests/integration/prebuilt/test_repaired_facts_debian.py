"""What a repair of Debian's real packages records of them (issue 49 item 7; slow tier: a cold cache
downloads them): llama_cpp.source.version is llama.cpp's 0.7.0 (libllama.so.0.7.0), not ggml's
0.27.0; each file, licence text and licence record is named by its .deb and member, never by the
scratch folder the packages were unpacked into; gpu_targets.hip is what Debian's HIP module
carries code for (ten gfx archs), read from its offload bundles."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from builder.check.static import hip_archs
from builder.config.targets import GfxTarget
from builder.prebuilt.request import RepairRequest
from builder.flows.platforms.linux import _gpu_targets
from builder.paths import SCRATCH
from tests.support.common import TEST_CACHE, assemble
from tests.support.debianllama import FACTS, HIP, debian_llama_debs
from tests.support.tiers import downloads

# where a repair works: its scratch folder in the cache (wherever the cache is), or repair-... in the
# system's temporary folder when the cache is not writable, and its unpack folders
SCRATCH_MARKS = (str(Path(os.environ.get("ASSEMBLE_CACHE", TEST_CACHE / "cache")) / SCRATCH), "input-0", "input-1",
                 ".unpack-", "repair-")


def debs_with_hip() -> dict[str, Path]:
    return debian_llama_debs(with_hip=True)


# cold: Debian's llama.cpp/ggml .debs with the HIP module (126 MB, under a minute, estimated); warm 0 s
@pytest.fixture(scope="module")
@downloads(warm=debs_with_hip)
def debs() -> dict[str, Path]:
    return debs_with_hip()


def test_the_version_is_llama_cpps_and_every_origin_names_its_deb(debs, tmp_path):
    names = [p.name for n, p in debs.items() if n in ("libggml0", "libllama0", "llama.cpp-tools")]
    for p in debs.values():
        (tmp_path / p.name).symlink_to(p)
    out = tmp_path / "rt"
    proc = assemble("repair", *names, "--name", "debian", "--out", str(out), "--verify-static",
                    "--accept-loader-risk", "a test", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["llama_cpp"]["source"]["version"] == FACTS.llama_version == "0.7.0"
    assert m["inputs"][0]["version"] == FACTS.ggml_version
    text = json.dumps({k: m[k] for k in ("files", "licenses", "left_out")})
    assert not [mark for mark in SCRATCH_MARKS if mark in text]
    origins = {f["path"]: f["origin"] for f in m["files"]}
    assert origins["lib/libllama.so.0.7.0"].endswith(".deb:usr/lib/x86_64-linux-gnu/libllama.so.0.7.0")


def test_gpu_targets_hip_are_the_hip_modules_ten_archs(debs, tmp_path):
    from scripts.support.vendorlibs import extract_deb
    member = "usr/lib/x86_64-linux-gnu/ggml/backends0/libggml-hip.so"
    extract_deb(debs[HIP], tmp_path / "deb", lambda rel: rel == member)
    (tmp_path / "rt" / "bin").mkdir(parents=True)
    (tmp_path / "deb" / member).rename(tmp_path / "rt" / "bin" / "libggml-hip.so")
    targets = _gpu_targets(tmp_path / "rt", RepairRequest((), "t", tmp_path / "out"))
    archs, compressed = hip_archs(tmp_path / "rt" / "bin" / "libggml-hip.so")
    assert len(targets.hip) == 10 and set(targets.hip) == archs and not compressed
    assert all(t.startswith("gfx") for t in targets.hip) and targets.cuda == ()
    # --hip-target narrows them to the card asked for (its ROCm data is pruned to it)
    narrowed = _gpu_targets(tmp_path / "rt", RepairRequest((), "t", tmp_path / "out", hip_targets=(GfxTarget.parse("gfx1100"),)))
    assert narrowed.hip == ("gfx1100",)
