"""Check an unpacked runtime against what its release stated: `verify --provenance`, `--sha256sums`.

The release's `<stem>.intoto.json` (builder.release.provenance) names the archive and what it
unpacks to: `<folder>/manifest.json` and every file the manifest lists, each by sha256. So a
runtime folder is the released one when its manifest.json has the released digest (the manifest
then vouches for the symlinks and the rest, which verify's own checks hold the folder to) and its
files have theirs. An edited manifest whose hashes were updated to match edited files passes
verify's file checks, never these: the file that differs is named.

`--sha256sums` ties the provenance to the release's SHA256SUMS: the provenance file and the
archive it names must be listed there with the same digests, and every file listed there that
lies beside SHA256SUMS (the archive, the SBOM, the provenance as downloaded) must match, as
`sha256sum -c --ignore-missing` would. The signature that makes any of it trustworthy is GitHub's
(`gh attestation verify`), over the archive and the files beside it: docs/lab/2026-11-29-release.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from builder.check.report import FAIL, PASS, Check
from builder.config.recipe import SHA256_RE
from builder.digest import sha256_file
from builder.errors import AssembleError
from builder.release import provenance
from builder.release.package import SUMS, SUMS_LINE, without_tests
from builder.runtime.layout import OPS_RECORD, in_tests
from builder.runtime.manifest import NAME as MANIFEST, Manifest, ManifestInvalid

_MAX_BYTES = 64 << 20          # a statement of ours is kilobytes; more is not one


@dataclass(frozen=True)
class Released:
    """What one release's provenance states about the archive and the folder it unpacks to."""
    path: Path
    sha256: str                    # of the provenance file itself
    archive: str                   # the archive's file name
    archive_sha256: str
    folder: str                    # what the archive unpacks to: runtime-<recipe>
    manifest_sha256: str
    files: dict[str, str]          # runtime-relative path -> sha256


def _refuse(what: str, path: Path, fix: str = "give the <stem>.intoto.json published with the release") -> AssembleError:
    return AssembleError(what, where=str(path), fix=fix)


def _read(path: Path, what: str) -> bytes:
    if not path.is_file():
        raise _refuse(f"no such {what} file", path, f"give the path of the release's {what} file")
    try:
        if path.stat().st_size > _MAX_BYTES:
            raise _refuse(f"is larger than {_MAX_BYTES >> 20} MiB: not a {what} file of a release", path)
        return path.read_bytes()
    except OSError as exc:
        raise _refuse(f"cannot read the {what} file ({exc.strerror or exc})", path, "check its permissions") from None


def load_provenance(path: Path | str) -> Released:
    """The provenance a release published, checked for shape; one-line refusals (exit 2)."""
    path = Path(path)
    raw = _read(path, "provenance")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        raise _refuse("is not JSON: not an in-toto provenance statement", path) from None
    if not isinstance(doc, dict) or doc.get("_type") != provenance.STATEMENT_TYPE:
        raise _refuse(f"is not an in-toto Statement ({provenance.STATEMENT_TYPE})", path)
    predicate = doc.get("predicate")
    build = predicate.get("buildDefinition") if isinstance(predicate, dict) else None
    if (doc.get("predicateType") != provenance.PREDICATE_TYPE or not isinstance(build, dict)
            or build.get("buildType") != provenance.BUILD_TYPE):
        raise _refuse(f"is not the SLSA provenance assemble package writes (build type {provenance.BUILD_TYPE})", path)
    subjects = doc.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise _refuse("has no subject list", path)
    named: dict[str, str] = {}
    for i, s in enumerate(subjects):
        name = s.get("name") if isinstance(s, dict) else None
        digest = s.get("digest") if isinstance(s, dict) else None
        sha = digest.get("sha256") if isinstance(digest, dict) else None
        if not isinstance(name, str) or not name or not isinstance(sha, str) or not SHA256_RE.fullmatch(sha):
            raise _refuse(f"subject[{i}] has no name or no sha256 digest", path)
        if name in named:
            raise _refuse(f"subject[{i}] names {name[:80]!r} twice", path)
        named[name] = sha
    archive = next(iter(named))
    if "/" in archive:
        raise _refuse(f"its first subject {archive[:80]!r} is not an archive name", path)
    manifests = [n for n in named if n.count("/") == 1 and n.endswith("/" + MANIFEST)]
    if not manifests:
        raise _refuse("names the archive only, not the files it unpacks to (written by an older assemble)", path,
                      "check the archive with sha256sum -c SHA256SUMS, or package the runtime again")
    folder = manifests[0].split("/", 1)[0]
    files: dict[str, str] = {}
    for name, sha in named.items():
        if name in (archive, manifests[0]):
            continue
        top, _, rel = name.partition("/")
        if top != folder or not rel or posixpath.normpath(rel) != rel or rel.startswith(("../", "/")) or rel == "..":
            raise _refuse(f"subject {name[:80]!r} is not a file inside {folder}/", path)
        files[rel] = sha
    return Released(path, hashlib.sha256(raw).hexdigest(), archive, named[archive], folder, named[manifests[0]], files)


