"""Which package installed a file: Debian's (dpkg's database) or a Python wheel's (its RECORD).

The SBOM names these packages (with their purls), and the licence texts a runtime carries come from
them (builder.runtime.licenses): Debian's /usr/share/doc/<package>/copyright, a wheel's .dist-info.
"""

from __future__ import annotations

import os
import subprocess
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from packageurl import PackageURL

from builder import ui
from builder.proc import run

DPKG_TIMEOUT = 20.0
DEB_DOC = "/usr/share/doc"          # where every Debian package puts its copyright file
_USRMERGE = (("/usr/lib/", "/lib/"), ("/usr/lib64/", "/lib64/"), ("/usr/lib32/", "/lib32/"),
             ("/usr/bin/", "/bin/"), ("/usr/sbin/", "/sbin/"))


@dataclass(frozen=True)
class Owner:
    """The package a file was installed by."""
    kind: str            # deb | pypi
    name: str
    version: str | None
    arch: str | None = None
    doc: str | None = None   # the folder of its licence texts: /usr/share/doc/<name>, or the wheel's .dist-info

    def purl(self, distro: str) -> str:
        """The package URL, encoded as the purl spec says (a Debian version's '+' and ':' included)."""
        if self.kind == "pypi":
            return PackageURL(type="pypi", name=self.name.lower().replace("_", "-"), version=self.version).to_string()
        return PackageURL(type="deb", namespace=distro or "debian", name=self.name, version=self.version,
                          qualifiers={"arch": self.arch} if self.arch else None).to_string()


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
        out[path] = Owner("deb", name, version, arch or real_arch, f"{DEB_DOC}/{name}")
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
                    out[rels[rel]] = Owner("pypi", dist.metadata["Name"], dist.version, doc=str(record.parent))
    return out


def owners(paths: list[str]) -> dict[str, Owner]:
    found = wheel_owners(paths)
    rest = [p for p in paths if p not in found]
    found.update(dpkg_owners(rest))
    return found
