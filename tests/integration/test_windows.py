"""Windows runtimes from real Windows binaries: the pinned llama.cpp cross-built with mingw-w64 in
the sid chroot (CPU backend and the RPC backend as modules; Vulkan is not built: Debian ships no
Windows import library for vulkan-1.dll), packed like upstream's release zips, repaired, merged,
verified by reading the PE files, packaged as a reproducible zip, and run under Wine: the device
list and a real completion from another working directory, with a planted ggml-cpu-*.dll there.

Two ggml.dll builds of the same tree: upstream's loader (searches the working directory) and the
one assemble's backend-loader-no-cwd patch makes; verify tells them apart from their imports, and
Wine proves it by running both.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import zipfile
from pathlib import Path

import pytest

from builder.check.tinymodel import write_tiny_llama
from builder.windows.assemble import plan, read_part
from builder.windows.pe import read_pe
from builder.prebuilt.inputs import classify, unpack
from builder.runtime.manifest import Manifest
from tests.support.common import TEST_CACHE, assemble, one_error_line
from tests.support.server import complete
from tests.support.windows import (BUILD, PLANTED_MARK, WindowsInputs, cross_build, mingw_licences, mingw_runtime,
                                   pack, planted_dll, wine_output, wine_server)
from tests.support.tiers import compiles


ACCEPT = "test: the service starts in its own folder"


# cold: the mingw-w64 cross-build in the sid chroot, 354 s on 2 cores (docs/reference/windows.md), plus the chroot
# (tests/conftest.py, prefetched); 7 min 0 s from the test before to its first test in a cold .ci/run on a
# 2-core machine (2026-12-05, docs/lab/2026-12-05-cold-suite.md); warm: the kept build folders
# (tests/support/windows.build_folder) leave ninja nothing to do, under 7 s of setup where a temporary folder
# took 44 s (2-core dev machine, 2026-12-05)
@pytest.fixture(scope="module")
@compiles
def win(sid_chroot, llama_tree, tmp_path_factory) -> WindowsInputs:
    from builder.config.options import CliOptions, resolve
    from builder.config.recipe import load_recipe
    from builder.source import fetch, patches
    import os
    work = tmp_path_factory.mktemp("windows")
    ccache = TEST_CACHE / "ccache-mingw"
    bins = cross_build(sid_chroot, llama_tree, ("llama-server", "ggml-rpc"), "-DGGML_RPC=ON",
                       ccache=ccache)
    # the same tree as assemble patches it for a build with backend modules (backend-loader-no-cwd)
    old = os.environ.get("ASSEMBLE_CACHE")
    os.environ["ASSEMBLE_CACHE"] = str(TEST_CACHE / "cache")
    try:
        config = resolve(load_recipe("cpu"), CliOptions(), env={})
        tree = fetch.pinned_tree(config.recipe)
        prepared = patches.prepare(tree, config.recipe, patches.context_for(config, None))
    finally:
        os.environ.pop("ASSEMBLE_CACHE") if old is None else os.environ.__setitem__("ASSEMBLE_CACHE", old)
    assert "backend-loader-no-cwd" in [p.name for p in prepared.applied]
    patched = cross_build(sid_chroot, prepared.path, ("ggml",), ccache=ccache)
    # upstream's zips carry llama.cpp's LICENSE beside the executables
    own = sorted(p for p in bins.iterdir() if p.suffix in (".exe", ".dll") and p.name != "ggml-rpc.dll") + \
        [llama_tree / "LICENSE"]
    zips = work / "zips"
    cpu = pack(zips / f"llama-{BUILD}-bin-win-cpu-x64.zip", own)
    rpc = pack(zips / f"llama-{BUILD}-bin-win-rpc-x64.zip", own + [bins / "ggml-rpc.dll"])
    dlls = mingw_runtime(sid_chroot)
    runtime = pack(zips / "mingw-runtime-win-x64.zip", dlls + mingw_licences(sid_chroot, dlls, work / "licences"))
    patched_zip = pack(zips / "patched" / f"llama-{BUILD}-bin-win-cpu-x64.zip",
                       [patched / "ggml.dll" if p.name == "ggml.dll" else p for p in own])
    return WindowsInputs(cpu, rpc, runtime, patched_zip, bins, planted_dll(sid_chroot, work / "planted"))


def _repair(*args: str, cwd: Path | None = None):
    return assemble("repair", *args, cwd=cwd)


def test_pe_reader_and_closure_on_the_real_cross_built_files(win, tmp_path):
    server = read_pe(win.bins / "llama-server.exe")
    assert server.machine == "x64" and not server.dll
    assert {"libllama-server-impl.dll", "kernel32.dll"} <= {d.lower() for d in server.imports}
    base = read_pe(win.bins / "ggml-base.dll")
    assert base.dll and "ggml_init" in base.exports and "gguf_init_from_file" in base.exports
    rpc = read_pe(win.bins / "ggml-rpc.dll")
    assert rpc.imported_from("ggml-base.dll") and rpc.imported_from("ggml-base.dll") <= base.exports
    parts = [read_part(inp, unpack(inp, tmp_path / f"in{i}"))
             for i, inp in enumerate(classify([str(win.rpc_zip), str(win.runtime_zip)]))]
    p = plan(parts)
    carried = {c.name for c in p.carried}
    # exactly what the import tables reach from llama-server.exe and the two modules (OpenMP: ggml-cpu)
    assert carried == {"llama-server.exe", "libllama-server-impl.dll", "libllama-common.dll", "libllama.dll",
                       "libmtmd.dll", "ggml.dll", "ggml-base.dll", "ggml-cpu.dll", "ggml-rpc.dll", "libstdc++-6.dll",
                       "libgcc_s_seh-1.dll", "libwinpthread-1.dll", "libgomp-1.dll"}
    roles = {c.name: c.role for c in p.carried}
    assert roles["libstdc++-6.dll"] == "vendor" and roles["ggml-rpc.dll"] == "own"
    host = {h.name: h for h in p.host}
    assert host["kernel32.dll"].rule.kind == "system" and "llama-server.exe" in host["kernel32.dll"].needed_by
    assert "ws2_32.dll" in host and host["ws2_32.dll"].rule.reason
    assert all(h.rule.kind != "driver" for h in p.host)
    assert p.contributed == {str(win.rpc_zip): ["cpu", "rpc"]}


def test_repair_merges_the_zips_into_one_flat_verified_folder(win, tmp_path):
    out = tmp_path / "rt"
    done = _repair(str(win.patched_zip), str(win.rpc_zip), str(win.runtime_zip), "--name", "win-cpu-rpc",
                   "--out", str(out))
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in out.iterdir())
    assert "manifest.json" in names and "licenses" in names
    assert all(not p.is_dir() for p in out.iterdir() if p.name != "licenses")     # one flat folder, and its licences
    m = json.loads((out / "manifest.json").read_text())
    assert m["platform"] == "windows" and m["recipe"]["backends"] == ["cpu", "rpc"]
    assert m["llama_cpp"]["build"] == BUILD
    origins = {f["path"]: f["origin"] for f in m["files"]}
    # named by the zip as given and the member inside it, never the folder it was unpacked into
    assert origins["ggml-rpc.dll"].startswith(f"{win.rpc_zip.name}:") and origins["ggml-rpc.dll"].endswith("ggml-rpc.dll")
    assert origins["ggml.dll"].startswith(f"{win.patched_zip.name}:") and origins["ggml.dll"].endswith("ggml.dll")
    assert {f["path"] for f in m["files"] if f["role"] == "vendor"} == {"libstdc++-6.dll", "libgcc_s_seh-1.dll",
                                                                        "libwinpthread-1.dll", "libgomp-1.dll"}
    system = {s["soname"].lower(): s for s in m["system_libs"]}
    assert system["kernel32.dll"]["reason"].startswith("system: ") and system["kernel32.dll"]["needed_by"]
    for f in m["files"]:
        assert hashlib.sha256((out / f["path"]).read_bytes()).hexdigest() == f["sha256"]
    verified = assemble("verify", str(out))
    assert verified.returncode == 0, verified.stderr
    for check in ("manifest hashes", "architecture", "imports", "driver DLLs", "backend modules"):
        assert any(line.split()[0:len(check.split())] == check.split() and "PASS" in line
                   for line in verified.stderr.splitlines()), (check, verified.stderr)
    assert "module search" in verified.stderr and "searches only the executable's folder" in verified.stderr
    # the default output name says what it is
    named = _repair(str(win.patched_zip), str(win.runtime_zip), "--name", "win-cpu", cwd=tmp_path)
    assert named.returncode == 0, named.stderr
    assert (tmp_path / "runtime-win-cpu-windows-x64" / "manifest.json").is_file()


def test_upstreams_loader_is_refused_unless_accepted_and_the_patched_one_passes(win, tmp_path):
    refused = _repair(str(win.cpu_zip), str(win.runtime_zip), "--out", str(tmp_path / "rt"))
    assert refused.returncode == 1, refused.stderr
    assert "module search" in refused.stderr and "working directory" in refused.stderr and "FAIL" in refused.stderr
    assert not (tmp_path / "rt").exists() and "Traceback" not in refused.stderr
    accepted = _repair(str(win.cpu_zip), str(win.runtime_zip), "--out", str(tmp_path / "rt"),
                       "--accept-loader-risk", ACCEPT)
    assert accepted.returncode == 0, accepted.stderr
    assert "WARN" in accepted.stderr and ACCEPT in accepted.stderr
    assert json.loads((tmp_path / "rt" / "manifest.json").read_text())["loader"]["accepted_risk"] == ACCEPT


def test_refusals_name_the_file_and_write_nothing(win, tmp_path):
    out = tmp_path / "rt"
    # an import nothing carries: the compiler's runtime zip left out
    line = one_error_line(_repair(str(win.patched_zip), "--out", str(out)), 2,
                          [f"error: {win.patched_zip}: ", "which no input carries", "fix: add the zip that ships"])
    assert any(f"imports {dll}" in line for dll in ("libstdc++-6.dll", "libgcc_s_seh-1.dll", "libgomp-1.dll",
                                                    "libwinpthread-1.dll")), line
    # a 32-bit DLL among x64 ones (its header says i386)
    x86 = tmp_path / "x86"
    x86.mkdir()
    dll = bytearray((win.bins / "ggml-rpc.dll").read_bytes())
    pe_at = struct.unpack_from("<I", dll, 0x3C)[0]
    struct.pack_into("<H", dll, pe_at + 4, 0x14C)
    (x86 / "ggml-rpc.dll").write_bytes(bytes(dll))
    bad_rpc = pack(tmp_path / f"llama-{BUILD}-bin-win-rpc-x64.zip", [x86 / "ggml-rpc.dll"])
    one_error_line(_repair(str(win.patched_zip), str(win.runtime_zip), str(bad_rpc), "--out", str(out)), 2,
                   [f"{bad_rpc}: ggml-rpc.dll", "built for x86, not x64"])
    # two builds: another build number, and another ggml base interface
    with zipfile.ZipFile(win.rpc_zip) as z:
        members = {n: z.read(n) for n in z.namelist()}
    other = tmp_path / "b7501"
    other.mkdir()
    for n, data in members.items():
        (other / n).write_bytes(data)
    one_error_line(_repair(str(win.patched_zip), str(win.runtime_zip),
                           str(pack(tmp_path / "llama-b7501-bin-win-rpc-x64.zip", sorted(other.iterdir()))),
                           "--out", str(out)), 2, ["different ggml bases", "b7500 vs b7501"])
    (other / "ggml-base.dll").write_bytes(members["ggml.dll"])         # exports another interface
    one_error_line(_repair(str(win.patched_zip), str(win.runtime_zip),
                           str(pack(tmp_path / "x" / f"llama-{BUILD}-bin-win-rpc-x64.zip", sorted(other.iterdir()))),
                           "--out", str(out)), 2, ["exported interfaces differ"])
    # Windows and Linux inputs together
    linux = tmp_path / "linux"
    linux.mkdir()
    (linux / "libggml-base.so").write_bytes(b"\x7fELF")
    one_error_line(_repair(str(win.patched_zip), str(linux), "--out", str(out)), 2, ["one runtime runs on one OS"])
    assert not out.exists()


def test_a_driver_dll_is_never_carried_and_verify_fails_one_put_in(win, tmp_path):
    drv = tmp_path / "drv"
    drv.mkdir()
    shutil.copy(win.bins / "ggml-base.dll", drv / "nvcuda.dll")                # a stand-in driver DLL
    shipped = pack(tmp_path / "extra" / "mingw-runtime-win-x64.zip",
                   [*(Path(p) for p in _members(win.runtime_zip, tmp_path / "rtz")), drv / "nvcuda.dll"])
    dry = _repair(str(win.patched_zip), str(shipped), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "nvcuda.dll" in dry.stdout and "driver DLL" in dry.stdout and "not carried" in dry.stdout
    out = tmp_path / "rt"
    assert _repair(str(win.patched_zip), str(shipped), "--out", str(out)).returncode == 0
    assert not (out / "nvcuda.dll").exists()
    shutil.copy(drv / "nvcuda.dll", out / "nvcuda.dll")
    failed = assemble("verify", str(out))
    assert failed.returncode == 1
    assert "driver DLLs" in failed.stderr and "nvcuda.dll" in failed.stderr and "not in the manifest" in failed.stderr


def _members(z: Path, dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(z) as zf:
        zf.extractall(dest)
        return [dest / n for n in zf.namelist()]


def test_package_writes_a_reproducible_zip_that_unpacks_to_a_verified_runtime(win, tmp_path):
    out = tmp_path / "runtime-win"
    assert _repair(str(win.patched_zip), str(win.rpc_zip), str(win.runtime_zip), "--name", "win",
                   "--out", str(out)).returncode == 0
    env = {"SOURCE_DATE_EPOCH": "1764547200"}
    one = assemble("package", str(out), "--out-dir", str(tmp_path / "d1"), "--json", env=env)
    two = assemble("package", str(out), "--out-dir", str(tmp_path / "d2"), "--json", env=env)
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    a, b = Path(json.loads(one.stdout)["archive"]), Path(json.loads(two.stdout)["archive"])
    assert a.name == f"runtime-win-{BUILD}-local-windows-x64.zip" == b.name
    assert a.read_bytes() == b.read_bytes()                                   # byte-reproducible
    with zipfile.ZipFile(a) as zf:
        names = zf.namelist()
        assert names[0] == "runtime-win-windows-x64/" and names == sorted(names, key=lambda n: n.split("/"))
        assert {i.date_time for i in zf.infolist()} == {(2025, 12, 1, 0, 0, 0)}
        # licences: upstream's LICENSE for llama.cpp's files, the runtime zip's copyright files for its DLLs
        top = "runtime-win-windows-x64/licenses/"
        assert f"{top}llama.cpp/LICENSE" in names
        assert any(n.startswith(f"{top}mingw-runtime-win-x64/copyright.") for n in names), names
        zf.extractall(tmp_path / "unpacked")
    again = assemble("verify", str(tmp_path / "unpacked" / "runtime-win-windows-x64"))
    assert again.returncode == 0, again.stderr
    m = Manifest.load(out)
    assert m.unlicensed() == [] and {r.component for r in m.licenses} == {"llama.cpp", "mingw-runtime-win-x64"}
    one_error_line(assemble("package", str(out), "--format", "tar.gz", "--out-dir", str(tmp_path / "d3"), env=env),
                   2, ["packaged as zip"])


def test_under_wine_the_runtime_lists_its_devices_and_serves_a_completion(win, tmp_path):
    prefix = tmp_path / "wineprefix"
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    assert _repair(str(win.patched_zip), str(win.rpc_zip), str(win.runtime_zip), "--out", str(ours)).returncode == 0
    assert _repair(str(win.cpu_zip), str(win.runtime_zip), "--out", str(theirs),
                   "--accept-loader-risk", ACCEPT).returncode == 0
    elsewhere = tmp_path / "shared-folder"                  # where the service starts: others can write here
    elsewhere.mkdir()
    shutil.copy(win.planted, elsewhere / "ggml-cpu-planted.dll")
    listed = wine_output(prefix, ours / "llama-server.exe", "--list-devices", cwd=elsewhere,
                         until="Available devices:")
    # no GPU under Wine and no RPC server named: the list is empty, the loader ran (it loads before listing)
    assert "Available devices:" in listed, listed
    assert not (elsewhere / PLANTED_MARK).exists(), "the patched loader loaded a DLL from the working directory"
    # upstream's loader, same files otherwise: it loads the planted DLL (what verify's FAIL is about)
    wine_output(prefix, theirs / "llama-server.exe", "--list-devices", cwd=elsewhere, until="Available devices:")
    assert (elsewhere / PLANTED_MARK).exists(), "upstream's loader did not search the working directory"
    (elsewhere / PLANTED_MARK).unlink()
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    with wine_server(prefix, ours / "llama-server.exe", "-m", str(model), "-c", "512", "-t", "2",
                     cwd=elsewhere) as (port, _):
        answer = complete(f"http://127.0.0.1:{port}", 8, "The quick brown fox")
    assert isinstance(answer["content"], str) and answer["tokens_predicted"] == 8, answer
    assert not (elsewhere / PLANTED_MARK).exists()
