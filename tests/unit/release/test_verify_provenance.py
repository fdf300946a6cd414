"""`assemble verify RUNTIME --provenance FILE --sha256sums FILE`: an unpacked release checked against
what the release stated.

A real archive written by `package`, unpacked with tar; the runtime's ELF files compiled here
(tests.support.glibcfloor), so the untouched runtime passes every static check. The attack: a file
edited and manifest.json updated to match (verify's file checks pass), caught and named by the
provenance. Refusals are one line, exit 2.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.check.report import FAIL, PASS
from builder.release import package
from tests.support.common import assemble, one_error_line
from tests.support.glibcfloor import glibc_runtime, plant


@pytest.fixture(scope="module")
def _released(tmp_path_factory):
    """Built (two compiles), packaged and unpacked once per module: 3-4 s on the 2-core machine."""
    root = tmp_path_factory.mktemp("release")
    rt = glibc_runtime(root / "build",
                       floor={"promised": "2.35", "stated_by": "recipe", "needed_by": "bin/llama-server"})
    result = package.package(rt, root / "dist", "tar.gz")
    (root / "unpacked").mkdir()   # unpacked as a user would, with tar (not Python's tarfile)
    subprocess.run(["tar", "-xf", str(result.archive), "-C", str(root / "unpacked")], check=True)
    return root, result


@pytest.fixture
def release(_released, tmp_path):
    """Each test's own copy of the release (the outputs and the unpacked runtime), free to tamper with."""
    root, result = _released
    for part in ("dist", "unpacked"):
        shutil.copytree(root / part, tmp_path / part, symlinks=True)
    moved = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    assert all(v.parent == root / "dist" for v in moved.values() if isinstance(v, Path)), moved
    moved.update({k: tmp_path / "dist" / v.name for k, v in moved.items() if isinstance(v, Path)})
    return dataclasses.replace(result, **moved), tmp_path / "unpacked" / "runtime-cpu"


def _verify(runtime, result, *more):
    return assemble("verify", str(runtime), "--static", "--json", "--provenance", str(result.provenance),
                    "--sha256sums", str(result.sums), *more)


def _checks(proc) -> dict:
    return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}


def test_the_untouched_release_passes(release):
    result, rt = release
    proc = _verify(rt, result)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    c = _checks(proc)
    assert c["release manifest"]["status"] == PASS and c["release files"]["status"] == PASS
    assert c["release SHA256SUMS"]["status"] == PASS and "3 file(s) beside it match" in c["release SHA256SUMS"]["reason"]
    # the same check as sha256sum -c, and the provenance carries what it checks
    assert subprocess.run(["sha256sum", "-c", package.SUMS], cwd=result.sums.parent, capture_output=True).returncode == 0
    subjects = {s["name"] for s in json.loads(result.provenance.read_text())["subject"]}
    assert {result.archive.name, "runtime-cpu/manifest.json", "runtime-cpu/bin/llama-server"} <= subjects


def test_an_edited_file_with_a_consistently_edited_manifest_is_caught(release, tmp_path):
    result, rt = release
    evil = tmp_path / "evil"
    shutil.copy(shutil.which("false"), evil)
    plant(rt, "bin/llama-server", evil)                          # hashes updated: verify's own checks pass
    assert _checks(assemble("verify", str(rt), "--static", "--json"))["manifest hashes"]["status"] == PASS
    proc = _verify(rt, result)
    assert proc.returncode == 1
    c = _checks(proc)
    assert c["release manifest"]["status"] == FAIL and "edited after the release" in c["release manifest"]["reason"]
    assert c["release files"]["status"] == FAIL
    assert c["release files"]["reason"].startswith("bin/llama-server: differs from the release")
    assert "libggml-cpu" not in c["release files"]["reason"]     # only the edited file is named


def test_an_added_file_and_an_edited_manifest_alone(release):
    result, rt = release
    (rt / "lib" / "libextra.so").write_bytes(b"\x7fELF extra")
    raw = json.loads((rt / "manifest.json").read_text())
    raw["glibc_floor"]["promised"] = "2.17"                        # a promise the release never made
    (rt / "manifest.json").write_text(json.dumps(raw, indent=2) + "\n")
    c = _checks(_verify(rt, result))
    assert c["release manifest"]["status"] == FAIL
    assert c["release files"]["status"] == FAIL and "lib/libextra.so: not in the release" in c["release files"]["reason"]


