"""The licence texts a runtime carries: licenses/<component>/<text>, one folder per component.

llama.cpp's own files are under the LICENSE of the tree they were built from (ggml's too: the
pinned tree has one LICENSE for both, and its licenses/ folder holds the notices of code compiled
into the binaries); a prebuilt input brings the LICENSE upstream put beside its executables. Each
vendor file is under the licence its package ships, found where the package put it:

    the recipe's [bundle.licenses] table    a library no package names, stated by hand
    Debian's copyright file                 /usr/share/doc/<package>/copyright (dpkg's database, or
                                            the .deb inputs of repair)
    a Python wheel's .dist-info             NVIDIA's License.txt, a LICENSE under licenses/
    a GPU toolkit's root                    CUDA's EULA.txt beside lib64/ (a runfile install)

A file whose licence is found nowhere is left uncovered; `package` refuses such a runtime, naming it.
The texts are copied and hashed like every other file (manifest role "license"); the manifest maps
each component to its texts, its SPDX expression when known, and the files it covers.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from builder.runtime.layout import LICENSES_DIR
from builder.runtime.manifest import BUILT, FileEntry, LicenseRecord
from builder.runtime.owners import Owner, owners
from builder.runtime.place import BundleResult, copy_file

LLAMA = "llama.cpp"
ROLE = "license"

# SPDX expressions of components whose texts say it in no form read here (fnmatch on the component).
KNOWN_SPDX = (
    (LLAMA, "MIT"),
    ("libgomp*", "GPL-3.0-or-later WITH GCC-exception-3.1"),     # GCC's runtime libraries
    ("libgcc-s*", "GPL-3.0-or-later WITH GCC-exception-3.1"),
    ("libstdc++*", "GPL-3.0-or-later WITH GCC-exception-3.1"),
    ("libatomic*", "GPL-3.0-or-later WITH GCC-exception-3.1"),
    ("libquadmath*", "GPL-3.0-or-later WITH GCC-exception-3.1"),
    ("nvidia-*", "LicenseRef-NVIDIA-Software-License-Agreement"),  # NVIDIA's EULA governs redistribution
    ("cuda", "LicenseRef-NVIDIA-Software-License-Agreement"),
)
# Debian's short licence names (copyright-format 1.0) that are SPDX ids under another spelling.
_DEBIAN_SPDX = {"expat": "MIT", "mit": "MIT", "bsd-2-clause": "BSD-2-Clause", "bsd-3-clause": "BSD-3-Clause",
                "apache-2.0": "Apache-2.0", "ncsa": "NCSA", "zlib": "Zlib", "isc": "ISC", "mpl-2.0": "MPL-2.0",
                "gpl-2+": "GPL-2.0-or-later", "gpl-2": "GPL-2.0-only", "gpl-3+": "GPL-3.0-or-later",
                "lgpl-2.1+": "LGPL-2.1-or-later", "lgpl-2.1": "LGPL-2.1-only", "lgpl-3+": "LGPL-3.0-or-later",
                "bsl-1.0": "BSL-1.0", "unicode-dfs-2016": "Unicode-DFS-2016",
                "apache-2.0 with llvm exception": "Apache-2.0 WITH LLVM-exception"}
# The plain SPDX ids the tables above give (each in CycloneDX's SPDX list: the SBOM writes them as ids,
# any other expression, LicenseRef-... or ... WITH ..., as an expression).
SPDX_IDS = frozenset(spdx for spdx in (*_DEBIAN_SPDX.values(), *(spdx for _, spdx in KNOWN_SPDX))
                     if " " not in spdx and not spdx.startswith("LicenseRef-"))
# LICENSE, LICENSE-jsonhpp, License.txt, COPYING.LIB, copyright, copyright.<package> (a vendor zip's
# Debian texts); never a source, object or build file named after one (llama.cpp's build folder
# holds a generated license.cpp)
_TEXT = re.compile(r"(?i:licen[cs]e|copying|notice|eula|copyright)([._-][\w.+-]*)?")
_NOT_TEXT_SUFFIX = frozenset({"c", "cc", "cpp", "cxx", "cu", "cuh", "h", "hh", "hpp", "hxx", "inc", "in", "py", "pyc",
                              "js", "ts", "rs", "go", "java", "sh", "cmake", "o", "obj", "a", "lib", "so", "dll",
                              "dylib", "exe", "d", "json", "xml", "yml", "yaml", "toml"})
_COMPONENT = re.compile(r"[^A-Za-z0-9._+-]")


@dataclass(frozen=True)
class LicenseSource:
    """One component's licence: the texts to carry and the runtime files they cover."""
    component: str
    texts: tuple[Path, ...]
    spdx: str | None
    source: str                       # where the texts were found, in words
    covers: tuple[str, ...]


# --- llama.cpp's own files ----------------------------------------------------------------

