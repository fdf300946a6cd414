"""Provision a CUDA toolkit from NVIDIA's redistributable archives: no root, no container.

NVIDIA publishes, for every release, redistrib_<version>.json: per component and
platform the archive's relative_path, sha256 and size. We download only the
components a llama.cpp build needs, check every sha256 before unpacking, and lay
them out the way the runfile installer does (bin/, nvvm/, targets/<triple>/{include,lib}
with include and lib64 linked to it), because nvcc.profile looks for exactly that.

Nothing half-done is ever used: a download grows in a .part file (resumed with an
HTTP Range request), becomes the archive only once its sha256 matches, and the
toolkit is assembled in a temporary sibling folder that is renamed into place last,
with a marker file written just before.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform as _platform
import re
import shutil
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from builder import ui
from builder.config.recipe import SHA256_RE
from builder.errors import AssembleError, BuildFailed
from builder.digest import sha256_file
from builder.source.archive import ArchiveRefused, extract_members
from builder.paths import cache_dir
from builder.toolchain.detect import cuda_toolkit, version_tuple

if TYPE_CHECKING:   # requests is imported where it downloads: the CLI starts without loading it
    import requests

DEFAULT_BASE_URL = "https://developer.download.nvidia.com/compute/cuda/redist/"
BASE_URL_ENV = "ASSEMBLE_CUDA_REDIST_URL"
# What ggml-cuda needs: nvcc, the runtime, CCCL headers (cub/thrust) and cuBLAS.
REQUIRED = ("cuda_nvcc", "cuda_cudart", "cuda_cccl", "libcublas")
# CUDA 13 split the crt headers and NVVM out of cuda_nvcc; taken when the release lists them.
IF_PRESENT = ("cuda_crt", "cuda_nvvm")
# redistrib platform name -> the targets/ folder nvcc.profile expects.
TARGET_DIRS = {"linux-x86_64": "x86_64-linux", "linux-sbsa": "sbsa-linux", "linux-aarch64": "aarch64-linux"}
MARKER = "assemble-toolkit.json"
CONNECT_TIMEOUT, READ_TIMEOUT = 10.0, 60.0
ATTEMPTS = 3            # resumes within one call before giving up (the next call resumes again)
CHUNK = 1 << 20
STREAM_CHUNK = 64 << 10   # a dropped connection loses at most this much

_VERSION_RE = re.compile(r"\d+\.\d+\.\d+")
_FILE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


@dataclass(frozen=True)
class Archive:
    component: str
    version: str
    relative_path: str
    sha256: str
    size: int | None

    @property
    def filename(self) -> str:
        return self.relative_path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class ProvisionedToolkit:
    root: Path                              # usable as CUDAToolkit_ROOT / --cuda-root
    version: str                            # the release, "12.8.1"
    platform: str                           # "linux-x86_64"
    components: tuple[tuple[str, str], ...]  # (component, its own version)

    def as_dict(self) -> dict[str, Any]:
        return {"root": str(self.root), "version": self.version, "platform": self.platform,
                "components": dict(self.components)}


def base_url(explicit: str | None = None) -> str:
    url = explicit or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    return url if url.endswith("/") else url + "/"


def host_platform() -> str:
    machine = _platform.machine()
    return {"x86_64": "linux-x86_64", "AMD64": "linux-x86_64", "aarch64": "linux-sbsa",
            "arm64": "linux-sbsa"}.get(machine, f"linux-{machine}")


def toolkit_root(version: str, plat: str) -> Path:
    return cache_dir() / "toolkits" / f"cuda-{version}-{plat}"


def installed(version: str, plat: str | None = None) -> ProvisionedToolkit | None:
    """The toolkit already laid out in the cache, or None (an incomplete one has no marker)."""
    plat = plat or host_platform()
    root = toolkit_root(version, plat)
    try:
        data = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None
    comps = tuple(sorted((name, rec["version"]) for name, rec in data.get("components", {}).items()))
    return ProvisionedToolkit(root=root, version=version, platform=plat, components=comps)


def cached_toolkits() -> tuple[tuple[str, str], ...]:
    """(version, root) of every CUDA toolkit `assemble toolchain cuda` laid out in the cache for this host."""
    out = []
    plat = host_platform()
    for d in sorted((cache_dir() / "toolkits").glob(f"cuda-*-{plat}")):
        tk = installed(d.name[len("cuda-"):-len(plat) - 1], plat)
        if tk:
            out.append((tk.version, str(tk.root)))
    return tuple(out)


# --- manifest --------------------------------------------------------------

def fetch_manifest(version: str, url: str, session: requests.Session) -> dict[str, Any]:
    """redistrib_<version>.json, from the cache when a readable copy is there."""
    cached = _downloads(version) / f"redistrib_{version}.json"
    try:
        return dict(json.loads(cached.read_text()))
    except (OSError, ValueError):
        pass
    full = urljoin(url, f"redistrib_{version}.json")
    import requests
    try:
        resp = session.get(full, timeout=(CONNECT_TIMEOUT, READ_TIMEOUT))
    except requests.RequestException as exc:
        raise BuildFailed(f"cannot reach the CUDA redistrib server ({type(exc).__name__})", where=full,
                          fix=f"check the network, or point --base-url / {BASE_URL_ENV} at a mirror") from None
    if resp.status_code == 404:
        raise AssembleError(f"no CUDA release {version} on the redistrib server", where=full,
                            fix="name a published release, e.g. 12.8.1 (see redistrib_*.json there)")
    if resp.status_code != 200:
        raise BuildFailed(f"the redistrib server answered HTTP {resp.status_code}", where=full,
                          fix="try again later, or use a mirror with --base-url")
    try:
        data = resp.json()
    except ValueError:
        raise BuildFailed("the redistrib manifest is not valid JSON", where=full,
                          fix="check that --base-url points at a CUDA redist folder") from None
    if not isinstance(data, dict):
        raise BuildFailed("the redistrib manifest is not a JSON object", where=full, fix="check --base-url")
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, cached)
    return data


def select_archives(manifest: dict[str, Any], components: tuple[str, ...] | None, plat: str, where: str) -> list[Archive]:
    """The archives to fetch: the named components, or the default set; each entry checked."""
    listed = sorted(k for k, v in manifest.items() if isinstance(v, dict) and plat in v)
    if components is None:
        wanted = list(REQUIRED) + [c for c in IF_PRESENT if c in listed]
    else:
        wanted = list(dict.fromkeys(components))
    missing = [c for c in wanted if c not in manifest or not isinstance(manifest[c], dict)]
    if missing:
        raise AssembleError(f"component(s) {', '.join(missing)} not in this CUDA release", where=where,
                            fix=f"choose among: {', '.join(listed)}")
    out = []
    for comp in wanted:
        entry = manifest[comp].get(plat)
        if not isinstance(entry, dict):
            raise AssembleError(f"{comp} has no {plat} archive in this release", where=where,
                                fix=f"use --platform with one of: {', '.join(sorted(TARGET_DIRS))}")
        if "relative_path" not in entry:  # some libraries nest one entry per CUDA major
            entry = next((v for k, v in sorted(entry.items()) if k.startswith("cuda") and isinstance(v, dict)), entry)
        out.append(_archive(comp, manifest[comp].get("version", "?"), entry, where))
    return out


def _archive(comp: str, version: str, entry: dict[str, Any], where: str) -> Archive:
    rel, sha, size = entry.get("relative_path"), entry.get("sha256"), entry.get("size")
    if (not isinstance(rel, str) or rel.startswith("/") or ".." in rel.split("/") or "\\" in rel
            or not _FILE_RE.fullmatch(rel.rsplit("/", 1)[-1]) or not rel.endswith((".tar.xz", ".tar.gz"))):
        raise BuildFailed(f"{comp}: unusable relative_path {rel!r} in the manifest", where=where,
                          fix="the manifest is damaged or not NVIDIA's; check --base-url")
    if not isinstance(sha, str) or not SHA256_RE.fullmatch(sha):
        raise BuildFailed(f"{comp}: the manifest gives no valid sha256", where=where,
                          fix="the manifest is damaged or not NVIDIA's; check --base-url")
    try:
        size_int = int(size) if size is not None else None
    except (TypeError, ValueError):
        size_int = None
    return Archive(comp, str(version), rel, sha, size_int)


# --- download --------------------------------------------------------------

def _downloads(version: str) -> Path:
    return cache_dir() / "downloads" / "cuda-redist" / version


def download(archive: Archive, url: str, dest_dir: Path, session: requests.Session) -> Path:
    """The archive, checked against its sha256; resumes a .part left by an earlier attempt."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    return fetch_verified(urljoin(url, archive.relative_path), dest_dir / archive.filename, archive.sha256,
                          archive.size, session, other_mirror="use another --base-url")