def test_the_ops_record_written_on_the_host_is_no_release_file(release):
    """verify --ops writes ops-checks.json into the unpacked runtime: the release's files still match;
    the same name anywhere else is still a file the release has not."""
    from builder.check.ops import DeviceRecord, write_record
    result, rt = release
    entry = DeviceRecord("Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)", "pass", 94, 0, 0, (), (), ("SCALE",), "all", 7.6, "",
                         "Vulkan: LLVM 15.0.6, 256 bits", "ci", "2026-12-02T01:05:47+00:00", "0.1.0")
    assert write_record(rt, [entry]).status == PASS
    proc = _verify(rt, result)
    assert proc.returncode == 0, proc.stdout
    # with manifest.json edited every file is hashed against the release: the record is still none of them
    raw = json.loads((rt / "manifest.json").read_text())
    raw["glibc_floor"]["promised"] = "2.17"
    (rt / "manifest.json").write_text(json.dumps(raw, indent=2) + "\n")
    c = _checks(_verify(rt, result))
    assert c["release files"]["status"] == PASS and "only manifest.json differs" in c["release files"]["reason"]
    shutil.copyfile(rt / "ops-checks.json", rt / "lib" / "ops-checks.json")     # the name elsewhere: a stray file
    c = _checks(_verify(rt, result))
    assert c["release files"]["status"] == FAIL and "lib/ops-checks.json: not in the release" in c["release files"]["reason"]


def test_a_tampered_sums_or_archive_is_caught(release):
    result, rt = release
    with open(result.archive, "ab") as f:
        f.write(b"\0")
    c = _checks(_verify(rt, result))["release SHA256SUMS"]
    assert c["status"] == FAIL and f"{result.archive.name} (beside SHA256SUMS): content differs" in c["reason"]
    lines = [ln for ln in result.sums.read_text().splitlines() if not ln.endswith(result.provenance.name)]
    result.sums.write_text("\n".join(lines) + "\n")
    c = _checks(_verify(rt, result))["release SHA256SUMS"]
    assert c["status"] == FAIL and f"{result.provenance.name} is not listed" in c["reason"]


def test_a_provenance_of_another_runtime_fails(release, tmp_path):
    result, _rt = release
    other = glibc_runtime(tmp_path / "other", floor={"promised": "2.36", "stated_by": "build host",
                                                     "needed_by": "bin/llama-server"})
    proc = assemble("verify", str(other), "--static", "--json", "--provenance", str(result.provenance))
    assert proc.returncode == 1 and _checks(proc)["release manifest"]["status"] == FAIL


@pytest.mark.parametrize("content, words", [
    (None, ["no such provenance file"]),
    (b"{not json", ["is not JSON"]),
    (b'{"_type": "https://in-toto.io/Statement/v0.1"}', ["not an in-toto Statement"]),
    (b'{"_type": "https://in-toto.io/Statement/v1", "predicateType": "https://slsa.dev/provenance/v0.2"}',
     ["not the SLSA provenance"]),
])
def test_a_missing_or_malformed_provenance_is_refused_in_one_line(release, tmp_path, content, words):
    _, rt = release
    path = tmp_path / "x.intoto.json"
    if content is not None:
        path.write_bytes(content)
    one_error_line(assemble("verify", str(rt), "--static", "--provenance", str(path)), 2, words)


def test_a_provenance_naming_the_archive_only_is_refused(release, tmp_path):
    result, rt = release
    doc = json.loads(result.provenance.read_text())
    doc["subject"] = doc["subject"][:1]                            # as package wrote it before
    old = tmp_path / "old.intoto.json"
    old.write_text(json.dumps(doc))
    one_error_line(assemble("verify", str(rt), "--static", "--provenance", str(old)), 2, ["names the archive only"])
    doc["subject"] = [doc["subject"][0], {"name": "runtime-cpu/manifest.json", "digest": {"sha256": "x"}}]
    old.write_text(json.dumps(doc))
    one_error_line(assemble("verify", str(rt), "--static", "--provenance", str(old)), 2, ["no sha256 digest"])


def test_sums_refusals(release, tmp_path):
    result, rt = release
    one_error_line(assemble("verify", str(rt), "--static", "--sha256sums", str(result.sums)), 2, ["needs --provenance"])
    bad = tmp_path / "SUMS"
    bad.write_text("not a sums line\n")
    one_error_line(assemble("verify", str(rt), "--static", "--provenance", str(result.provenance),
                            "--sha256sums", str(bad)), 2, ["sha256sum's format"])
    one_error_line(assemble("verify", str(rt), "--static", "--provenance", str(result.provenance),
                            "--sha256sums", str(tmp_path / "none")), 2, ["no such SHA256SUMS file"])


def test_a_provenance_whose_files_disagree_with_its_own_manifest_fails(release, tmp_path):
    result, rt = release
    doc = json.loads(result.provenance.read_text())
    doc["subject"][2]["digest"]["sha256"] = "0" * 64
    forged = tmp_path / "forged.intoto.json"
    forged.write_text(json.dumps(doc))
    proc = assemble("verify", str(rt), "--static", "--json", "--provenance", str(forged))
    c = _checks(proc)
    assert proc.returncode == 1 and c["release manifest"]["status"] == PASS
    assert c["release files"]["status"] == FAIL and "not a statement assemble package wrote" in c["release files"]["reason"]