def load_sums(path: Path | str) -> dict[str, str]:
    """name -> sha256 from a release's SHA256SUMS; one-line refusals (exit 2)."""
    path = Path(path)
    fix = f"give the {SUMS} file published with the release"
    try:
        text = _read(path, SUMS).decode()
    except UnicodeDecodeError:
        raise _refuse(f"is not text: not a {SUMS} file", path, fix) from None
    lines = [line for line in text.splitlines() if line.strip()]
    matched = [SUMS_LINE.fullmatch(line) for line in lines]
    if not lines or not all(matched):
        bad = next((line for line, m in zip(lines, matched, strict=True) if not m), "")
        raise _refuse(f"is not in sha256sum's format ({'empty' if not lines else repr(bad[:60])})", path, fix)
    return {m.group(2): m.group(1) for m in matched if m}


# --- the checks ----------------------------------------------------------------------

def provenance_checks(runtime: Path, rel: Released) -> list[Check]:
    """manifest.json and every file of `runtime` against the release's statement."""
    runtime = Path(runtime)
    mpath = runtime / MANIFEST
    if not mpath.is_file() or mpath.is_symlink():
        have = None
    else:
        have = sha256_file(mpath)
    source = f"the release's provenance ({rel.path.name}, archive {rel.archive})"
    if have == rel.manifest_sha256:
        # released without tests/ (package's default), the statement names the files the archive holds
        listed = _listed(runtime, with_tests=any(in_tests(p) for p in rel.files))
        agree = listed == rel.files
        return [Check("release manifest", PASS, f"manifest.json is the one {source} names"),
                Check("release files", PASS, f"the {len(rel.files)} released files are those the manifest lists, "
                      "each checked against its sha256 by 'manifest hashes'") if agree else
                Check("release files", FAIL, f"the provenance lists {len(rel.files)} files, its manifest.json "
                      f"{'is unreadable' if listed is None else f'{len(listed)} with other digests'}: not a "
                      "statement assemble package wrote", "download the release's provenance again")]
    found = "missing" if have is None else f"sha256 {have[:16]}..., released {rel.manifest_sha256[:16]}..."
    checks = [Check("release manifest", FAIL, f"manifest.json differs from {source} ({found}): edited after the "
                    "release", "unpack the released archive again; never edit a runtime or its manifest")]
    problems = _file_problems(runtime, rel)
    if problems:
        more = f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""
        checks.append(Check("release files", FAIL, "; ".join(problems[:6]) + more,
                            "unpack the released archive again: these files are not the released ones"))
    else:
        checks.append(Check("release files", PASS, f"the {len(rel.files)} released files are unchanged "
                            "(only manifest.json differs)"))
    return checks


def _listed(runtime: Path, with_tests: bool) -> dict[str, str] | None:
    try:
        m = Manifest.load(runtime)
        return {f.path: f.sha256 for f in (m if with_tests else without_tests(m)).files}
    except ManifestInvalid:
        return None


def _file_problems(runtime: Path, rel: Released) -> list[str]:
    """Each released file hashed (the manifest cannot be trusted), and files the release has not. The
    verify --ops record at the root is neither: every `verify --ops` on a host rewrites it (it is not
    the runtime's identity, which is why it is not in manifest.json either)."""
    problems, present = [], []
    for path in sorted(p for p in rel.files if p != OPS_RECORD):
        p = runtime / path
        if p.is_symlink() or not p.is_file():
            problems.append(f"{path}: missing")
        else:
            present.append(path)
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        digests = dict(zip(present, pool.map(lambda r: sha256_file(runtime / r), present), strict=True))
    problems += [f"{path}: differs from the release (sha256 {d[:16]}...)" for path, d in sorted(digests.items())
                 if d != rel.files[path]]
    for dirpath, _, names in os.walk(runtime):
        for name in sorted(names):
            p = Path(dirpath) / name
            r = p.relative_to(runtime).as_posix()
            if r not in (MANIFEST, OPS_RECORD) and r not in rel.files and p.is_file() and not p.is_symlink():
                problems.append(f"{r}: not in the release")
    return sorted(problems)


def sums_check(sums_path: Path, sums: dict[str, str], rel: Released) -> Check:
    """The provenance and its archive as SHA256SUMS lists them, and the files beside SHA256SUMS."""
    name = f"release {SUMS}"
    wrong = []
    for what, digest in ((rel.path.name, rel.sha256), (rel.archive, rel.archive_sha256)):
        listed = sums.get(what)
        if listed is None:
            wrong.append(f"{what} is not listed")
        elif listed != digest:
            wrong.append(f"{what}: {SUMS} says {listed[:16]}..., the provenance {'file is' if what == rel.path.name else 'says'} "
                         f"{digest[:16]}...")
    beside = sums_path.parent
    checked = absent = 0
    for listed_name, digest in sorted(sums.items()):
        p = beside / listed_name
        if "/" in listed_name or not p.is_file():
            absent += 1
            continue
        checked += 1
        if sha256_file(p) != digest:
            wrong.append(f"{listed_name} (beside {SUMS}): content differs from its line")
    if wrong:
        return Check(name, FAIL, "; ".join(wrong), f"download {SUMS}, the archive and {rel.path.name} again from "
                     "the same release")
    if not checked:
        return Check(name, PASS, f"lists {rel.path.name} and {rel.archive} with the provenance's digests (no file "
                     "it lists lies beside it: none hashed)")
    return Check(name, PASS, f"lists {rel.path.name} and {rel.archive} with the provenance's digests; "
                 f"{checked} file(s) beside it match" + (f" ({absent} absent, not checked)" if absent else ""))