def fetch_verified(full: str, final: Path, sha256: str, size: int | None, session: requests.Session,
                   other_mirror: str) -> Path:
    """final holds exactly the file with this sha256 afterwards, or BuildFailed; a .part from an
    interrupted earlier attempt is resumed, a damaged one discarded, never used."""
    if final.is_file():
        if sha256_file(final) == sha256:
            return final
        ui.warn(f"{final.name}: cached copy no longer matches its sha256; downloading it again")
        final.unlink()
    part = final.with_name(final.name + ".part")
    resumed = part.is_file() and part.stat().st_size > 0
    resumed = _fetch(full, part, final.name, size, session, other_mirror) or resumed
    got = sha256_file(part)
    if got != sha256 and resumed:
        # The bytes kept from an earlier attempt may be the bad ones: one clean try.
        ui.warn(f"{final.name}: sha256 mismatch after resuming; downloading it again from the start")
        part.unlink()
        _fetch(full, part, final.name, size, session, other_mirror)
        got = sha256_file(part)
    if got != sha256:
        part.unlink()
        raise BuildFailed(f"{final.name}: sha256 mismatch (expected {sha256[:16]}..., "
                          f"downloaded {got[:16]}...); the file was deleted, nothing was unpacked",
                          where=full, fix="run the command again; if it repeats, the mirror serves a damaged "
                                          f"or different file: {other_mirror}")
    os.replace(part, final)
    return final


