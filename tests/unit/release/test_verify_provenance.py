"""`assemble verify RUNTIME --provenance FILE --sha256sums FILE`: an unpacked release checked against
what the release stated.

A real archive written by `package`, unpacked with tar; the runtime's ELF files compiled here
(tests.support.glibcfloor), so the untouched runtime passes every static check. The attack: a file
edited and manifest.json updated to match (verify's file checks pass), caught and named by the
provenance; and the other way round, a claim of the provenance edited and SHA256SUMS updated to
match (so `sha256sum -c` passes), caught and named against manifest.json (`release provenance`).
Refusals are one line, exit 2.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.check.report import FAIL, PASS
from builder.release import attested, package
from tests.support.common import SHA, assemble, one_error_line
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
    assert c["release provenance"]["status"] == PASS, c["release provenance"]
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
    # the claims against the edited manifest: what was edited in it, named
    assert c["release provenance"]["status"] == FAIL
    assert c["release provenance"]["reason"] == "claims glibc.floor=2.35, manifest.json says 2.17"


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


# --- the claims: a provenance edited, SHA256SUMS updated to match -------------------------------

def _forge(result, edit) -> dict:
    """The issue's attack: the released provenance edited (`edit(doc)`), written as package writes it,
    and its SHA256SUMS line updated to match, so `sha256sum -c SHA256SUMS` still passes."""
    doc = json.loads(result.provenance.read_text())
    edit(doc)
    raw = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    result.provenance.write_bytes(raw)
    sums = attested.load_sums(result.sums)
    sums[result.provenance.name] = hashlib.sha256(raw).hexdigest()
    result.sums.write_text("".join(f"{h}  {n}\n" for n, h in sorted(sums.items())))
    assert subprocess.run(["sha256sum", "-c", package.SUMS], cwd=result.sums.parent, capture_output=True).returncode == 0
    return doc


def _ext(doc) -> dict:
    return doc["predicate"]["buildDefinition"]["externalParameters"]


def test_an_edited_claimed_commit_with_sha256sums_updated_fails(release):
    """The issue, exactly: the claimed llama.cpp commit edited, SHA256SUMS updated; the manifest, the
    files and SHA256SUMS all still agree with the provenance's digests, the claim does not."""
    result, rt = release
    forged = "f" * 40
    _forge(result, lambda d: _ext(d)["source"].update(sha=forged))
    proc = _verify(rt, result)
    assert proc.returncode == 1, proc.stdout
    c = _checks(proc)
    assert [c[n]["status"] for n in ("release manifest", "release files", "release SHA256SUMS")] == [PASS] * 3
    assert c["release provenance"]["status"] == FAIL
    assert c["release provenance"]["reason"] == f"claims source.sha={forged}, manifest.json says {SHA}"
    # as printed: one row naming the field, and its hint
    proc = assemble("verify", str(rt), "--static", "--provenance", str(result.provenance), "--sha256sums", str(result.sums))
    assert proc.returncode == 1
    assert re.search(rf"^  release provenance +FAIL  claims source\.sha={forged}, manifest\.json says {SHA}$", proc.stderr,
                     re.M), proc.stderr
    assert "hint: the provenance is not the one package wrote for this runtime" in proc.stderr


@pytest.mark.parametrize("edit, reason", [
    (lambda d: _ext(d).update(recipe="cuda"), "claims recipe=cuda, manifest.json says cpu"),
    (lambda d: _ext(d)["backends"].append("cuda"), 'claims backends=["cpu", "cuda"], manifest.json says ["cpu"]'),
    (lambda d: _ext(d)["glibc"].update(floor="2.17"), "claims glibc.floor=2.17, manifest.json says 2.35"),
    (lambda d: _ext(d)["glibc"].update(stated_by="build host"), "claims glibc.stated_by=build host, manifest.json says recipe"),
    (lambda d: _ext(d)["source"].update(build="b9999"), "claims source.build=b9999, manifest.json says none"),
], ids=["recipe", "backends", "glibc-floor", "glibc-stated-by", "build"])
def test_each_edited_claim_is_named(release, edit, reason):
    result, rt = release
    _forge(result, edit)
    proc = _verify(rt, result)
    c = _checks(proc)
    assert proc.returncode == 1 and c["release SHA256SUMS"]["status"] == PASS
    assert c["release provenance"]["status"] == FAIL and c["release provenance"]["reason"] == reason


