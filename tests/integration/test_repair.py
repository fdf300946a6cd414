"""assemble repair on real prebuilt llama.cpp: the pinned tree built as upstream's Linux release
is (unpatched loader, BACKEND_DL, all CPU variants, RUNPATH $ORIGIN, one flat bin/), packed as
upstream packs it (a CPU archive and a Vulkan archive), repaired, merged into one runtime, moved
and serving on Mesa's lavapipe with an empty environment and decoys; and the plain CMake build
folder itself, repaired where it is."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from builder.runtime.manifest import Manifest
from tests.support.common import assemble
from tests.support.server import complete, decoy_folder, server

ACCEPT = "test host: no ggml packages installed, the service starts in an empty folder"
VK = {"GGML_VK_VISIBLE_DEVICES": "0"}


@pytest.fixture(scope="session")
def upstream_build(unpatched_runtime) -> Path:
    """The build folder of llama.cpp at the pin, configured like upstream's release: the loader
    unpatched, RUNPATH $ORIGIN on everything in bin/ (tests/conftest.py builds it once for this
    and test_e2e_cpu). A plain CMake build tree: read-only for tests."""
    return Path(json.loads((unpatched_runtime / "manifest.json").read_text())["units"][0]["build_dir"])


def _build_number(build_dir: Path) -> str:
    m = re.search(r"LLAMA_BUILD_NUMBER\s*=\s*(\d+)", (build_dir / "common" / "build-info.cpp").read_text())
    return f"b{m.group(1)}"


@pytest.fixture(scope="session")
def archives(upstream_build, llama_tree, tmp_path_factory) -> tuple[Path, Path]:
    """Packed as upstream's Linux release: build/bin/ with every file and llama.cpp's LICENSE in build/,
    one archive per backend (the CPU one as .tar.gz keeping links, the Vulkan one as .zip, which has
    none: links become copies)."""
    out = tmp_path_factory.mktemp("archives")
    b = _build_number(upstream_build)
    cpu, vulkan = out / f"llama-{b}-bin-ubuntu-x64.tar.gz", out / f"llama-{b}-bin-ubuntu-vulkan-x64.zip"
    files = sorted(p for p in (upstream_build / "bin").iterdir() if p.is_file() or p.is_symlink())
    with tarfile.open(cpu, "w:gz") as tar:
        for p in files:
            if p.name != "libggml-vulkan.so":
                tar.add(p, arcname=f"build/bin/{p.name}", recursive=False)
        tar.add(llama_tree / "LICENSE", arcname="build/LICENSE")
    with zipfile.ZipFile(vulkan, "w", zipfile.ZIP_DEFLATED) as z:
        for p in files:
            info = zipfile.ZipInfo(f"build/bin/{p.name}")
            info.external_attr = (p.stat().st_mode & 0o777 | 0o100000) << 16
            z.writestr(info, p.read_bytes())
        z.write(llama_tree / "LICENSE", "build/LICENSE")
    return cpu, vulkan


def test_an_upstream_archive_is_repaired_and_its_loader_truth_told(archives, tmp_path):
    cpu, _ = archives
    refused = assemble("repair", str(cpu), "--out", str(tmp_path / "rt"))
    assert refused.returncode == 1, refused.stderr
    assert "working-directory modules" in refused.stderr and "FAIL" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "rt").exists()     # nothing half-written
    proc = assemble("repair", str(cpu), "--out", str(tmp_path / "rt"), "--accept-loader-risk", ACCEPT)
    assert proc.returncode == 0, proc.stderr
    m = json.loads((tmp_path / "rt" / "manifest.json").read_text())
    assert m["loader"] == {"backend_dirs": [], "accepted_risk": ACCEPT}
    (inp,) = m["inputs"]
    assert inp["kind"] == "archive" and inp["sha256"] == hashlib.sha256(cpu.read_bytes()).hexdigest()
    assert inp["build"] == cpu.name.split("-")[1] and inp["version"] and inp["contributed"][0] == "cpu"
    assert m["recipe"]["backends"] == ["cpu"] and "llama-server" in m["recipe"]["targets"]
    assert (tmp_path / "rt" / "bin" / "libggml-cpu-x64.so").is_file() and (tmp_path / "rt" / "lib").is_dir()
    verify = assemble("verify", str(tmp_path / "rt"), "--json")
    checks = {c["name"]: c for c in json.loads(verify.stdout)["checks"]}
    assert verify.returncode == 0 and checks["working-directory modules"]["status"] == "warn"
    assert checks["RPATH of own files"]["status"] == "pass"          # $ORIGIN RUNPATH replaced by our DT_RPATH
    # the archive's LICENSE is kept, covering every file repair carried from it
    with tarfile.open(cpu) as tar:
        licence = tar.extractfile("build/LICENSE").read()
    assert (tmp_path / "rt" / "licenses" / "llama.cpp" / "LICENSE").read_bytes() == licence
    assert Manifest.load(tmp_path / "rt").unlicensed() == []


def test_two_upstream_archives_merge_into_one_runtime_that_serves_moved(archives, tmp_path):
    cpu, vulkan = archives
    out = tmp_path / "rt"
    proc = assemble("repair", str(cpu), str(vulkan), "--name", "upstream-cpu-vulkan", "--out", str(out),
                    "--accept-loader-risk", ACCEPT, "--check-env", "GGML_VK_VISIBLE_DEVICES=0")
    assert proc.returncode == 0, proc.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["recipe"]["name"] == "upstream-cpu-vulkan" and m["recipe"]["backends"] == ["cpu", "vulkan"]
    assert [i["contributed"] for i in m["inputs"]] == [["cpu"], ["vulkan"]]
    assert m["inputs"][0]["base"] == m["inputs"][1]["base"]          # one ggml base, proven the same
    moved = tmp_path / "elsewhere with space" / "rt"
    moved.parent.mkdir()
    shutil.move(out, moved)
    decoy = decoy_folder(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    with server(moved, _model(tmp_path), ["--device", "Vulkan0", "-ngl", "99"], {**VK, "LD_LIBRARY_PATH": str(decoy)},
                cwd) as (base, srv, _):
        body = complete(base, n=8)
        maps = Path(f"/proc/{srv.pid}/maps").read_text()
    assert body["tokens_predicted"] == 8
    assert str(moved / "bin" / "libggml-vulkan.so") in maps and str(decoy) not in maps


def _model(tmp_path: Path) -> Path:
    from builder.check.tinymodel import write_tiny_llama
    return write_tiny_llama(tmp_path / "tiny.gguf")


def test_a_plain_cmake_build_folder_is_repaired_where_it_is(upstream_build, tmp_path):
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (upstream_build / "bin").iterdir())
    # without --accept-loader-risk the real run fails its verify (the working-directory search): so does
    # the dry run, with the same exit status, after showing its plan (issue 49 item 7)
    dry = assemble("repair", str(upstream_build), "--dry-run")
    assert dry.returncode == 1 and "the repaired runtime (dry run) failed verification" in dry.stderr, dry.stderr
    for words in ("executables  ", "llama-server", "would carry", "lib/libggml-base.so", "left to the host",
                  "libc.so.6", "libvulkan.so.1",    # the unpatched loader's working-directory search, from its imports
                  "also searches the working directory (it imports std::filesystem::current_path)"):
        assert words in dry.stdout, words
    out = tmp_path / "from-build"
    proc = assemble("repair", str(upstream_build), "--out", str(out), "--accept-loader-risk", ACCEPT,
                    "--check-env", "GGML_VK_VISIBLE_DEVICES=0")
    assert proc.returncode == 0, proc.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["inputs"][0]["kind"] == "folder" and m["inputs"][0]["sha256"] is None
    assert m["inputs"][0]["build"] and m["recipe"]["backends"] == ["cpu", "vulkan"]
    # a build folder names its source tree (CMakeCache.txt): that tree's LICENSE is carried
    (llama,) = [r for r in m["licenses"] if r["component"] == "llama.cpp"]
    assert "licenses/llama.cpp/LICENSE" in llama["texts"] and "bin/llama-server" in llama["covers"]
    # read where it is: the build folder is exactly as it was
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (upstream_build / "bin").iterdir()) == before
