"""Check an unpacked runtime against what its release stated: `verify --provenance`, `--sha256sums`.

The release's `<stem>.intoto.json` (builder.release.provenance) names the archive and what it
unpacks to: `<folder>/manifest.json` and every file the manifest lists, each by sha256. So a
runtime folder is the released one when its manifest.json has the released digest (the manifest
then vouches for the symlinks and the rest, which verify's own checks hold the folder to) and its
files have theirs. An edited manifest whose hashes were updated to match edited files passes
verify's file checks, never these: the file that differs is named. Every other claim the
statement makes (llama.cpp's commit and build, the recipe, backends, GPU targets, the glibc
promise, inputs, each unit's commands, the dependencies, the archive's, folder's and SBOM's
names) must be what `package` writes from that manifest.json: the statement is derived again
with provenance.statement, the one home of its shape, and compared claim by claim (`release
provenance`), so a claim edited in the provenance, with SHA256SUMS updated to match, is named.

`--sha256sums` ties the provenance to the release's SHA256SUMS: the provenance file, the
archive and the SBOM it names must be listed there with the same digests, and every file listed
there that lies beside SHA256SUMS (the archive, the SBOM, the provenance as downloaded) must match, as
`sha256sum -c --ignore-missing` would. The signature that makes any of it trustworthy is GitHub's
(`gh attestation verify`), over the archive and the files beside it: docs/lab/2026-11-29-release.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder import windows
from builder.check.report import FAIL, PASS, Check
from builder.config.recipe import SHA256_RE
from builder.digest import sha256_file
from builder.errors import AssembleError
from builder.release import provenance
from builder.release.formats import FORMATS, WINDOWS_FORMAT
from builder.release.package import SUMS, SUMS_LINE, archive_stem, runtime_folder_name, without_tests
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
    statement: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)   # the whole document


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
    return Released(path, hashlib.sha256(raw).hexdigest(), archive, named[archive], folder, named[manifests[0]], files,
                    doc)


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
    """manifest.json and every file of `runtime` against the release's statement, then every other
    claim of the statement against what manifest.json determines."""
    runtime = Path(runtime)
    mpath = runtime / MANIFEST
    if not mpath.is_file() or mpath.is_symlink():
        have = None
    else:
        have = sha256_file(mpath)
    source = f"the release's provenance ({rel.path.name}, archive {rel.archive})"
    m = _load(runtime)
    if have == rel.manifest_sha256:
        # released without tests/ (package's default), the statement names the files the archive holds
        listed = None if m is None else _listed(m, with_tests=any(in_tests(p) for p in rel.files))
        differ = [] if listed is None else _subject_problems(rel, listed)
        agree = listed == rel.files
        return [Check("release manifest", PASS, f"manifest.json is the one {source} names"),
                Check("release files", PASS, f"the {len(rel.files)} released files are those the manifest lists, "
                      "each checked against its sha256 by 'manifest hashes'") if agree else
                Check("release files", FAIL, ("manifest.json is unreadable" if listed is None else _joined(differ))
                      + ": not a statement assemble package wrote", "download the release's provenance again"),
                claims_check(runtime, m, rel, manifest_released=True)]
    found = "missing" if have is None else f"sha256 {have[:16]}..., released {rel.manifest_sha256[:16]}..."
    checks = [Check("release manifest", FAIL, f"manifest.json differs from {source} ({found}): edited after the "
                    "release", "unpack the released archive again; never edit a runtime or its manifest")]
    problems = _file_problems(runtime, rel)
    if problems:
        checks.append(Check("release files", FAIL, _joined(problems),
                            "unpack the released archive again: these files are not the released ones"))
    else:
        checks.append(Check("release files", PASS, f"the {len(rel.files)} released files are unchanged "
                            "(only manifest.json differs)"))
    checks.append(claims_check(runtime, m, rel, manifest_released=False))
    return checks


def _joined(problems: list[str], most: int = 6) -> str:
    more = f" (and {len(problems) - most} more)" if len(problems) > most else ""
    return "; ".join(problems[:most]) + more


def _load(runtime: Path) -> Manifest | None:
    try:
        return Manifest.load(runtime)
    except ManifestInvalid:
        return None


def _listed(m: Manifest, with_tests: bool) -> dict[str, str]:
    return {f.path: f.sha256 for f in (m if with_tests else without_tests(m)).files}


def _subject_problems(rel: Released, listed: dict[str, str]) -> list[str]:
    """The statement's file subjects against the files manifest.json lists: each named once (load_provenance
    refused a name given twice), none left out, none added, each with the manifest's digest."""
    out = [f"{rel.folder}/{p}: manifest.json lists it, the provenance does not name it" for p in sorted(listed)
           if p not in rel.files]
    out += [f"{rel.folder}/{p}: named by the provenance, not a file manifest.json lists" for p in sorted(rel.files)
            if p not in listed]
    out += [f"{rel.folder}/{p}: the provenance claims sha256 {d[:16]}..., manifest.json says {listed[p][:16]}..."
            for p, d in sorted(rel.files.items()) if p in listed and listed[p] != d]
    return out


