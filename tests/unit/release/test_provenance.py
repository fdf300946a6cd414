"""The in-toto/SLSA provenance statement `assemble package` writes beside an archive.

Checked with the in-toto project's own protobuf definitions (PyPI in-toto-attestation): the
Statement and the SLSA Provenance v1 predicate parse strictly (an unknown or misspelt field
fails), the statement validates, its subject is the archive's sha256 as SHA256SUMS lists it,
and the same runtime gives the same statement bytes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement

from builder.digest import sha256_file
from builder.paths import data_dir
from builder.release import attested, package, provenance
from tests.support.common import SHA
from tests.support.runtimes import PATCH, make_runtime


def test_statement_is_valid_slsa_provenance_of_the_archive(tmp_path):
    rt = make_runtime(tmp_path / "a", name="cuda-vulkan", build="b7416", cuda="12.8")
    result = package.package(rt, tmp_path / "dist")
    raw = result.provenance.read_bytes()
    doc = json.loads(raw)

    stmt = json_format.ParseDict(doc, statement_pb2.Statement())          # strict: unknown fields fail
    Statement.copy_from_pb(stmt).validate()
    pred = json_format.ParseDict(doc["predicate"], provenance_pb2.Provenance())
    assert doc["predicateType"] == "https://slsa.dev/provenance/v1"
    assert pred.build_definition.build_type == provenance.BUILD_TYPE and pred.run_details.builder.id
    for dep in pred.build_definition.resolved_dependencies:
        ResourceDescriptor.copy_from_pb(dep).validate()

    # what was built: the archive, as SHA256SUMS lists it
    subject, manifest_subject, *files = doc["subject"]
    assert subject == {"name": result.archive.name, "digest": {"sha256": result.sha256}}
    # and what it unpacks to: manifest.json and every file it lists, each as the archive holds it
    assert manifest_subject == {"name": "runtime-cuda-vulkan/manifest.json",
                                "digest": {"sha256": sha256_file(rt / "manifest.json")}}
    assert files == [{"name": f"runtime-cuda-vulkan/{p}", "digest": {"sha256": sha256_file(rt / p)}}
                     for p in sorted(f["path"] for f in json.loads((rt / "manifest.json").read_text())["files"])]
    assert result.sha256 == hashlib.sha256(result.archive.read_bytes()).hexdigest()
    sums = attested.load_sums(result.sums)
    assert sums[result.provenance.name] == hashlib.sha256(raw).hexdigest()
    assert subprocess.run(["sha256sum", "-c", package.SUMS], cwd=result.sums.parent,
                          capture_output=True).returncode == 0
    # from what: llama.cpp at its commit and build number, the patch applied; the SBOM as a byproduct
    ext = doc["predicate"]["buildDefinition"]["externalParameters"]
    assert ext["source"] == {"sha": SHA, "build": "b7416"} and ext["recipe"] == "cuda-vulkan"
    deps = doc["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert deps[0]["digest"] == {"gitCommit": SHA} and deps[0]["uri"] == "pkg:pypi/llama-cpp-python@0.3.36"
    assert {"name": f"patches/{PATCH}", "digest": {"sha256": sha256_file(data_dir("patches") / PATCH)}} in deps
    (bom,) = doc["predicate"]["runDetails"]["byproducts"]
    assert bom == {"name": result.sbom.name, "digest": {"sha256": sums[result.sbom.name]}}
    # how: each unit's commands, by which tool
    assert doc["predicate"]["buildDefinition"]["internalParameters"]["units"][0]["name"] == "main"

    # the same runtime elsewhere: the same statement
    copy = tmp_path / "b" / rt.name
    shutil.copytree(rt, copy, symlinks=True)
    again = package.package(copy, tmp_path / "dist2")
    assert again.provenance.read_bytes() == raw
