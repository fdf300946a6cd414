"""assemble repair through the real CLI on inputs compiled here (tests/unit/prebuilt/test_discover.py):
refusals come in one line before anything is copied; --dry-run says what it would do and writes nothing
(it exits as the real run would: these builds' programs cannot run, so both verify by reading files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.common import assemble, one_error_line
from tests.unit.prebuilt.test_discover import make_build

STATIC = ("--verify-static", "--accept-loader-risk", "a test: no ggml installed here")


def test_inputs_with_different_ggml_bases_are_refused_naming_both(tmp_path):
    a = make_build(tmp_path / "build-a")
    b = make_build(tmp_path / "build-b", extra_base_symbol="ggml_new_api")
    proc = assemble("repair", str(a), str(b), "--out", str(tmp_path / "out"))
    line = one_error_line(proc, 2, [str(a), str(b), "different ggml bases", "exported interfaces differ"])
    assert "one build" in line and not (tmp_path / "out").exists()


def test_a_module_from_another_base_is_refused(tmp_path):
    a = make_build(tmp_path / "a")
    (a / "bin" / "libggml-vulkan.so").unlink()                 # a has no vulkan: the other input adds it
    odd = make_build(tmp_path / "odd", module_needs="ggml_new_api")   # same base exports, module wants more
    proc = assemble("repair", str(a), str(odd), "--out", str(tmp_path / "out"))
    one_error_line(proc, 2, ["libggml-vulkan.so", str(odd), "another ggml base", "ggml_new_api"])
    assert not (tmp_path / "out").exists()


def test_dry_run_says_what_it_would_carry_and_writes_nothing(tmp_path):
    root = make_build(tmp_path / "build-dual", backend_dir="/usr/lib/x86_64-linux-gnu/ggml/backends0")
    proc = assemble("repair", str(root), "--dry-run", *STATIC, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for words in (f"input {root} (folder)", "executables  llama-server", "libggml-cpu-x64.so",
                  f"left out\n  {root}/bin/libggml-extra.so  (nothing carried needs it)", "would carry", "bin/llama-server", "lib/libggml-base.so.0.9.4", "left to the host",
                  "libc.so.6", "also searches /usr/lib/x86_64-linux-gnu/ggml/backends0"):
        assert words in out, words
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build-dual"]       # nothing written


@pytest.mark.parametrize("args,words", [
    (["/nonexistent/build"], ["/nonexistent/build"]),
    (["--name", "Bad Name", "{root}"], ["--name", "not a runtime name"]),
    (["{root}", "--accept-loader-risk", " "], ["--accept-loader-risk", "reason"]),
    (["{root}", "--target", "llama-cli"], ["llama-cli", "llama-server"]),
])
def test_bad_input_is_one_line(tmp_path, args, words):
    root = make_build(tmp_path / "b")
    proc = assemble("repair", *[a.replace("{root}", str(root)) for a in args], "--out", str(tmp_path / "out"))
    one_error_line(proc, 2, words)


def _upstream_archive(tmp_path, licence: bytes | None):
    """Packed as upstream packs a Linux release: build/bin/ flat (copies, no links), LICENSE in build/."""
    import tarfile
    b = make_build(tmp_path / "build", flat=True)
    archive = tmp_path / "llama-b7416-bin-ubuntu-x64.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for p in sorted((b / "bin").iterdir()):
            tar.add(p, arcname=f"build/bin/{p.name}")
        if licence is not None:
            (tmp_path / "LICENSE").write_bytes(licence)
            tar.add(tmp_path / "LICENSE", arcname="build/LICENSE")
    return archive


MIT = b"MIT License\n\nCopyright (c) 2023-2026 The ggml authors\n"


def test_repair_keeps_the_archives_license_and_package_takes_it(tmp_path):
    from builder.runtime.manifest import Manifest
    archive = _upstream_archive(tmp_path, MIT)
    out = tmp_path / "runtime-up"
    proc = assemble("repair", str(archive), "--name", "up", "--out", str(out), "--verify-static",
                    "--accept-loader-risk", "a test: no ggml installed here")
    assert proc.returncode == 0, proc.stderr
    assert (out / "licenses" / "llama.cpp" / "LICENSE").read_bytes() == MIT
    m = Manifest.load(out)
    (rec,) = m.licenses
    assert rec.component == "llama.cpp" and rec.spdx == "MIT" and m.unlicensed() == []
    assert "bin/llama-server" in rec.covers and rec.source == f"{archive.name}:build/LICENSE"   # input and member
    verified = assemble("verify", str(out), "--static")
    assert verified.returncode == 0, verified.stderr          # the texts are hashed and checked like every file
    done = assemble("package", str(out), "--out-dir", str(tmp_path / "dist"), env={"SOURCE_DATE_EPOCH": "1764547200"})
    assert done.returncode == 0, done.stderr


def test_an_archive_without_its_license_is_repaired_but_not_packaged(tmp_path):
    out = tmp_path / "runtime-up"
    proc = assemble("repair", str(_upstream_archive(tmp_path, None)), "--name", "up", "--out", str(out),
                    "--verify-static", "--accept-loader-risk", "a test: no ggml installed here")
    assert proc.returncode == 0, proc.stderr
    refused = assemble("package", str(out), "--out-dir", str(tmp_path / "dist"),
                       env={"SOURCE_DATE_EPOCH": "1764547200"})
    one_error_line(refused, 2, ["no licence known for bin/", "LICENSE beside the library"])
    assert not (tmp_path / "dist").exists()


# --- the same inputs, the same bytes: files are named by the input and the path inside it ----------

UPSTREAM = "llama-b7416-bin-ubuntu-x64.tar.gz"
SCRATCH_MARKS = ("/tmp/", "input-0", "input-1", ".unpack-", "repair-")     # the unpack folders' names


def _pack(build: Path, archive: Path) -> Path:
    import tarfile
    with tarfile.open(archive, "w:gz") as tar:
        for p in sorted((build / "bin").iterdir()):
            tar.add(p, arcname=f"build/bin/{p.name}")
    return archive


def test_two_repairs_of_one_archive_give_the_same_manifest_and_package(tmp_path):
    import hashlib
    _upstream_archive(tmp_path, MIT)
    sums = []
    for run in ("one", "two"):
        proc = assemble("repair", UPSTREAM, "--name", "up", "--out", f"{run}/runtime-up", "--verify-static",
                        "--accept-loader-risk", "a test: no ggml installed here", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        done = assemble("package", f"{run}/runtime-up", "--out-dir", f"{run}/dist", cwd=tmp_path,
                        env={"SOURCE_DATE_EPOCH": "1764547200"})
        assert done.returncode == 0, done.stderr
        sums.append({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / run / "dist").iterdir()})
    text = (tmp_path / "one/runtime-up/manifest.json").read_text()
    assert text == (tmp_path / "two/runtime-up/manifest.json").read_text()
    assert not [m for m in SCRATCH_MARKS if m in text]
    origins = {f["path"]: f["origin"] for f in json.loads(text)["files"]}
    assert origins["bin/llama-server"] == f"{UPSTREAM}:build/bin/llama-server"
    assert origins["lib/libggml-base.so.0.9.4"] == f"{UPSTREAM}:build/bin/libggml-base.so.0.9.4"
    assert origins["licenses/llama.cpp/LICENSE"] == f"{UPSTREAM}:build/LICENSE"
    # archive, SBOM, provenance and SHA256SUMS: byte for byte
    assert sums[0] == sums[1] and len(sums[0]) == 4 and any(n.endswith(".tar.zst") for n in sums[0])


def test_dry_run_names_each_file_by_its_archive(tmp_path):
    _upstream_archive(tmp_path, MIT)
    proc = assemble("repair", UPSTREAM, "--dry-run", *STATIC, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"ours, from {UPSTREAM}:build/bin/llama-server" in proc.stdout
    assert f"ours, from {UPSTREAM}:build/bin/libggml-cpu-x64.so" in proc.stdout
    assert not [m for m in SCRATCH_MARKS if m in proc.stdout]


def test_a_refusal_names_the_users_archive_not_where_it_was_unpacked(tmp_path):
    a = make_build(tmp_path / "a")
    (a / "bin" / "libggml-vulkan.so").unlink()                 # a has no vulkan: the archive adds it
    _pack(make_build(tmp_path / "odd", module_needs="ggml_new_api", flat=True), tmp_path / "odd.tar.gz")
    proc = assemble("repair", "a", "odd.tar.gz", "--out", "out", cwd=tmp_path)
    line = one_error_line(proc, 2, ["odd.tar.gz:build/bin/libggml-vulkan.so: ", "another ggml base", "ggml_new_api"])
    assert not [m for m in SCRATCH_MARKS if m in line] and not (tmp_path / "out").exists()


def test_a_folder_inputs_files_are_named_by_the_path_given(tmp_path):
    make_build(tmp_path / "build")
    proc = assemble("repair", "build", "--name", "b", "--out", "runtime-b", "--verify-static",
                    "--accept-loader-risk", "a test: no ggml installed here", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    origins = {f["path"]: f["origin"] for f in json.loads((tmp_path / "runtime-b/manifest.json").read_text())["files"]}
    assert origins["bin/llama-server"] == "build/bin/llama-server"
    assert origins["lib/libllama.so.0.0.1"] == "build/bin/libllama.so.0.0.1"