# --- the claims ----------------------------------------------------------------------------

# builder.id is urn:assemble:<version>: the version of the assemble that ran `package`, which
# manifest.json does not record (it records the one that built: created_by, and a runtime may be
# packaged by a newer assemble), so only the tool is checked, not its version: purely informational.
_BUILDER_ID = re.compile(r"urn:assemble:[^\s/]+")
# Where a claim sits, shortened for its line: claims source.sha=..., not
# predicate.buildDefinition.externalParameters.source.sha=...
_SHORT = ("predicate.buildDefinition.externalParameters.", "predicate.buildDefinition.internalParameters.",
          "predicate.buildDefinition.", "predicate.runDetails.", "predicate.")


def claims_check(runtime: Path, m: Manifest | None, rel: Released, manifest_released: bool) -> Check:
    """`release provenance`: the statement derived again from manifest.json, as `package` derives it
    (provenance.statement), compared with the one released, claim by claim. What manifest.json cannot
    determine is taken from the statement itself and checked elsewhere: the archive's and the SBOM's
    digests (against SHA256SUMS: sums_check), the manifest's digest (`release manifest`), the file
    subjects' names and digests (`release files`, against the files themselves when manifest.json is
    not the released one), builder.id's version (above). Every other field must be one `package`
    writes with the value it would write: a field it never writes fails too (runDetails.metadata
    included, which it leaves empty), since the file is written whole by `package` and nothing in a
    release pipeline amends it (GitHub's attestation is a document of its own): an extra field is a
    claim no one made that nothing here could check, so it is not passed as if checked."""
    name = "release provenance"
    if m is None:
        return Check(name, FAIL, "manifest.json is missing or unreadable: none of the provenance's claims could be "
                     "checked", "unpack the released archive again")
    derived, problems = _derive(runtime, m, rel)
    claimed = rel.statement
    for i, s in enumerate(claimed.get("subject") or []):      # load_provenance checked each has a name and a sha256
        if set(s) != {"name", "digest"} or set(s["digest"]) != {"sha256"}:
            extra = sorted({*s, *s["digest"]} - {"name", "digest", "sha256"})
            problems.append(f"claims subject[{i}] ({str(s['name'])[:60]}) has {', '.join(map(str, extra))}, "
                            "manifest.json says none")
    _diff("", {k: v for k, v in claimed.items() if k != "subject"},
          {k: v for k, v in derived.items() if k != "subject"}, problems)
    if problems:
        fix = ("unpack the released archive again: manifest.json is not the released one (release manifest)"
               if not manifest_released else
               "the provenance is not the one package wrote for this runtime: download it again from the release "
               "and check it with gh attestation verify")
        return Check(name, FAIL, _joined(problems), fix)
    return Check(name, PASS, "every claim (commit, recipe, backends, GPU targets, glibc promise, inputs, units, "
                 "dependencies, archive and folder names) is what manifest.json says")