def _fetch(full: str, part: Path, name: str, size: int | None, session: requests.Session, other_mirror: str) -> bool:
    """Grow part until it holds the whole file, resuming with Range after a dropped connection.

    Returns whether any bytes came from a resumed request.
    """
    import requests
    bar = ui.Progress(name, size, unit="bytes")
    last_error = "no response"
    resumed = False
    for _ in range(ATTEMPTS):
        have = part.stat().st_size if part.is_file() else 0
        if size is not None and have >= size:
            if have > size:   # longer than the manifest says: cannot be right
                part.unlink()
                have = 0
            else:
                break
        headers = {"Range": f"bytes={have}-"} if have else {}
        try:
            with session.get(full, headers=headers, stream=True,
                             timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)) as resp:
                if resp.status_code == 416 and have:
                    break             # nothing left to send: the sha256 check decides
                if resp.status_code == 206 and have:
                    if not resp.headers.get("Content-Range", "").startswith(f"bytes {have}-"):
                        raise BuildFailed("the server answered a resume with the wrong byte range", where=full,
                                          fix=f"delete {part} and run again")
                    mode, resumed = "ab", True
                elif resp.status_code == 200:
                    mode, have = "wb", 0  # the server ignored Range: start over
                elif resp.status_code == 404:
                    raise BuildFailed(f"{name} is not on the server (HTTP 404)", where=full,
                                      fix=f"the mirror is incomplete: {other_mirror}")
                else:
                    raise BuildFailed(f"HTTP {resp.status_code} downloading {name}", where=full,
                                      fix=f"try again later, or {other_mirror}")
                with open(part, mode) as out:
                    for chunk in resp.iter_content(STREAM_CHUNK):
                        out.write(chunk)
                        have += len(chunk)
                        bar.update(have)
        except requests.RequestException as exc:
            last_error = f"{type(exc).__name__}"
            ui.info(f"{name}: connection dropped at {ui.fmt_bytes(have)}; resuming")
            continue
        if size is None or have >= size:
            break
        last_error = f"the server closed the connection at {have} of {size} bytes"
    else:
        have = part.stat().st_size if part.is_file() else 0
        raise BuildFailed(f"{name}: download incomplete ({have} of {size or '?'} bytes, "
                          f"{last_error}); nothing was unpacked", where=full,
                          fix=f"run the same command again: it resumes from byte {have}")
    bar.finish("downloaded")
    return resumed


