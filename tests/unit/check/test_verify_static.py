"""verify --static and --hip-target: the glibc floor, and the archs libggml-hip.so carries code for;
the file-level integrity checks on small folders; a folder that is no runtime refused without a walk."""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

import pytest

from builder.check import integrity
from builder.check import static as staticcheck
from builder.check.verify import FAIL, PASS, SKIP, WARN
from builder.digest import sha256_file
from tests.support.common import assemble
from tests.support.manifests import write_raw


@pytest.mark.parametrize("need, have, here, status", [
    ("2.36", "2.36", True, PASS), ("2.34", "2.39", True, PASS), ("2.38", "2.36", True, FAIL),
    ("2.38", "2.36", False, WARN), ("2.4", "2.36", True, PASS), ("2.38", None, True, SKIP), (None, "2.36", True, PASS),
])
def test_glibc_floor(need, have, here, status):
    check = staticcheck.glibc_check(need, have, here)
    assert check.status == status, check
    if status in (FAIL, WARN):
        assert f"needs glibc {need}, this host has {have}" in check.reason and check.hint


def _runtime_with_hip_module(tmp_path, payload: bytes):
    (tmp_path / "bin").mkdir(parents=True)
    (tmp_path / "bin" / "libggml-hip.so").write_bytes(b"\x7fELF" + b"\0" * 64 + payload + b"\0" * 64)
    return tmp_path


def test_hip_code_for_the_target_passes_and_a_sibling_does_not(tmp_path):
    rt = _runtime_with_hip_module(tmp_path, b"__CLANG_OFFLOAD_BUNDLE__\0hipv4-amdgcn-amd-amdhsa--gfx1100\0"
                                            b"host-x86_64-unknown-linux-gnu-\0")
    assert staticcheck.hip_archs(rt / "bin" / "libggml-hip.so") == ({"gfx1100"}, False)
    [ok] = staticcheck.hip_code_checks(rt, ("gfx1100",))
    assert ok.status == PASS and "gfx1100" in ok.reason
    [bad] = staticcheck.hip_code_checks(rt, ("gfx1100", "gfx1101:xnack-"))
    assert bad.status == FAIL and "not for gfx1101" in bad.reason and "--hip-target gfx1101" in bad.hint


def _bundle(ids: list[bytes], code: int = 5000) -> bytes:
    """One clang offload bundle as .hip_fatbin holds it: header, entry table, then each entry's code."""
    header_len = 24 + 8 + sum(24 + len(i) for i in ids)
    table, body, at = b"", b"", header_len
    for ident in ids:
        table += struct.pack("<QQQ", at, code, len(ident)) + ident
        body += bytes([0x5A]) * code          # code bytes that never look like a header
        at += code
    return b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(ids)) + table + body


def _padded(*bundles: bytes) -> bytes:
    return b"".join(b + b"\0" * (-len(b) % 4096) for b in bundles)