def _derive(runtime: Path, m: Manifest, rel: Released) -> tuple[dict[str, Any], list[str]]:
    """The statement `package` would write for this manifest, with what manifest.json cannot determine
    taken from the released one; and the problems found on the way (the archive's and the folder's names)."""
    problems = []
    folder = runtime_folder_name(m)
    if rel.folder != folder:
        problems.append(f"claims folder={_show(rel.folder)}, manifest.json says {_show(folder)}")
    try:
        stem: str | None = archive_stem(runtime, m)        # reads an own ELF file of the runtime for its arch
    except AssembleError as exc:
        stem = None
        problems.append(f"claims archive={_show(rel.archive)}, which manifest.json cannot name here ({exc.what})")
    if stem is not None:
        fmts = [WINDOWS_FORMAT] if m.platform == windows.PLATFORM else [f for f in FORMATS if f != WINDOWS_FORMAT]
        if rel.archive not in (names := [f"{stem}.{f}" for f in fmts]):
            problems.append(f"claims archive={_show(rel.archive)}, manifest.json says {' or '.join(names)}")
    # the SBOM beside the archive: its name follows from the manifest, its digest is SHA256SUMS' (sums_check)
    claimed_boms = _byproducts(rel)
    bom = f"{stem}.cdx.json" if stem is not None else next(iter(claimed_boms), "")
    shipped = m if any(in_tests(p) for p in rel.files) else without_tests(m)
    derived = provenance.statement(shipped, rel.archive, rel.archive_sha256,
                                   {bom: claimed_boms.get(bom, next(iter(claimed_boms.values()), "0" * 64))},
                                   folder=rel.folder, manifest_sha256=rel.manifest_sha256)
    builder = _run_details(rel).get("builder")
    claimed_id = builder.get("id") if isinstance(builder, dict) else None
    derived["predicate"]["runDetails"]["builder"]["id"] = (
        claimed_id if isinstance(claimed_id, str) and _BUILDER_ID.fullmatch(claimed_id) else "urn:assemble:<version>")
    return derived, problems


def _byproducts(rel: Released) -> dict[str, str]:
    """name -> sha256 of the files the statement says were written beside the archive (the SBOM), as far
    as they are well formed (a malformed one is a claim that differs: claims_check names it)."""
    items = _run_details(rel).get("byproducts")
    out: dict[str, str] = {}
    for b in items if isinstance(items, list) else []:
        digest = b.get("digest") if isinstance(b, dict) else None
        sha = digest.get("sha256") if isinstance(digest, dict) else None
        if isinstance(b, dict) and isinstance(b.get("name"), str) and isinstance(sha, str) and SHA256_RE.fullmatch(sha):
            out[b["name"]] = sha
    return out


def _run_details(rel: Released) -> dict[str, Any]:
    predicate = rel.statement.get("predicate")
    run = predicate.get("runDetails") if isinstance(predicate, dict) else None
    return run if isinstance(run, dict) else {}


def _diff(path: str, claimed: Any, derived: Any, out: list[str]) -> None:
    """Each claim that differs, by where it sits: objects key by key (the derived order, then keys only
    the claim has), lists of objects of the same length item by item, anything else as one value.
    A value is equal only with its type: true is not 1."""
    def where(key: Any) -> str:
        return f"{path}.{key}" if path else str(key)
    if isinstance(claimed, dict) and isinstance(derived, dict):
        for key in [*derived, *sorted((k for k in claimed if k not in derived), key=str)]:
            if key not in claimed:
                out.append(f"claims no {_short(where(key))}, manifest.json says {_show(derived[key])}")
            elif key not in derived:
                out.append(f"claims {_short(where(key))}={_show(claimed[key])}, manifest.json says none")
            else:
                _diff(where(key), claimed[key], derived[key], out)
    elif (isinstance(claimed, list) and isinstance(derived, list) and len(claimed) == len(derived)
          and any(isinstance(d, dict) for d in derived)):
        for i, (c, d) in enumerate(zip(claimed, derived, strict=True)):
            _diff(f"{path}[{i}]", c, d, out)
    elif json.dumps(claimed, sort_keys=True) != json.dumps(derived, sort_keys=True):
        out.append(f"claims {_short(path)}={_show(claimed)}, manifest.json says {_show(derived)}")


def _short(path: str) -> str:
    return next((path.removeprefix(p) for p in _SHORT if path.startswith(p)), path)


def _show(value: Any, most: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= most else text[:most - 3] + "..."


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
    """The provenance, its archive and the SBOM it names (its byproduct) as SHA256SUMS lists them, and
    the files beside SHA256SUMS."""
    name = f"release {SUMS}"
    wrong = []
    stated = [(rel.path.name, rel.sha256), (rel.archive, rel.archive_sha256), *_byproducts(rel).items()]
    for what, digest in stated:
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
        return Check(name, PASS, f"lists {', '.join(n for n, _ in stated)} with the provenance's digests (no file "
                     "it lists lies beside it: none hashed)")
    return Check(name, PASS, f"lists {', '.join(n for n, _ in stated)} with the provenance's digests; "
                 f"{checked} file(s) beside it match" + (f" ({absent} absent, not checked)" if absent else ""))