def test_a_dropped_or_added_subject_is_named(release):
    result, rt = release
    _forge(result, lambda d: d["subject"].remove({"name": "runtime-cpu/bin/libggml-cpu.so",
                                                   "digest": {"sha256": _sha(rt / "bin/libggml-cpu.so")}}))
    c = _checks(_verify(rt, result))
    assert c["release files"]["status"] == FAIL and c["release files"]["reason"] == (
        "runtime-cpu/bin/libggml-cpu.so: manifest.json lists it, the provenance does not name it: not a statement "
        "assemble package wrote")
    _forge(result, lambda d: d["subject"].append({"name": "runtime-cpu/lib/libevil.so", "digest": {"sha256": "0" * 64}}))
    proc = _verify(rt, result)
    c = _checks(proc)
    assert proc.returncode == 1 and c["release SHA256SUMS"]["status"] == PASS
    assert "runtime-cpu/lib/libevil.so: named by the provenance, not a file manifest.json lists" in c["release files"]["reason"]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_edited_sbom_digest_fails_against_sha256sums(release):
    """The SBOM's digest is the one claim manifest.json cannot determine: SHA256SUMS' line for it must agree."""
    result, rt = release
    _forge(result, lambda d: d["predicate"]["runDetails"]["byproducts"][0]["digest"].update(sha256="0" * 64))
    c = _checks(_verify(rt, result))
    assert c["release provenance"]["status"] == PASS
    assert c["release SHA256SUMS"]["status"] == FAIL
    assert f"{result.sbom.name}: SHA256SUMS says {_sha(result.sbom)[:16]}..., the provenance says 0000" in \
        c["release SHA256SUMS"]["reason"]


# Every other claim, checked in-process (no subprocess per case): the row verify prints for it.
def _unit(d):
    return d["predicate"]["buildDefinition"]["internalParameters"]["units"][0]


