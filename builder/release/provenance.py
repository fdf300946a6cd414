"""An in-toto Statement (v1) with a SLSA Provenance (v1) predicate for a release archive.

What was built (the archive, by sha256, and what it unpacks to: `<folder>/manifest.json` and every
file the manifest lists, each by sha256, so `verify RUNTIME --provenance FILE` can check an unpacked
runtime against the release: builder.release.attested), from what (llama.cpp at its sha and build
number, the patches applied, the prebuilt inputs a repair took), how (the recipe, the GPU targets, each
unit's CMake configure and build commands and where they ran), and by which tool. Everything
comes from the runtime's manifest, which the build wrote: no clock and no host name, so the same
runtime gives the same statement bytes, as the archive and the SBOM do. It is not signed here;
a pipeline signs it with its own identity (cosign attest, GitHub's attest-build-provenance).
"""

from __future__ import annotations

from builder import __version__
from builder.runtime.manifest import NAME as MANIFEST, Manifest
from typing import Any

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
# SLSA asks for a URI naming the build template: what the parameters below mean is fixed by it.
BUILD_TYPE = "urn:assemble:buildtype:runtime:v1"
SUFFIX = ".intoto.json"


def statement(m: Manifest, archive_name: str, archive_sha256: str, byproducts: dict[str, str],
              folder: str, manifest_sha256: str) -> dict[str, Any]:
    """byproducts: name -> sha256 of the files written beside the archive (the SBOM); folder: the one
    the archive unpacks to; manifest_sha256: of its manifest.json. The archive is the first subject;
    the files it holds follow (m: the manifest as far as the archive holds it, package.without_tests
    when tests/ is left out), named as unpacked (symlinks and modes are the manifest's, which is
    itself a subject, unchanged either way)."""
    src = m.llama_cpp
    external: dict[str, Any] = {"recipe": m.recipe.name, "recipe_file": m.recipe.file,
                      "backends": list(m.recipe.backends),
                      "gpu_targets": {"cuda": list(m.gpu_targets.cuda), "hip": list(m.gpu_targets.hip)}}
    if src.sha:
        external["source"] = {"sha": src.sha, **({"build": src.build} if src.build else {})}
    if m.glibc_floor is not None or m.glibc_min:
        floor = m.glibc_floor
        external["glibc"] = {"floor": floor.promised if floor else None, "stated_by": floor.stated_by if floor else None,
                             "needed": m.glibc_min, "needed_by": floor.needed_by if floor else None}
    if m.inputs:
        external["inputs"] = [{"given": i.given, "kind": i.kind, **({"build": i.build} if i.build else {})}
                              for i in m.inputs]
    internal = {"units": [{"name": u.name, "backends": list(u.backends), "container": u.container,
                           "configure": list(u.configure), "build": list(u.build),
                           **({"environment": u.environment} if u.environment else {})} for u in m.units]}
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": archive_name, "digest": {"sha256": archive_sha256}},
                    {"name": f"{folder}/{MANIFEST}", "digest": {"sha256": manifest_sha256}},
                    *({"name": f"{folder}/{f.path}", "digest": {"sha256": f.sha256}}
                      for f in sorted(m.files, key=lambda f: f.path))],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": external,
                "internalParameters": internal,
                "resolvedDependencies": _dependencies(m),
            },
            "runDetails": {
                "builder": {"id": f"urn:assemble:{__version__}"},
                "metadata": {},
                "byproducts": [{"name": n, "digest": {"sha256": d}} for n, d in sorted(byproducts.items())],
            },
        },
    }


def _dependencies(m: Manifest) -> list[dict[str, Any]]:
    src, out = m.llama_cpp, []
    p = src.source
    if src.sha:
        uri = {"git": f"git+{p.url}" if p.url else None,
               "sdist": f"pkg:pypi/{p.package}@{p.version}" if p.package else None}.get(p.kind) or "llama.cpp"
        dep = {"uri": uri, "digest": {"gitCommit": src.sha}, "name": "llama.cpp"}
        if p.kind == "sdist" and p.sha256:
            dep["annotations"] = {"sdist_sha256": p.sha256, "subdir": p.subdir or ""}
        out.append(dep)
    for patch in src.patches:
        out.append({"name": f"patches/{patch.file}", "digest": {"sha256": patch.sha256}})
    for i in m.inputs:
        dep = {"name": i.given, "annotations": {"kind": i.kind}}
        if i.sha256:
            dep["digest"] = {"sha256": i.sha256}
        out.append(dep)
    return out
