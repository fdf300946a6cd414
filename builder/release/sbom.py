"""A CycloneDX 1.5 software bill of materials for a runtime, from its manifest.

What it lists: llama.cpp at its sha with the patches applied (pedigree), every
file the runtime ships with its sha256 (our own builds, and each vendor library
with the distribution package or Python wheel it came from, when the host can
tell), each component's licence (its SPDX id or expression and the text under licenses/ in the
archive, from the manifest: builder.runtime.licenses), and the toolchains that built it
(metadata.tools). Package URLs are written by packageurl-python. No wall-clock time and
a serial number derived from the content: the same runtime gives the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from packageurl import PackageURL

from builder import __version__
from builder.paths import data_dir
from builder.runtime import licenses
from builder.runtime.layout import runtime_dir_name
from builder.runtime.manifest import BUILT, FileEntry, GpuTargets, LicenseRecord, Manifest, UnitRecord
from builder.runtime.owners import owners

SPEC = "1.5"


# --- the document -----------------------------------------------------------------

def _glibc_floor(data: Manifest) -> list[dict[str, Any]]:
    """The glibc the runtime promises to start on, who promised it, and the file needing the newest GLIBC_."""
    f = data.glibc_floor
    if f is None:
        return []
    return [_prop(k, v) for k, v in (("glibc_floor", f.promised), ("glibc_floor_stated_by", f.stated_by),
                                      ("glibc_min_needed_by", f.needed_by)) if v]


def _prop(name: str, value: object) -> dict[str, Any]:
    return {"name": f"assemble:{name}", "value": str(value)}


def _toolchain_root(origin: str, units: tuple[UnitRecord, ...]) -> str | None:
    """'cuda 12.8' when a vendor file came out of a toolchain the build used."""
    for u in units:
        for key, (root, version) in u.toolkit_roots().items():
            if origin.startswith(root.rstrip("/") + "/"):
                return f"{key} {version}".strip()
    return None


def _licensing(rec: LicenseRecord | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(CycloneDX licenses, properties) of a component under `rec`: its SPDX id or expression, or a named
    licence when none is known; the text in the archive is referenced (license.url, and a property)."""
    if rec is None:
        return [], [_prop("license", "unknown")]
    text = rec.texts[0] if rec.texts else None
    props = [_prop("license.texts", ", ".join(rec.texts)), _prop("license.source", rec.source)]
    if rec.spdx in licenses.SPDX_IDS:
        return [{"license": {"id": rec.spdx, **({"url": text} if text else {})}}], props
    if rec.spdx:
        return [{"expression": rec.spdx}], props
    named = {"name": f"{rec.component}: see {text or 'its package'}", **({"url": text} if text else {})}
    return [{"license": named}], props


def _llama(data: Manifest) -> dict[str, Any]:
    ll = data.llama_cpp
    sha = ll.sha
    src = ll.source
    rec = next((r for r in data.licenses if r.component == "llama.cpp"), None)
    comp: dict[str, Any] = {"type": "library", "bom-ref": "llama.cpp", "name": "llama.cpp", "version": sha or "unknown",
            "licenses": _licensing(rec)[0] or [{"license": {"id": licenses.spdx_for(licenses.LLAMA)}}]}
    if sha:
        comp["purl"] = PackageURL(type="github", namespace="ggml-org", name="llama.cpp", version=sha).to_string()
    refs: list[dict[str, Any]] = [{"type": "vcs", "url": "https://github.com/ggml-org/llama.cpp"}]
    if src.kind == "sdist":
        url = f"https://pypi.org/project/{src.package}/{src.version}/"
        refs.append({"type": "distribution", "url": url,
                     "hashes": [{"alg": "SHA-256", "content": src.sha256}] if src.sha256 else []})
    comp["externalReferences"] = refs
    props = [_prop("source.kind", src.kind), _prop("source.verified_by", src.verified_by)]
    if ll.commit_time is not None:
        props.append(_prop("commit_time", ll.commit_time))
    patches = []
    for p in ll.patches:
        patch: dict[str, Any] = {"type": "unofficial", "diff": {"url": f"patches/{p.file}"},
                 "resolves": [{"type": "defect", "name": p.name, "description": p.fixes}]}
        shipped = data_dir("patches") / p.file
        if shipped.is_file():
            text = shipped.read_bytes()
            if hashlib.sha256(text).hexdigest() == p.sha256:   # only the exact diff that was applied
                patch["diff"]["text"] = {"contentType": "text/x-diff", "content": text.decode("utf-8", "replace")}
        patches.append(patch)
        props.append(_prop(f"patch.{p.name}.sha256", p.sha256))
    if patches:
        comp["pedigree"] = {"patches": patches}
    comp["properties"] = props
    return comp