@pytest.mark.parametrize("edit, reason", [
    (lambda d: _ext(d).update(recipe_file="/tmp/evil.toml"), "claims recipe_file=/tmp/evil.toml, manifest.json says "),
    (lambda d: _ext(d)["gpu_targets"].update(cuda=["89"]), 'claims gpu_targets.cuda=["89"], manifest.json says []'),
    (lambda d: _ext(d).pop("glibc"), "claims no glibc, manifest.json says {"),
    (lambda d: _ext(d).update(inputs=[{"given": "x.zip", "kind": "zip"}]),
     'claims inputs=[{"given": "x.zip", "kind": "zip"}], manifest.json says none'),
    (lambda d: _unit(d).update(container="evil:latest"), "claims units[0].container=evil:latest, manifest.json says "),
    (lambda d: _unit(d)["configure"].append("-DEVIL=ON"), "claims units[0].configure=["),
    (lambda d: _unit(d).update(environment={"LD_PRELOAD": "x"}),
     'claims units[0].environment={"LD_PRELOAD": "x"}, manifest.json says none'),
    (lambda d: _unit(d).update(name="other"), "claims units[0].name=other, manifest.json says "),
    (lambda d: d["predicate"]["buildDefinition"]["resolvedDependencies"][0]["digest"].update(gitCommit="f" * 40),
     f"claims resolvedDependencies[0].digest.gitCommit={'f' * 40}, manifest.json says {SHA}"),
    (lambda d: _ext(d).update(cuda_arch="89"), "claims cuda_arch=89, manifest.json says none"),   # an unknown field
    (lambda d: d["predicate"]["runDetails"]["metadata"].update(invocationId="x"),
     "claims metadata.invocationId=x, manifest.json says none"),
    (lambda d: d["predicate"]["runDetails"]["builder"].update(id="urn:other:1.0"),
     "claims builder.id=urn:other:1.0, manifest.json says urn:assemble:<version>"),
    (lambda d: d["subject"][0].update(name="runtime-cpu-evil.tar.gz"),
     "claims archive=runtime-cpu-evil.tar.gz, manifest.json says runtime-cpu-0c1e57098bba-linux-"),
    (lambda d: d["subject"][3].update(annotations={"x": "y"}), "claims subject[3] (runtime-cpu/"),
    (lambda d: d["predicate"]["runDetails"]["byproducts"][0].update(name="evil.cdx.json"),
     "claims byproducts[0].name=evil.cdx.json, manifest.json says runtime-cpu-"),
    (lambda d: d.update(extra=True), "claims extra=true, manifest.json says none"),
    (lambda d: _ext(d)["glibc"].update(needed="2.17"), "claims glibc.needed=2.17, manifest.json says 2.34"),
    (lambda d: _ext(d)["glibc"].update(needed_by="lib/x.so"),
     "claims glibc.needed_by=lib/x.so, manifest.json says bin/llama-server"),
    (lambda d: _unit(d).update(backends=["cpu", "cuda"]), 'claims units[0].backends=["cpu", "cuda"], manifest.json says'),
    (lambda d: _unit(d)["build"].append("--target evil"), "claims units[0].build=["),
    (lambda d: [s.update(name=s["name"].replace("runtime-cpu/", "runtime-gpu/")) for s in d["subject"]],
     "claims folder=runtime-gpu, manifest.json says runtime-cpu"),
], ids=["recipe_file", "gpu_targets", "glibc-dropped", "inputs", "container", "configure", "environment", "unit-name",
        "gitCommit", "unknown-field", "metadata", "builder", "archive-name", "subject-keys", "sbom-name", "top-level",
        "glibc-needed", "glibc-needed-by", "unit-backends", "unit-build", "folder"])
def test_every_claim_is_checked_against_the_manifest(release, edit, reason):
    result, rt = release
    _forge(result, edit)
    checks = {c.name: c for c in attested.provenance_checks(rt, attested.load_provenance(result.provenance))}
    assert checks["release manifest"].status == PASS
    assert checks["release provenance"].status == FAIL and checks["release provenance"].reason.startswith(reason), \
        checks["release provenance"].reason


def test_the_packaging_tools_version_is_informational(release):
    """builder.id names the assemble that ran package, which manifest.json does not record: the tool is
    checked, its version is not."""
    result, rt = release
    _forge(result, lambda d: d["predicate"]["runDetails"]["builder"].update(id="urn:assemble:99.0.0"))
    proc = _verify(rt, result)
    assert proc.returncode == 0 and _checks(proc)["release provenance"]["status"] == PASS, proc.stdout


def test_a_gpu_runtimes_claims_agree_with_its_manifest(tmp_path):
    """Build number, CUDA toolkit in the archive's name, an sdist source and a patch as dependencies: the
    statement derived again from manifest.json is the released one (the packaged folder is what the
    archive unpacks to), and an edited build number is named."""
    from tests.support.runtimes import make_runtime
    rt = make_runtime(tmp_path / "a", name="cuda-vulkan", build="b7416", cuda="12.8")
    result = package.package(rt, tmp_path / "dist")
    assert "-b7416-cuda12.8-" in result.archive.name
    checks = {c.name: c for c in attested.provenance_checks(rt, attested.load_provenance(result.provenance))}
    assert all(c.status == PASS for c in checks.values()), checks
    _forge(result, lambda d: _ext(d)["source"].update(build="b7417"))
    checks = {c.name: c for c in attested.provenance_checks(rt, attested.load_provenance(result.provenance))}
    assert checks["release provenance"].reason == "claims source.build=b7417, manifest.json says b7416"