# --- layout ----------------------------------------------------------------

def _unpack(archive_file: Path, into: Path) -> Path:
    """Extract one archive (links and paths kept inside) and return its single top folder."""
    into.mkdir(parents=True)
    try:
        with tarfile.open(archive_file) as tar:
            tops = {m.name.split("/", 1)[0] for m in tar.getmembers() if m.name not in ("", ".")}
            if len(tops) != 1:
                raise BuildFailed(f"{archive_file.name}: expected one top folder, found {sorted(tops)[:5]}",
                                  fix="the archive is not a CUDA redist archive; check --base-url")
            extract_members(tar, into)
    except (tarfile.TarError, OSError, EOFError, ArchiveRefused) as exc:
        raise BuildFailed(f"{archive_file.name}: cannot unpack ({exc})", where=str(archive_file),
                          fix="delete it and run again") from None
    top = into / tops.pop()
    if not top.is_dir():
        raise BuildFailed(f"{archive_file.name}: top entry is not a folder", fix="check --base-url")
    return top


def _merge(src: Path, dst: Path, conflicts: list[str]) -> None:
    """Move src's entries into dst; a file both have stays as it was (noted if they differ)."""
    dst.mkdir(parents=True, exist_ok=True)
    for entry in sorted(src.iterdir()):
        target = dst / entry.name
        if not target.exists() and not target.is_symlink():
            os.rename(entry, target)
        elif entry.is_dir() and not entry.is_symlink() and target.is_dir() and not target.is_symlink():
            _merge(entry, target, conflicts)
        elif not _same(entry, target):
            conflicts.append(str(target))


def _same(a: Path, b: Path) -> bool:
    if a.is_symlink() or b.is_symlink():
        return a.is_symlink() and b.is_symlink() and os.readlink(a) == os.readlink(b)
    return a.is_file() and b.is_file() and a.stat().st_size == b.stat().st_size and sha256_file(a) == sha256_file(b)


def _place(component: str, top: Path, root: Path, triple: str, conflicts: list[str]) -> None:
    """Lay one unpacked archive into the root the way the runfile installer does."""
    for entry in sorted(top.iterdir()):
        if entry.name == "include":
            dest = root / "targets" / triple / "include"
        elif entry.name in ("lib", "lib64"):
            dest = root / "targets" / triple / "lib"
        elif entry.is_dir() and not entry.is_symlink():
            dest = root / entry.name
        else:  # LICENSE, README: one per component, they would collide at the top
            dest = root / "licenses" / component
            dest.mkdir(parents=True, exist_ok=True)
            if not (dest / entry.name).exists():
                os.rename(entry, dest / entry.name)
            continue
        if entry.is_dir():
            _merge(entry, dest, conflicts)


def _finish_root(root: Path, triple: str) -> None:
    for name, target in (("include", f"targets/{triple}/include"), ("lib64", f"targets/{triple}/lib")):
        (root / target).mkdir(parents=True, exist_ok=True)
        link = root / name
        if not link.is_symlink() and not link.exists():
            link.symlink_to(target)


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # a second assemble waits instead of unpacking beside us
        yield


# --- the whole job ---------------------------------------------------------

