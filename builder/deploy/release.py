"""A release: one runtime with the env file and serve script it serves with, copied into the host tree.

The runtime's identity is package's archive name (recipe, upstream build, toolkit, commit, system, arch:
builder.release.package.archive_stem) plus the first 12 hex of manifest.json's sha256, which lists every
file's sha256: two builds of one recipe and commit with other options differ there. A release adds the
first 8 hex of its configuration (env file + serve script), so the same runtime served with another
model or port is another release and the one in service is never edited in place.

The runtime is copied, never hard-linked to its source (a hard link would let a rebuild of the source
folder change the bytes in service), each file fsync'd, then the copy is checked against the manifest's
hashes (what serves is exactly what was verified, even if the source changed after verify), then renamed
into place. A file another release of the same tree already holds, byte for byte, is a hard link to it
instead of a copy (builder.deploy.shared): the tree stores each distinct file once.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder import __version__
from builder.check.report import FAIL
from builder.deploy import ledger as owned
from builder.deploy.layout import ENV, PARTIAL_TAG, RECORD, RUNTIME, SERVE, HostTree
from builder.deploy.shared import donors, linker
from builder.errors import AssembleError, BuildFailed
from builder.locks import Ledger
from builder.runtime.manifest import NAME as MANIFEST, Manifest, ManifestInvalid, check_files


@dataclass(frozen=True)
class RuntimeInfo:
    path: Path                    # the runtime folder deployed from
    identity: str                 # archive stem + manifest digest
    recipe: str
    sha: str | None
    backends: tuple[str, ...]
    manifest_sha256: str

    def as_dict(self) -> dict[str, Any]:
        return {"identity": self.identity, "recipe": self.recipe, "sha": self.sha, "backends": list(self.backends),
                "manifest_sha256": self.manifest_sha256, "source": str(self.path)}


def checked_runtime(given: str | Path) -> RuntimeInfo:
    """The runtime, refused unless it passes every check of `verify --static` (exit 1 with verify's lines,
    the gate `package` uses), or is not a runtime folder at all (exit 2)."""
    from builder.check.verify import failed_lines, verify_runtime
    from builder.release.package import archive_stem

    path = Path(os.path.abspath(Path(given).expanduser()))
    if not path.is_dir():
        raise AssembleError("the runtime is not a folder", where=str(path),
                            fix="give the runtime folder assemble build or repair made (runtime-<recipe>/)")
    try:
        m = Manifest.load(path)
    except ManifestInvalid as exc:
        raise AssembleError(f"not a runtime assemble made ({exc.what})", where=str(path),
                            fix="give the runtime folder assemble build or repair made (runtime-<recipe>/)") from None
    if m.platform != "linux":
        raise AssembleError(f"a {m.platform} runtime cannot be deployed as a systemd service", where=str(path),
                            fix="deploy a Linux runtime")
    report = verify_runtime(path, static=True)
    if not report.passed:
        failed = sum(c.status == FAIL for c in report.checks)
        raise BuildFailed(f"the runtime fails verify --static ({failed} check(s), below): it is not deployed",
                          where=str(path), fix="rebuild it (assemble build) or repair it again; never edit a "
                          "runtime by hand", details=failed_lines(report))
    digest = hashlib.sha256((path / MANIFEST).read_bytes()).hexdigest()
    return RuntimeInfo(path, f"{archive_stem(path, m)}-{digest[:12]}", m.recipe.name, m.llama_cpp.sha,
                       tuple(m.recipe.backends) or ("cpu",), digest)


@dataclass(frozen=True)
class ReleasePlan:
    """Everything a release folder holds but the runtime's bytes."""
    release_id: str
    runtime: RuntimeInfo
    env: str                  # the env file's text
    serve: str                # the serve script's text
    record: dict[str, Any]    # release.json (without its time)


def plan_release(runtime: RuntimeInfo, env: str, serve: str, model_path: str, model_size: int, port: int,
                 env_values: dict[str, str], secrets: dict[str, str] | None = None) -> ReleasePlan:
    release_id = f"{runtime.identity}.{config_digest(env, serve)}"
    # The env file and serve script are hashed like the runtime's files: an edit by hand (another context
    # size, more slots) makes the release something its ID does not say, and intact() refuses it.
    files = {name: hashlib.sha256(text.encode()).hexdigest() for name, text in ((ENV, env), (SERVE, serve))}
    record = {"release": release_id, "runtime": runtime.as_dict(), "model": {"path": model_path, "size": model_size},
              "port": port, "env": env_values, "files": files, "created_by": f"assemble {__version__}"}
    if secrets:
        record["secrets"] = secrets          # NAME -> the file's path (the unit's LoadCredential=), never its bytes
    return ReleasePlan(release_id, runtime, env, serve, record)


