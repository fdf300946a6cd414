"""A repaired runtime's manifest states what its files say (issue 49 item 7): llama_cpp.source.version
is llama.cpp's own version (libllama's), never ggml's; gpu_targets.hip is read from the HIP module's
code objects (it was empty for a module carrying ten gfx targets); licence texts are named by their
input and member, never by the deleted scratch folder they were unpacked into (a Windows repair
recorded `.../tmp/repair-.../input-0/LICENSE` and `<zip>: input-0/`). verify's own re-derivation
of the facts (the 'manifest facts' check) passes each.

On real ELF files compiled here (test_discover.make_build; a HIP module whose .hip_fatbin holds
clang offload bundles, as hipcc writes them) and PE files written here (pefiles.py)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from builder.check.static import hip_archs
from tests.support.common import assemble
from tests.unit.prebuilt.pefiles import upstream_windows_zip
from tests.unit.prebuilt.test_discover import _cc, make_build

ACCEPT = ("--accept-loader-risk", "a test: no ggml installed here")
STATIC = ("--verify-static", *ACCEPT)
SCRATCH_MARKS = ("/tmp/", "input-0", "input-1", ".unpack-", "repair-")     # the unpack folders' names
HOST = b"host-x86_64-unknown-linux-gnu-"
GFX = (b"hipv4-amdgcn-amd-amdhsa--gfx1100", b"hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-",
       b"hipv4-amdgcn-amd-amdhsa--gfx942")


def _bundle(ids: tuple[bytes, ...], code: int = 256) -> bytes:
    """One clang offload bundle: header, entry table (offset, size, id), then each entry's code."""
    header_len = 24 + 8 + sum(24 + len(i) for i in ids)
    table, body, at = b"", b"", header_len
    for ident in ids:
        table += struct.pack("<QQQ", at, code, len(ident)) + ident
        body += bytes([0x5A]) * code
        at += code
    return b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(ids)) + table + body


def hip_module(path: Path, lib: Path) -> Path:
    """bin/libggml-hip.so: a ggml module (it imports ggml_init) whose .hip_fatbin holds code for GFX."""
    fat = _bundle((HOST, *GFX))
    array = ", ".join(str(b) for b in fat)
    return _cc(path, f'__attribute__((section(".hip_fatbin"), used, aligned(4096))) const unsigned char fat[] = '
               f"{{{array}}};\nint ggml_init(void);\nint ggml_backend_score(void) {{ return ggml_init(); }}\n",
               "-shared", f"-L{lib}", "-l:libggml-base.so.0.9.4")


def _repair(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "rt"
    proc = assemble("repair", *args, "--name", "t", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "manifest facts" not in proc.stderr or "manifest facts             PASS" in proc.stderr, proc.stderr
    return json.loads((out / "manifest.json").read_text())


def test_the_llama_cpp_version_is_libllamas_not_ggmls(tmp_path):
    root = make_build(tmp_path / "b")                     # libggml-base.so.0.9.4, libllama.so.0.0.1
    m = _repair(tmp_path, str(root), *STATIC)
    assert m["llama_cpp"]["source"]["version"] == "0.0.1"
    assert m["inputs"][0]["version"] == "0.9.4"           # the input's ggml base: ggml's own version


def test_gpu_targets_hip_is_read_from_the_modules_code_objects(tmp_path):
    root = make_build(tmp_path / "b")
    module = hip_module(root / "bin" / "libggml-hip.so", root / "bin")
    assert hip_archs(module) == ({"gfx1100", "gfx90a", "gfx942"}, False)
    m = _repair(tmp_path, str(root), *STATIC)
    assert m["gpu_targets"] == {"cuda": [], "hip": ["gfx1100", "gfx90a", "gfx942"]}
    assert "hip" in m["recipe"]["backends"]
    verified = assemble("verify", str(tmp_path / "rt"), "--static", "--json")
    assert verified.returncode == 0, verified.stdout


def test_a_runtime_without_gpu_modules_states_no_targets(tmp_path):
    m = _repair(tmp_path, str(make_build(tmp_path / "b")), *STATIC)
    assert m["gpu_targets"] == {"cuda": [], "hip": []}


def test_windows_licence_texts_are_named_by_their_zip_and_member(tmp_path):
    z = upstream_windows_zip(tmp_path)
    m = _repair(tmp_path, z.name, *ACCEPT)
    text = json.dumps(m)
    assert not [mark for mark in SCRATCH_MARKS if mark in text], text
    (lic,) = [f for f in m["files"] if f["role"] == "license"]
    assert lic["origin"] == f"{z.name}:LICENSE"
    assert m["licenses"][0]["source"] == f"{z.name}:LICENSE"


def test_a_linux_archives_licence_source_names_the_member(tmp_path):
    import tarfile
    root = make_build(tmp_path / "build", flat=True)
    (root / "LICENSE").write_text("MIT License\n\nCopyright (c) 2023-2026 The ggml authors\n")
    archive = tmp_path / "llama-b7416-bin-ubuntu-x64.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root, arcname="build")
    m = _repair(tmp_path, archive.name, *STATIC)
    assert not [mark for mark in SCRATCH_MARKS if mark in json.dumps(m)]
    (llama,) = [r for r in m["licenses"] if r["component"] == "llama.cpp"]
    assert llama["source"] == f"{archive.name}:build/LICENSE"
