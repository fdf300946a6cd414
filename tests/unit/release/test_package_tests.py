"""`package` and a runtime's tests/: left out by default (a release archive does not grow by it),
put in with --with-tests; an archive either way unpacks to a runtime that verifies."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.check import integrity
from builder.release import package
from tests.support.common import assemble, one_error_line
from tests.support.runtimes import make_runtime
from tests.unit.release.test_package import members


def _listing(archive: Path) -> list[tuple[str, str, int]]:
    """(name, type, size) of every member; manifest.json's size aside (it lists tests/ or not)."""
    return [(m.name, m.type.decode() if isinstance(m.type, bytes) else m.type,
             -1 if m.name.endswith("/manifest.json") else m.size) for m in members(archive)]


def _unpack(archive: Path, into: Path) -> Path:
    into.mkdir()
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(into)], check=True)    # as a user unpacks it
    return next(into.iterdir())


def test_the_default_archive_is_the_one_of_a_runtime_built_without_tests(tmp_path):
    plain = make_runtime(tmp_path / "plain")
    tested = make_runtime(tmp_path / "tested", with_tests=True)
    before = package.package(plain, tmp_path / "dist-plain", "tar.gz")
    default = package.package(tested, tmp_path / "dist-default", "tar.gz")
    assert _listing(default.archive) == _listing(before.archive)
    assert not any("/tests" in m.name for m in members(default.archive))
    bom = json.loads(default.sbom.read_text())
    assert not any("tests/" in c.get("bom-ref", "") for c in bom["components"]), "the SBOM lists what is in it"
    unpacked = _unpack(default.archive, tmp_path / "unpacked")
    assert integrity.problems(unpacked) == [], "tests/ absent as a whole: the unpacked runtime is intact"
    # and it packages again, the same bytes (the gate accepts a runtime without its tests/)
    again = package.package(unpacked, tmp_path / "dist-again", "tar.gz")
    assert again.sha256 == default.sha256


def test_with_tests_puts_tests_in_and_it_unpacks_intact(tmp_path):
    tested = make_runtime(tmp_path / "tested", with_tests=True)
    default = package.package(tested, tmp_path / "dist-default", "tar.gz")
    full = package.package(tested, tmp_path / "dist-full", "tar.gz", with_tests=True)
    extra = {m.name: m for m in members(full.archive)}.keys() - {m.name for m in members(default.archive)}
    assert extra == {"runtime-cpu/tests", "runtime-cpu/tests/test-backend-ops", "runtime-cpu/tests/libggml-cpu.so"}
    link = next(m for m in members(full.archive) if m.name == "runtime-cpu/tests/libggml-cpu.so")
    assert link.issym() and link.linkname == "../bin/libggml-cpu.so"
    assert full.size > default.size
    bom = json.loads(full.sbom.read_text())
    judge = next(c for c in bom["components"] if c.get("bom-ref") == "file:tests/test-backend-ops")
    assert {"name": "assemble:role", "value": "test"} in judge["properties"]
    unpacked = _unpack(full.archive, tmp_path / "unpacked")
    assert integrity.problems(unpacked) == []
    assert (unpacked / "tests" / "test-backend-ops").is_file()


def test_with_tests_on_a_runtime_without_them_is_one_line_exit_2(tmp_path):
    plain = make_runtime(tmp_path / "plain")
    one_error_line(assemble("package", str(plain), "--out-dir", str(tmp_path / "d"), "--with-tests"), 2,
                   ["--with-tests", "tests/", "[tests] backend_ops"])
    assert not (tmp_path / "d").exists()
    tested = make_runtime(tmp_path / "tested", with_tests=True)
    shutil.rmtree(tested / "tests")                  # unpacked from a default archive: none to put in
    one_error_line(assemble("package", str(tested), "--out-dir", str(tmp_path / "d"), "--with-tests"), 2,
                   ["--with-tests"])


def test_the_cli_flag(tmp_path):
    tested = make_runtime(tmp_path / "tested", with_tests=True)
    out = json.loads(assemble("package", str(tested), "--out-dir", str(tmp_path / "d"), "--format", "tar.gz",
                              "--with-tests", "--json", check=True).stdout)
    assert any(m.name.endswith("tests/test-backend-ops") for m in members(Path(out["archive"])))


def _subjects(provenance: Path) -> set[str]:
    return {s["name"].split("/", 1)[1] for s in json.loads(provenance.read_text())["subject"][1:]}


@pytest.mark.parametrize("with_tests", [False, True])
def test_the_provenance_names_what_the_archive_holds_and_verifies(tmp_path, with_tests):
    """The provenance's subjects are manifest.json (unchanged: the runtime's identity) and the files the
    archive holds, tests/ only with --with-tests; the unpacked archive passes verify --provenance."""
    tested = make_runtime(tmp_path / "tested", with_tests=True)
    done = package.package(tested, tmp_path / "dist", "tar.gz", with_tests=with_tests)
    held = {m.name.split("/", 1)[1] for m in members(done.archive) if m.isfile()}
    assert _subjects(done.provenance) == held
    assert any(p.startswith("tests/") for p in held) is with_tests
    unpacked = _unpack(done.archive, tmp_path / "unpacked")
    proc = assemble("verify", str(unpacked), "--static", "--json", "--provenance", str(done.provenance),
                    "--sha256sums", str(done.sums))
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert proc.returncode == 0, proc.stdout
    assert checks["release manifest"]["status"] == "pass" and checks["release files"]["status"] == "pass"
    assert checks["manifest hashes"]["status"] == "pass"


def test_tests_planted_into_a_release_without_them_are_named(tmp_path):
    """An unpacked default archive with a tests/ folder put back by hand and manifest.json edited: the
    provenance (which never named tests/) calls each planted file what it is."""
    tested = make_runtime(tmp_path / "tested", with_tests=True)
    done = package.package(tested, tmp_path / "dist", "tar.gz")
    unpacked = _unpack(done.archive, tmp_path / "unpacked")
    shutil.copytree(tested / "tests", unpacked / "tests", symlinks=True)
    (unpacked / "manifest.json").write_text((unpacked / "manifest.json").read_text() + " ")
    proc = assemble("verify", str(unpacked), "--static", "--json", "--provenance", str(done.provenance))
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert proc.returncode == 1
    assert "tests/test-backend-ops: not in the release" in checks["release files"]["reason"], checks["release files"]
