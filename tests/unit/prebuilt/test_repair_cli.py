"""assemble repair through the real CLI on inputs compiled here (tests/unit/prebuilt/test_discover.py):
refusals come in one line before anything is copied; --dry-run says what it would do and writes nothing."""

from __future__ import annotations

import pytest

from tests.support.common import assemble, one_error_line
from tests.unit.prebuilt.test_discover import make_build


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
    proc = assemble("repair", str(root), "--dry-run", cwd=tmp_path)
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
    assert "bin/llama-server" in rec.covers and str(archive) in rec.source
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