def test_hip_bundles_are_walked_header_to_header_and_agree_with_the_scan(tmp_path):
    host = b"host-x86_64-unknown-linux-gnu-"
    two = _padded(_bundle([host, b"hipv4-amdgcn-amd-amdhsa--gfx1100", b"hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-"]),
                  _bundle([host, b"hipv4-amdgcn-amd-amdhsa--gfx1100", b"hipv4-amdgcn-amd-amdhsa--gfx942"]))
    # an id inside the code of a bundle the walk jumps over is not counted: the walk reads headers only
    hidden = two.replace(bytes([0x5A]) * 40, b"hipv4-amdgcn-amd-amdhsa--gfx1201" + bytes([0x5A]) * 8, 1)
    module = tmp_path / "m.so"
    module.write_bytes(hidden)
    with open(module, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        walked = staticcheck._walk_bundles(data, 0, len(data))
        scanned = staticcheck._scan_bundles(data)
    assert walked == ({"gfx1100", "gfx90a", "gfx942"}, False)
    assert scanned[0] == walked[0] | {"gfx1201"}, "the fallback scan sees every literal, headers or not"
    assert staticcheck.hip_archs(module) == walked

    # a compressed bundle after a plain one: the walk gives up and the scan reports it
    module.write_bytes(_padded(_bundle([host, b"hipv4-amdgcn-amd-amdhsa--gfx1100"])) + b"CCOB\x02\x00" + b"z" * 9000)
    assert staticcheck.hip_archs(module) == ({"gfx1100"}, True)
    # a bundle header that lies about its entries (offset past the end): the scan, not a crash
    module.write_bytes(b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<QQQQ", 1, 1 << 40, 10, 32)
                       + b"hipv4-amdgcn-amd-amdhsa--gfx1030" + b"\0" * 100)
    assert staticcheck.hip_archs(module) == ({"gfx1030"}, False)


def test_compressed_bundles_are_reported_not_run(tmp_path):
    rt = _runtime_with_hip_module(tmp_path, b"CCOB\x01\x00compressed")
    [check] = staticcheck.hip_code_checks(rt, ("gfx1100",))
    assert check.status == SKIP and "compressed" in check.reason


def test_no_hip_module_no_check(tmp_path):
    (tmp_path / "bin").mkdir()
    assert staticcheck.hip_code_checks(tmp_path, ("gfx1100",)) == []


# --- not a runtime: refused at once -------------------------------------------------------

def test_verify_of_the_root_folder_is_refused_without_walking_it(monkeypatch):
    from types import SimpleNamespace

    from builder.cli.commands import verify as command
    from builder.errors import AssembleError

    def no_walk(*args, **kwargs):
        raise AssertionError("verify walked the folder")
    monkeypatch.setattr(os, "walk", no_walk)
    monkeypatch.setattr(os, "scandir", no_walk)
    monkeypatch.setattr(Path, "rglob", no_walk)
    monkeypatch.setattr(Path, "iterdir", no_walk)
    args = SimpleNamespace(runtime="/", model=None, hip_target=[], cuda_arch=[], static=False, smoke=False, check_env=[], json=False)
    with pytest.raises(AssembleError) as err:
        command.run(args)
    assert err.value.code == 2 and "not a runtime folder: it has neither manifest.json nor bin/llama-server" \
        in err.value.line()


def test_verify_of_a_folder_that_is_no_runtime_exits_2_in_one_line(tmp_path):
    for folder in ("/", str(tmp_path)):     # that it walks nothing: the test above
        proc = assemble("verify", folder, "--static")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not a runtime folder" in proc.stderr


# --- integrity on small folders (builder/check/integrity.py) -------------------------------

def _folder(tmp_path, backends=("cpu",), own=()):
    """A runtime-shaped folder with a valid manifest listing what is in it."""
    rt = tmp_path / "rt"
    (rt / "bin").mkdir(parents=True)
    (rt / "lib").mkdir()
    for rel in ("bin/llama-server", "bin/libggml-cpu.so", *own):
        (rt / rel).write_bytes(b"\x7fELF stand-in\n")
        (rt / rel).chmod(0o755)
    files = [{"path": rel, "role": "own", "origin": "", "sha256": sha256_file(rt / rel), "size": (rt / rel).stat().st_size,
              "mode": 0o755} for rel in ("bin/llama-server", "bin/libggml-cpu.so", *own)]
    write_raw(rt, {"recipe": {"name": "t", "backends": list(backends)}, "llama_cpp": {"source": {"kind": "local"}},
                   "files": files})
    return rt


def test_a_clean_folder_has_no_integrity_problems(tmp_path):
    rt = _folder(tmp_path)
    assert integrity.problems(rt) == []
    assert {c.name: c.status for c in integrity.checks(rt, *integrity.load(rt), ("cpu",), ("cpu",))} == {
        "manifest hashes": PASS, "file modes": PASS, "symlinks": PASS, "module cpu": PASS, "unlisted modules": PASS}


def test_special_bits_on_folders(tmp_path):
    """Sticky or world-writable folders fail; setgid on a folder (inherited from a group-shared parent)
    changes only the group of new files and is left alone."""
    rt = _folder(tmp_path)
    (rt / "lib").chmod(0o2755)
    assert integrity.problems(rt) == []
    (rt / "lib").chmod(0o1755)
    assert integrity.problems(rt) == ["lib/ has the sticky bit (mode 1755): a runtime never needs it"]
    (rt / "lib").chmod(0o755)
    rt.chmod(0o777)
    try:
        assert integrity.problems(rt) == [("the runtime folder is world-writable (mode 0777): any user of the host "
                                           "could replace what the runtime runs")]
    finally:
        rt.chmod(0o755)


def test_a_link_that_leaves_through_another_link(tmp_path):
    rt = _folder(tmp_path)
    (rt / "lib" / "hop").symlink_to("../..")         # leaves by itself
    (rt / "lib" / "via").symlink_to("hop/etc")       # lexically inside lib/, really outside
    (rt / "lib" / "ok").symlink_to("../bin/llama-server")
    assert integrity.link_problems(rt, integrity.walk(rt)[0]) == ["lib/hop -> ../..: leads outside the runtime",
                                                                   "lib/via -> hop/etc: leads outside the runtime"]


def test_unlisted_modules(tmp_path):
    """A backend a recipe can list (cuda) must be listed; one no recipe can list (rpc, from a -D define)
    is ours when the manifest records the module as built by us."""
    rt = _folder(tmp_path, own=("bin/libggml-rpc.so",))
    assert integrity.problems(rt) == []
    (rt / "bin" / "libggml-vulkan.so").write_bytes(b"planted\n")
    assert ("bin/libggml-vulkan.so is a vulkan backend module, but the runtime lists cpu: ggml's loader would load "
            "it into llama-server") in integrity.problems(rt)
    rt = _folder(tmp_path / "two", backends=("vulkan", "cpu"))
    assert integrity.problems(rt) == [("no libggml-vulkan*.so in bin/ (ggml's loader looks next to the executable): "
                                       "its devices would silently vanish")]


def test_problems_name_every_fault_in_full(tmp_path):
    """package refuses on these lines: all of them, not the first few a table row shows."""
    rt = _folder(tmp_path)
    for i in range(6):
        (rt / "lib" / f"w{i}").write_bytes(b"x")
        (rt / "lib" / f"w{i}").chmod(0o666)
    found = integrity.problems(rt)
    assert sum("is world-writable" in p for p in found) == 6 and sum("not in the manifest" in p for p in found) == 6
    [modes] = [c for c in integrity.checks(rt, *integrity.load(rt), ("cpu",), ("cpu",)) if c.name == "file modes"]
    assert modes.status == FAIL and modes.reason.endswith("(+2 more)")