def ensure_cuda(version: str, components: tuple[str, ...] | None = None, *, url: str | None = None,
                plat: str | None = None) -> ProvisionedToolkit:
    """A CUDA toolkit root in the cache with (at least) these components; a no-op when it is there."""
    if not _VERSION_RE.fullmatch(version):
        raise AssembleError(f"{version!r} is not a CUDA release", where="assemble toolchain cuda",
                            fix="name the full release, e.g. 12.8.1")
    plat = plat or host_platform()
    if plat not in TARGET_DIRS:
        raise AssembleError(f"unknown platform {plat!r}", fix=f"use one of: {', '.join(sorted(TARGET_DIRS))}")
    root = toolkit_root(version, plat)
    with _locked(root):
        have = installed(version, plat)
        marker = json.loads((root / MARKER).read_text()) if have else {}
        kept = marker.get("components", {})
        # A second call is a no-op and needs no network.
        if have and (set(components) <= kept.keys() if components is not None else marker.get("defaults")):
            return have
        url = base_url(url)
        where = urljoin(url, f"redistrib_{version}.json")
        import requests
        with requests.Session() as session:
            manifest = fetch_manifest(version, url, session)
            archives = select_archives(manifest, components, plat, where)
            todo = [a for a in archives if a.component not in kept]
            files = []
            if todo:
                ui.step(f"CUDA {version} ({plat}): {', '.join(a.component for a in todo)}")
            for a in todo:
                files.append((a, download(a, url, _downloads(version), session)))
        defaults = components is None or bool(marker.get("defaults"))
        result = _assemble(root, version, plat, files, kept, url, defaults)
        for _, f in files:  # the laid-out root is the product; the archives are not needed again
            f.unlink(missing_ok=True)
        return result


def _assemble(root: Path, version: str, plat: str, files: list[tuple[Archive, Path]], kept: dict[str, Any],
              url: str, defaults: bool) -> ProvisionedToolkit:
    """Build the root in a temporary sibling, check it, then swap it in."""
    triple = TARGET_DIRS[plat]
    tmp = root.with_name(f".{root.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        if kept:  # adding components: start from the old root, hard-linked (renames never touch its files)
            shutil.copytree(root, tmp, symlinks=True, copy_function=os.link)
            (tmp / MARKER).unlink()
        else:
            tmp.mkdir(parents=True)
        conflicts: list[str] = []
        records = dict(kept)
        for archive, f in files:
            ui.info(f"unpacking {archive.filename}")
            top = _unpack(f, tmp / ".unpack" / archive.component)
            _place(archive.component, top, tmp, triple, conflicts)
            records[archive.component] = {"version": archive.version, "sha256": archive.sha256,
                                          "relative_path": archive.relative_path}
        shutil.rmtree(tmp / ".unpack", ignore_errors=True)
        _finish_root(tmp, triple)
        for c in conflicts:
            ui.detail(f"kept the first copy of {os.path.relpath(c, tmp)} (two components ship it)")
        _check_root(tmp, version, plat, records)
        (tmp / "version.json").write_text(json.dumps(
            {"cuda": {"name": "CUDA SDK", "version": version},
             **{c: {"name": c, "version": r["version"]} for c, r in sorted(records.items())}}, indent=1))
        (tmp / MARKER).write_text(json.dumps({"version": version, "platform": plat, "base_url": url,
                                              "defaults": defaults, "components": records},
                                             indent=1, sort_keys=True))
        old = root.with_name(f".{root.name}.old-{os.getpid()}")
        if root.exists():
            os.rename(root, old)
        os.rename(tmp, root)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    ui.info(f"CUDA {version} ready: {root}")
    found = installed(version, plat)
    assert found is not None, "the toolkit just laid out is installed"
    return found


def _check_root(root: Path, version: str, plat: str, records: dict[str, Any]) -> None:
    """The nvcc we laid out must run and report the release we asked for (when it can run here)."""
    if "cuda_nvcc" not in records or plat != host_platform():
        return
    tk = cuda_toolkit(str(root))
    if tk is None:
        raise BuildFailed("the provisioned nvcc does not run", where=str(root / "bin" / "nvcc"),
                          fix="delete the downloads folder and run again; check --platform")
    if version_tuple(tk.version)[:2] != version_tuple(version)[:2]:
        raise BuildFailed(f"the provisioned nvcc reports CUDA {tk.version}, not {version}",
                          where=str(root / "bin" / "nvcc"), fix="the mirror serves another release; check --base-url")
