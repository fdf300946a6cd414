"""A CycloneDX 1.5 software bill of materials for a runtime, from its manifest.

What it lists: llama.cpp at its sha with the patches applied (pedigree), every
file the runtime ships with its sha256 (our own builds, and each vendor library
with the distribution package or Python wheel it came from, when the host can
tell), and the toolchains that built it (metadata.tools). No wall-clock time and
a serial number derived from the content: the same runtime gives the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from builder import __version__, ui
from builder.paths import data_dir
from builder.proc import run
from builder.runtime.layout import runtime_dir_name
from builder.runtime.manifest import GpuTargets, Manifest, UnitRecord

SPEC = "1.5"
DPKG_TIMEOUT = 20.0
_USRMERGE = (("/usr/lib/", "/lib/"), ("/usr/lib64/", "/lib64/"), ("/usr/lib32/", "/lib32/"),
             ("/usr/bin/", "/bin/"), ("/usr/sbin/", "/sbin/"))


@dataclass(frozen=True)
class Owner:
    """The package a file was installed by."""
    kind: str            # deb | pypi
    name: str
    version: str | None
    arch: str | None = None

    def purl(self, distro: str) -> str:
        if self.kind == "pypi":
            name = self.name.lower().replace("_", "-")
            return f"pkg:pypi/{name}@{self.version}" if self.version else f"pkg:pypi/{name}"
        purl = f"pkg:deb/{distro or 'debian'}/{self.name}"
        if self.version:
            purl += f"@{self.version}"
        return purl + (f"?arch={self.arch}" if self.arch else "")


# --- who installed a file -----------------------------------------------------------

def _aliases(path: str) -> list[str]:
    """A path as dpkg may have recorded it on a merged-/usr system (/usr/lib/x <-> /lib/x)."""
    out = [path]
    for usr, root in _USRMERGE:
        if path.startswith(usr):
            out.append(root + path[len(usr):])
        elif path.startswith(root):
            out.append(usr + path[len(root):])
    return out


def dpkg_owners(paths: list[str], timeout: float = DPKG_TIMEOUT) -> dict[str, Owner]:
    """path -> Debian package, for the paths dpkg knows; {} where there is no dpkg or it is too slow."""
    if not paths:
        return {}
    alias_of = {a: p for p in paths for a in _aliases(p)}
    try:
        proc = run(["dpkg-query", "-S", *alias_of], timeout=timeout, env=dict(os.environ, LC_ALL="C"))
    except (OSError, subprocess.TimeoutExpired) as exc:
        ui.detail(f"sbom: no package owners from dpkg ({exc})")
        return {}
    found: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("diversion ") or ": " not in line:
            continue
        pkgs, path = line.rsplit(": ", 1)
        if path in alias_of:
            found.setdefault(alias_of[path], pkgs.split(",")[0].strip())
    if not found:
        return {}
    versions = _dpkg_versions(sorted(set(found.values())), timeout)
    out = {}
    for path, pkg in found.items():
        name, _, arch = pkg.partition(":")
        version, real_arch = versions.get(pkg, versions.get(name, (None, None)))
        out[path] = Owner("deb", name, version, arch or real_arch)
    return out


def _dpkg_versions(pkgs: list[str], timeout: float) -> dict[str, tuple[str, str]]:
    try:
        proc = run(["dpkg-query", "-W", "-f", "${binary:Package}\t${Version}\t${Architecture}\n", *pkgs],
                   timeout=timeout, env=dict(os.environ, LC_ALL="C"))
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out = {}
    for line in proc.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            out[parts[0]] = (parts[1], parts[2])
            out.setdefault(parts[0].partition(":")[0], (parts[1], parts[2]))
    return out


def _site_packages(path: str) -> Path | None:
    parts = Path(path).parts
    for i in range(len(parts) - 1, 0, -1):
        if parts[i] in ("site-packages", "dist-packages"):
            return Path(*parts[: i + 1])
    return None


def wheel_owners(paths: list[str]) -> dict[str, Owner]:
    """path -> the installed Python distribution whose RECORD lists it (nvidia-*-cu12 wheels, numpy.libs, ...)."""
    from importlib.metadata import PathDistribution

    by_site: dict[Path, list[str]] = defaultdict(list)
    for p in paths:
        site = _site_packages(p)
        if site is not None:
            by_site[site].append(p)
    out = {}
    for site, wanted in by_site.items():
        rels = {Path(p).relative_to(site).as_posix(): p for p in wanted}
        for record in sorted(site.glob("*.dist-info/RECORD")):
            try:
                text = record.read_text(errors="replace")
            except OSError:
                continue
            # a plain text search first: parsing every RECORD of a big environment takes seconds
            hits = [rel for rel in rels if f"\n{rel}," in f"\n{text}" and rels[rel] not in out]
            if hits:
                dist = PathDistribution(record.parent)
                for rel in hits:
                    out[rels[rel]] = Owner("pypi", dist.metadata["Name"], dist.version)
    return out


def owners(paths: list[str]) -> dict[str, Owner]:
    found = wheel_owners(paths)
    rest = [p for p in paths if p not in found]
    found.update(dpkg_owners(rest))
    return found


# --- the document -----------------------------------------------------------------

def _glibc_floor(data: Manifest) -> list[dict]:
    """The glibc the runtime promises to start on, who promised it, and the file needing the newest GLIBC_."""
    f = data.glibc_floor
    if f is None:
        return []
    return [_prop(k, v) for k, v in (("glibc_floor", f.promised), ("glibc_floor_stated_by", f.stated_by),
                                      ("glibc_min_needed_by", f.needed_by)) if v]


def _prop(name: str, value) -> dict:
    return {"name": f"assemble:{name}", "value": str(value)}


def _toolchain_root(origin: str, units: tuple[UnitRecord, ...]) -> str | None:
    """'cuda 12.8' when a vendor file came out of a toolchain the build used."""
    for u in units:
        for key, (root, version) in u.toolkit_roots().items():
            if origin.startswith(root.rstrip("/") + "/"):
                return f"{key} {version}".strip()
    return None


def _llama(data: Manifest) -> dict:
    ll = data.llama_cpp
    sha = ll.sha
    src = ll.source
    comp = {"type": "library", "bom-ref": "llama.cpp", "name": "llama.cpp", "version": sha or "unknown",
            "licenses": [{"license": {"id": "MIT"}}]}
    if sha:
        comp["purl"] = f"pkg:github/ggml-org/llama.cpp@{sha}"
    refs = [{"type": "vcs", "url": "https://github.com/ggml-org/llama.cpp"}]
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
        patch = {"type": "unofficial", "diff": {"url": f"patches/{p.file}"},
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


def _tools(data: Manifest) -> list[dict]:
    """Each toolchain the units used, once, naming the units (and containers) that used it."""
    used: dict[tuple, list[str]] = defaultdict(list)
    for u in data.units:
        who = u.name + (f" (container {u.container})" if u.container else "")
        for tool in u.tools():
            used[(tool.name, tool.version, tool.path)].append(who)
    out = [{"type": "application", "name": "assemble", "version": __version__}]
    for (key, version, path), units in used.items():
        comp = {"type": "application", "name": key}
        if version:
            comp["version"] = version
        comp["properties"] = [_prop("path", path), _prop("units", ", ".join(units))]
        out.append(comp)
    return out


def _targets(targets: GpuTargets) -> str:
    return ", ".join(f"{k}: {';'.join(t for t in v if t)}" for k, v in (("cuda", targets.cuda), ("hip", targets.hip))
                     if any(v))


def build(runtime: Path, data: Manifest, *, name: str, epoch: int) -> dict:
    """The SBOM of a runtime folder as a dict (CycloneDX 1.5 JSON)."""
    from builder.toolchain.detect import distro

    files = sorted(data.files, key=lambda f: f.path)
    found = owners(sorted({f.origin for f in files if f.role in ("vendor", "data")}))
    dist_id = distro().id
    units = data.units
    components = [_llama(data)]
    data_groups: dict[str, list[dict]] = defaultdict(list)
    for f in files:
        role = f.role
        if role == "data":
            owner = found.get(f.origin)
            data_groups[f"{owner.name}@{owner.version}" if owner else "unknown"].append(f)
            continue
        comp = {"type": "file" if role == "own" else "library", "bom-ref": f"file:{f.path}",
                "name": Path(f.path).name, "hashes": [{"alg": "SHA-256", "content": f.sha256}]}
        props = [_prop("path", f.path), _prop("role", role)]
        if role == "own":
            props.append(_prop("built_from", "llama.cpp"))
        else:
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
        comp["properties"] = props
        components.append(comp)
    # Vendor data folders (rocBLAS/hipBLASLt kernels: thousands of files): one entry per package;
    # each file's sha256 is in manifest.json inside the archive.
    for key, group in sorted(data_groups.items()):
        owner = found.get(group[0].origin)
        comp = {"type": "data", "bom-ref": f"data:{key}", "name": f"{owner.name if owner else 'unknown'} data files",
                "properties": [_prop("files", len(group)), _prop("bytes", sum(g.size for g in group)),
                               _prop("folder", os.path.commonpath([g.path for g in group]))]}
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
            "timestamp": datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": _tools(data)},
            "component": target,
        },
        "components": components,
        "dependencies": [{"ref": name, "dependsOn": [c["bom-ref"] for c in components]}],
    }