def _tools(data: Manifest) -> list[dict[str, Any]]:
    """Each toolchain the units used, once, naming the units (and containers) that used it."""
    used: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for u in data.units:
        who = u.name + (f" (container {u.container})" if u.container else "")
        for tool in u.tools():
            used[(tool.name, tool.version, tool.path)].append(who)
    out: list[dict[str, Any]] = [{"type": "application", "name": "assemble", "version": __version__}]
    for (key, version, path), units in used.items():
        comp: dict[str, Any] = {"type": "application", "name": key}
        if version:
            comp["version"] = version
        comp["properties"] = [_prop("path", path), _prop("units", ", ".join(units))]
        out.append(comp)
    return out


def _targets(targets: GpuTargets) -> str:
    return ", ".join(f"{k}: {';'.join(t for t in v if t)}" for k, v in (("cuda", targets.cuda), ("hip", targets.hip))
                     if any(v))


def build(runtime: Path, data: Manifest, *, name: str, epoch: int) -> dict[str, Any]:
    """The SBOM of a runtime folder as a dict (CycloneDX 1.5 JSON)."""
    from builder.toolchain.detect import distro

    files = sorted(data.files, key=lambda f: f.path)
    found = owners(sorted({f.origin for f in files if f.role in ("vendor", "data")}))
    dist_id = distro().id
    units = data.units
    components = [_llama(data)]
    licence_of = {p: rec for rec in data.licenses for p in rec.covers}
    data_groups: dict[str, list[FileEntry]] = defaultdict(list)
    for f in files:
        role = f.role
        if role == "data":
            owner = found.get(f.origin)
            data_groups[f"{owner.name}@{owner.version}" if owner else "unknown"].append(f)
            continue
        comp: dict[str, Any] = {"type": "library" if role == "vendor" else "file", "bom-ref": f"file:{f.path}",
                "name": Path(f.path).name, "hashes": [{"alg": "SHA-256", "content": f.sha256}]}
        props = [_prop("path", f.path), _prop("role", role)]
        if role in BUILT:
            props.append(_prop("built_from", "llama.cpp"))
        elif role == "vendor":
            owner = found.get(f.origin)
            if owner:
                if owner.version:
                    comp["version"] = owner.version
                comp["purl"] = owner.purl(dist_id)
                props.append(_prop("package", f"{owner.kind}:{owner.name}"))
            else:
                props.append(_prop("package", "unknown"))
            props.append(_prop("origin", f.origin))
            tc = _toolchain_root(f.origin, units)
            if tc:
                props.append(_prop("toolchain", tc))
        if role != "license":
            licensed, more = _licensing(licence_of.get(f.path))
            if licensed:
                comp["licenses"] = licensed
            props += more
        comp["properties"] = props
        components.append(comp)
    # Vendor data folders (rocBLAS/hipBLASLt kernels: thousands of files): one entry per package;
    # each file's sha256 is in manifest.json inside the archive.
    for key, group in sorted(data_groups.items()):
        owner = found.get(group[0].origin)
        comp = {"type": "data", "bom-ref": f"data:{key}", "name": f"{owner.name if owner else 'unknown'} data files",
                "properties": [_prop("files", len(group)), _prop("bytes", sum(g.size for g in group)),
                               _prop("folder", os.path.commonpath([g.path for g in group]))]}
        licensed, more = _licensing(licence_of.get(group[0].path))
        comp["properties"] += more
        if licensed:
            comp["licenses"] = licensed
        if owner:
            comp["purl"] = owner.purl(dist_id)
            if owner.version:
                comp["version"] = owner.version
        components.append(comp)

    recipe = data.recipe
    sha = data.llama_cpp.sha
    # The serial number names this content: same runtime, same number.
    content = "\n".join(f"{f.path} {f.sha256}" for f in files)
    serial = uuid.uuid5(uuid.NAMESPACE_URL, f"assemble-sbom:{name}:{content}")
    target = {"type": "application", "bom-ref": name, "name": runtime_dir_name(recipe.name),
              "version": sha or "local", "description": recipe.description,
              "properties": [_prop("glibc_min", data.glibc_min), _prop("glibcxx_min", data.glibcxx_min),
                             *_glibc_floor(data),
                             _prop("gpu_targets", _targets(data.gpu_targets)),
                             _prop("recipe_file", recipe.file)]}
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC,
        "serialNumber": f"urn:uuid:{serial}",
        "version": 1,
        "metadata": {
            "timestamp": datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": _tools(data)},
            "component": target,
        },
        "components": components,
        "dependencies": [{"ref": name, "dependsOn": [c["bom-ref"] for c in components]}],
    }