def tree_license(tree: Path, covers: Sequence[str]) -> LicenseSource | None:
    """The pinned tree's LICENSE (ggml/LICENSE when it has its own) and the notices under licenses/."""
    tree = Path(tree)
    texts = [p for p in (tree / "LICENSE", tree / "ggml" / "LICENSE") if p.is_file()]
    if (tree / "licenses").is_dir():
        texts += sorted(p for p in (tree / "licenses").iterdir() if p.is_file() and not p.is_symlink())
    if not texts:
        return None
    return LicenseSource(LLAMA, tuple(texts), spdx_for(LLAMA), f"the llama.cpp tree {tree}", tuple(covers))


def input_license(folders: Iterable[Path], covers: Sequence[str], given: str) -> LicenseSource | None:
    """A prebuilt input's LICENSE: upstream's archives put it beside the executables; a CMake build
    folder names its source tree in CMakeCache.txt (CMAKE_HOME_DIRECTORY)."""
    for folder in folders:
        folder = Path(folder)
        texts = sorted(p for p in folder.iterdir() if p.is_file() and is_text(p.name)) \
            if folder.is_dir() else []
        if texts:
            return LicenseSource(LLAMA, tuple(texts), spdx_for(LLAMA), f"{given}: {folder.name}/", tuple(covers))
        cache = folder / "CMakeCache.txt"
        if cache.is_file():
            m = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.+)$", cache.read_text(errors="replace"), re.MULTILINE)
            if m and (found := tree_license(Path(m.group(1).strip()), covers)) is not None:
                return found
    return None


# --- vendor files -------------------------------------------------------------------------

def vendor_licenses(files: Sequence[tuple[str, str]], *, stated: Sequence[tuple[str, str]] = (),
                    known: Mapping[str, Owner] | None = None, roots: Sequence[Path] = ()) -> list[LicenseSource]:
    """files: (runtime path, origin path) of every vendor library and data file. Each is given the
    licence of the first place that has one (see the module's docstring); the rest stay uncovered."""
    found: dict[tuple[str, ...], list[str]] = defaultdict(list)
    meta: dict[tuple[str, ...], tuple[str, tuple[Path, ...], str | None, str]] = {}
    rest = []
    for rel, origin in files:
        name = PurePosixPath(rel).name
        glob = next((g for g, _ in stated if fnmatchcase(name, g) or fnmatchcase(Path(origin).name, g)), None)
        if glob is not None:
            text = Path(dict(stated)[glob])
            key: tuple[str, ...] = ("stated", glob)
            meta[key] = (_component(name.split(".so")[0]), (text,), None, f"recipe [bundle.licenses] {glob!r}")
            found[key].append(rel)
        else:
            rest.append((rel, origin))
    known = dict(known or {})
    who = owners(sorted({o for _, o in rest if o not in known}))
    for rel, origin in rest:
        owner = known.get(origin) or who.get(origin)
        texts = _owner_texts(owner) if owner else ()
        if owner and texts:
            key = ("owner", owner.kind, owner.name)
            meta[key] = (_component(owner.name), texts, _owner_spdx(owner, texts),
                         f"{'Debian package' if owner.kind == 'deb' else 'wheel'} {owner.name} {owner.version or ''}"
                         .strip())
            found[key].append(rel)
            continue
        root = next((Path(r) for r in roots if Path(origin).is_relative_to(Path(r).resolve())), None)
        texts = _root_texts(root) if root else ()
        if root is not None and texts:
            key = ("root", str(root))
            meta[key] = (_component(root.name), texts, spdx_for("cuda") if (root / "EULA.txt").is_file() else None,
                         f"the toolkit at {root}")
            found[key].append(rel)
    return [LicenseSource(meta[k][0], meta[k][1], meta[k][2], meta[k][3], tuple(v)) for k, v in found.items()]


def _root_texts(root: Path) -> tuple[Path, ...]:
    """A toolkit's own texts: EULA.txt/LICENSE at its top, or licenses/<part>/ (assemble toolchain's layout)."""
    top = [p for p in root.iterdir() if p.is_file() and is_text(p.name)]
    below = [p for p in (root / LICENSES_DIR).rglob("*") if p.is_file()] if (root / LICENSES_DIR).is_dir() else []
    return tuple(sorted(top) + sorted(below))


def _owner_texts(owner: Owner) -> tuple[Path, ...]:
    doc = Path(owner.doc) if owner.doc else None
    if doc is None or not doc.is_dir():
        return ()
    if owner.kind == "deb":
        return (doc / "copyright",) if (doc / "copyright").is_file() else ()
    return tuple(sorted(p for p in doc.rglob("*") if p.is_file() and is_text(p.name)))


def _owner_spdx(owner: Owner, texts: tuple[Path, ...]) -> str | None:
    if (known := spdx_for(owner.name)) is not None:
        return known
    if owner.kind == "pypi" and owner.doc:
        meta = Path(owner.doc) / "METADATA"
        head = meta.read_text(errors="replace").split("\n\n", 1)[0] if meta.is_file() else ""
        m = re.search(r"^License-Expression:\s*(.+)$", head, re.MULTILINE)
        return m.group(1).strip() if m else None
    return debian_spdx(texts[0]) if texts else None