def config_digest(env: str, serve: str) -> str:
    """The configuration part of a release ID: 8 hex of the env file and serve script together."""
    return hashlib.sha256(f"{env}\0{serve}".encode()).hexdigest()[:8]


def intact(folder: Path, release_id: str) -> str | None:
    """Why the release folder is not what deploy made (None: it is, every runtime file by its hash)."""
    try:
        record = json.loads((folder / RECORD).read_text())
        if record.get("release") != release_id:
            return f"{RECORD} names release {record.get('release')!r}"
        problems = check_files(folder / RUNTIME, Manifest.load(folder / RUNTIME))
        return f"{RUNTIME}/{problems[0]}" if problems else _config_changed(folder, record)
    except (OSError, ValueError, ManifestInvalid) as exc:
        return f"unreadable ({getattr(exc, 'what', None) or exc})"


def _config_changed(folder: Path, record: dict[str, Any]) -> str | None:
    """Why the env file or serve script is not what the release was made with (None: both are). A release
    made before release.json held their hashes is checked against the configuration part of its ID."""
    texts = {}
    for name in (ENV, SERVE):
        path = folder / name
        if path.is_symlink() or not path.is_file():
            return f"{name} is missing"
        texts[name] = path.read_bytes()
    files = record.get("files")
    if isinstance(files, dict):
        for name, data in texts.items():
            if hashlib.sha256(data).hexdigest() != files.get(name):
                return f"{name} was changed after deploy wrote it (its sha256 is not the one in {RECORD})"
        return None
    try:
        config = config_digest(texts[ENV].decode(), texts[SERVE].decode())
    except UnicodeDecodeError:
        config = None
    if not str(record.get("release", "")).endswith(f".{config}"):
        return f"{ENV} or {SERVE} was changed after deploy wrote it (the release ID's configuration part differs)"
    return None


def stage(tree: HostTree, ledger: Ledger, plan: ReleasePlan) -> tuple[Path, Ledger, bool]:
    """releases/ID, made (or reused when an intact one is there); (path, ledger, reused)."""
    final = tree.release(plan.release_id)
    if os.path.lexists(final):
        if owned.owns(tree, ledger, final) and (why := intact(final, plan.release_id)) is None:
            return final, ledger, True
        why = "not one deploy wrote" if not owned.owns(tree, ledger, final) else why
        raise AssembleError(f"a release folder of this name is in the way ({why}); it is never replaced",
                            where=str(final), fix="move it away (a damaged release of deploy's: out of releases/)")
    tree.releases.mkdir(parents=True, exist_ok=True)
    partial = tree.releases / f"{plan.release_id}{PARTIAL_TAG}{secrets.token_hex(4)}"
    ledger = owned.intend_partial(tree, ledger, partial)  # before its mkdir: a kill right after leaves it cleanable
    partial.mkdir()
    ledger = owned.start_partial(tree, ledger, partial)   # before anything is copied: a kill leaves it cleanable
    linked: list[str] = []
    manifest = Manifest.load(plan.runtime.path)
    shutil.copytree(plan.runtime.path, partial / RUNTIME, symlinks=True,
                    copy_function=linker(plan.runtime.path, manifest, donors(tree, ledger), _copy_synced, linked))
    problems = check_files(partial / RUNTIME, Manifest.load(partial / RUNTIME))
    if problems and linked:     # a shared file that is not what its release's manifest says: copy it all
        shutil.rmtree(partial / RUNTIME)
        shutil.copytree(plan.runtime.path, partial / RUNTIME, symlinks=True, copy_function=_copy_synced)
        problems = check_files(partial / RUNTIME, Manifest.load(partial / RUNTIME))
    if problems:
        raise BuildFailed(f"the runtime changed while it was copied ({problems[0]}); nothing was switched",
                          where=str(plan.runtime.path), fix="deploy again once nothing writes to the runtime")
    _write(partial / ENV, plan.env, 0o644)
    _write(partial / SERVE, plan.serve, 0o755)
    _write(partial / RECORD, json.dumps({**plan.record, "time": _utc()}, indent=2) + "\n", 0o644)
    for folder, _, _ in os.walk(partial):
        owned.fsync_dir(Path(folder))
    return final, owned.move(tree, ledger, partial, final), False


def _copy_synced(src: str, dst: str) -> str:
    shutil.copy2(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return dst


def _write(path: Path, text: str, mode: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(path, mode)


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