def spdx_for(component: str) -> str | None:
    return next((spdx for glob, spdx in KNOWN_SPDX if fnmatchcase(component, glob)), None)


def debian_spdx(copyright_file: Path) -> str | None:
    """The SPDX expression of a machine-readable Debian copyright file's `Files: *` paragraph, when its
    licence names are ones SPDX spells otherwise; None for free-form files and names it lacks."""
    try:
        text = copyright_file.read_text(errors="replace")
    except OSError:
        return None
    if not text.startswith("Format:"):
        return None
    for para in re.split(r"\n\s*\n", text):
        if re.search(r"^Files:\s*\*\s*$", para, re.MULTILINE):
            m = re.search(r"^License:\s*(.+)$", para, re.MULTILINE)
            if not m:
                return None
            parts = [_DEBIAN_SPDX.get(p.strip().lower()) for p in re.split(r"\s+or\s+", m.group(1).strip())]
            known = [p for p in parts if p]
            return " OR ".join(known) if known and len(known) == len(parts) else None
    return None


def is_text(name: str) -> bool:
    """A licence text by its name: LICENSE, LICENSE.txt, License.txt, COPYING, NOTICE, EULA.txt, copyright."""
    return _TEXT.fullmatch(name) is not None and name.rpartition(".")[2] not in _NOT_TEXT_SUFFIX  # COPYING.LIB is a text


def component_name(name: str) -> str:
    """A folder name under licenses/ (the manifest's file-name grammar)."""
    return _component(name)


def _component(name: str) -> str:
    return _COMPONENT.sub("_", name).lstrip("._+-") or "unknown"


# --- placing ------------------------------------------------------------------------------

def place_licenses(sources: Sequence[LicenseSource], staging: Path) -> tuple[list[FileEntry], list[LicenseRecord]]:
    """Copy each component's texts to licenses/<component>/ (through place's copy, hashed) and describe
    them. Two sources of one component name are merged when their texts are the same files."""
    entries: list[FileEntry] = []
    records: list[LicenseRecord] = []
    by_component: dict[str, LicenseSource] = {}
    for src in sources:
        prev = by_component.get(src.component)
        if prev is not None and prev.texts == src.texts:
            by_component[src.component] = LicenseSource(prev.component, prev.texts, prev.spdx, prev.source,
                                                        prev.covers + src.covers)
            continue
        name = src.component
        n = 2
        while name in by_component:            # another package spelled alike: a folder of its own
            name, n = f"{src.component}-{n}", n + 1
        by_component[name] = LicenseSource(name, src.texts, src.spdx, src.source, src.covers)
    for component, src in sorted(by_component.items()):
        folder = staging / LICENSES_DIR / component
        folder.mkdir(parents=True)
        placed = []
        for text in src.texts:
            dest_name, n = text.name, 2
            while dest_name in placed:         # LICENSE in two sub-folders of a .dist-info: both kept
                dest_name, n = f"{text.parent.name}-{n}-{text.name}", n + 1
            rel = f"{LICENSES_DIR}/{component}/{dest_name}"
            digest, size = copy_file(text, staging / rel, 0o644)
            entries.append(FileEntry(rel, ROLE, str(text.resolve()), digest, size, 0o644))
            placed.append(dest_name)
        records.append(LicenseRecord(component, src.spdx, tuple(f"{LICENSES_DIR}/{component}/{p}" for p in placed),
                                     tuple(sorted(set(src.covers))), src.source))
    return entries, records


def add_licenses(result: BundleResult, staging: Path, own: LicenseSource | None, *,
                 stated: Sequence[tuple[str, str]] = (), known: Mapping[str, Owner] | None = None,
                 roots: Sequence[Path] = ()) -> BundleResult:
    """The placed bundle with licenses/ beside it: own files under `own` (llama.cpp's LICENSE), vendor
    and data files under their packages' texts. What nothing covers is left for `package` to refuse."""
    ours = [f.path for f in result.files if f.role in BUILT]
    sources = [replace(own, covers=tuple(ours))] if own is not None and ours else []
    loose = ("vendor", "data") if sources else (*BUILT, "vendor", "data")   # .deb inputs: own files' packages too
    sources += vendor_licenses([(f.path, f.origin) for f in result.files if f.role in loose],
                               stated=stated, known=known, roots=roots)
    entries, records = place_licenses(sources, Path(staging))
    sizes = dict(result.size_by_role)
    sizes[ROLE] = sum(e.size for e in entries)
    return replace(result, files=tuple(sorted(result.files + tuple(entries), key=lambda f: f.path)),
                   size_by_role=sizes, licenses=tuple(records))
