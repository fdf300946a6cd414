"""Bundle: every library a runtime needs, copied right, and nothing it must not carry.

Two steps, as the design card says:
  plan_bundle   reads ELF headers only: the closure of every NEEDED (ld.so
                semantics, builder.elf), the policy (builder.policy), vendor
                data folders, and which vendor libraries must be pinned;
  place_bundle  copies into an empty staging folder: vendor bytes untouched,
                SONAME symlinks recreated relative, own files given DT_RPATH
                (never RUNPATH: LD_LIBRARY_PATH is searched before RUNPATH),
                data folders copied with their structure (never `cp -r`).

Layout: own files go where OwnFile.dest says (bin/ or lib/); every vendor
library goes to lib/; a data folder goes beside the library that reads it.
"""

from __future__ import annotations

import itertools
import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Any

from builder.config.glibc import SYMBOL_PREFIX
from builder.digest import sha256_file
from builder.errors import FAILED, AssembleError, BuildFailed
from builder.runtime.elf import ElfInfo, Lookup, lookup, max_version, read_elf, section_strings, symlink_chain
from builder.runtime.layout import (KINDS, LIB_DIR, OwnFile, arch_tokens, expected_places, is_ggml_loader,
                                    module_links_in_tests)
from builder.runtime.policy import BUNDLE, classify, companions_for, data_rules_for

OWN, VENDOR, DATA, TEST = "own", "vendor", "data", "test"     # manifest roles (manifest.ROLES)


# --- plain data between the stages ------------------------------------------


@dataclass(frozen=True)
class Refusals:
    """How a caller words what the bundler cannot do: the fix for a library nothing provides, the fix
    for one soname found as two different files, and the exit status. build's fault lies in its
    toolchains and recipe (exit 1); repair's in its inputs and --lib-path (exit 2)."""
    unresolved: str
    conflict: str
    code: int


BUILD_REFUSALS = Refusals(
    unresolved="install them or add their folder to the toolchain's library dirs; if the host must provide one, "
               "list it under the recipe's [bundle.never] with a reason",
    conflict="make the toolchain library folders agree (one CUDA/ROCm install per runtime)",
    code=FAILED)


@dataclass(frozen=True)
class OwnPlan:
    source: Path
    dest: str
    kind: str
    links: tuple[str, ...]            # OwnFile.links, plus the SONAME link when it was missing
    rpath: str | None                 # DT_RPATH to set; None: leave the file's bytes as they are
                                      # (not ELF, or a module that inherits its loader's DT_RPATH)
    pins: tuple[tuple[str, str], ...] = ()   # (soname, why) added as NEEDED so the bundled copy wins


@dataclass(frozen=True)
class VendorPlan:
    soname: str                       # the name it is needed as
    source: Path                      # where ld.so found it (may be a symlink)
    real: Path                        # the file whose bytes are copied
    dest: str                         # lib/<real file name>
    links: tuple[tuple[str, str], ...]   # (link path in the runtime, relative target)
    needed_by: tuple[str, ...]
    reason: str
    via: str                          # lookup step that found it: rpath | runpath | extra | ldconfig | system


@dataclass(frozen=True)
class DataPlan:
    library: str                      # runtime path of the library that reads it
    source: Path                      # the folder beside the source library
    dest: str                         # "lib/rocblas/4.4.1/library"
    files: tuple[tuple[str, int], ...]   # (path relative to the folder, size) after pruning
    archs: tuple[str, ...]            # GPU archs kept; () = all
    pruned: int                       # files left out by arch pruning
    reason: str


@dataclass(frozen=True)
class SystemLib:
    soname: str
    decision: str                     # never | system
    reason: str
    needed_by: tuple[str, ...]


@dataclass(frozen=True)
class BundlePlan:
    own: tuple[OwnPlan, ...]
    vendor: tuple[VendorPlan, ...]
    data: tuple[DataPlan, ...]
    system: tuple[SystemLib, ...]
    glibc_min: str | None
    glibcxx_min: str | None
    warnings: tuple[str, ...] = ()
    test_links: tuple[tuple[str, str], ...] = ()   # tests/libggml-*.so -> ../bin/...: layout.module_links_in_tests

    def total_bytes(self) -> int:
        own = sum(p.source.stat().st_size for p in self.own)
        vendor = sum(v.real.stat().st_size for v in self.vendor)
        return own + vendor + sum(s for d in self.data for _, s in d.files)


# --- planning ----------------------------------------------------------------

@dataclass
class _Node:
    """A vendor library found during the walk (mutable while planning)."""
    soname: str
    source: Path
    real: Path
    info: ElfInfo
    reason: str
    via: str
    loaders: tuple[ElfInfo, ...]
    links: dict[str, str] = field(default_factory=dict)   # link name -> target name (same folder)
    needed_by: list[str] = field(default_factory=list)


def _check_dest(dest: str, what: str) -> str:
    p = PurePosixPath(dest)
    if p.is_absolute() or ".." in p.parts or not p.parts or dest != str(p):
        raise AssembleError(f"{what} destination {dest!r} is not a clean relative path",
                            fix='use a path such as "bin/llama-server" or "lib/libllama.so.0.0.1"')
    return dest


def _rpath_for(dest: str, needed_dirs: Sequence[str]) -> str:
    here = str(PurePosixPath(dest).parent)
    parts = []
    for d in needed_dirs:
        rel = os.path.relpath(d, here)
        entry = "$ORIGIN" if rel == "." else f"$ORIGIN/{rel}"
        if entry not in parts:
            parts.append(entry)
    return ":".join(parts)


def _carries_rpath(dest: str, info: ElfInfo, dirs: Sequence[str], pins: tuple[tuple[str, str], ...]) -> bool:
    """A file already linked with a DT_RPATH that names exactly the folders it needs, relative to
    $ORIGIN (as `build` links them: layout.LINK_RPATH), with no DT_RUNPATH and no pin to add,
    stays byte for byte: editing it would change nothing the loader does."""
    if pins or info.runpath or not info.rpath:
        return False
    here = posixpath.dirname(dest)
    found = []
    for entry in info.rpath:
        origin = next((o for o in ("${ORIGIN}", "$ORIGIN") if entry == o or entry.startswith(o + "/")), None)
        if origin is None:
            return False
        found.append(posixpath.normpath(posixpath.join(here, entry[len(origin):].lstrip("/"))))
    return list(dict.fromkeys(found)) == list(dict.fromkeys(dirs))


def _inherits_loader_rpath(f: OwnFile, info: ElfInfo, dirs: Sequence[str], pins: tuple[tuple[str, str], ...],
                           has_loader: bool) -> bool:
    """A backend module with neither DT_RPATH nor DT_RUNPATH, needing only lib/, stays byte for byte.

    glibc searches such an object's dependencies in the DT_RPATH of its loader chain: libggml,
    which dlopen()s it (its DT_RPATH is $ORIGIN, lib/), then the executable ($ORIGIN/../lib),
    both before LD_LIBRARY_PATH. Setting the same folder on the module itself changes nothing
    that loads, and costs patchelf a rewrite of the whole file (1.2 GB for a HIP module).
    verify models the same rule (check.static: the loader chain in its walk and RPATH check).
    """
    return (has_loader and f.kind == "module" and not info.rpath and not info.runpath and not pins
            and set(dirs) == {LIB_DIR})


def _same_content(a: Path, b: Path) -> bool:
    """Same file (inode) or same bytes; only two distinct files of equal size are hashed."""
    sa, sb = a.stat(), b.stat()
    if (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino):
        return True
    if sa.st_size != sb.st_size:
        return False
    return sha256_file(a) == sha256_file(b)


_SONAME_CHAR = "[A-Za-z0-9_.+-]"


def _glob_regex(glob_pattern: str) -> bytes:
    """A soname glob as a regex over a library's strings ("libamd_comgr.so*" -> libamd_comgr\\.so[...]*).

    Written out here, not via fnmatch.translate, whose output format changes between Pythons
    (3.14 ends it with \\z): `*` and `?` match soname characters only, everything else literally."""
    parts = {"*": _SONAME_CHAR + "*", "?": _SONAME_CHAR}
    return "".join(parts.get(c, re.escape(c)) for c in glob_pattern).encode()


def _own_names(own: Sequence[OwnFile]) -> tuple[dict[str, ElfInfo | None], dict[str, str], dict[str, tuple[str, ...]]]:
    """Check the build files; return their ELF facts, the names own libraries answer to, and their links."""
    if not own:
        raise AssembleError("nothing to bundle: no files from the build", fix="build at least one target first")
    infos: dict[str, ElfInfo | None] = {}
    provided: dict[str, str] = {}
    links_of: dict[str, tuple[str, ...]] = {}
    for f in own:
        _check_dest(f.dest, f"{f.kind} {Path(f.source).name}")
        if f.kind not in KINDS:
            raise AssembleError(f"unknown kind {f.kind!r} for {f.dest}", fix=f"use one of: {', '.join(KINDS)}")
        if f.dest in infos:
            raise AssembleError(f"two build files are placed at {f.dest}", fix="give each file its own destination")
        if not Path(f.source).is_file():
            raise BuildFailed("build output missing", where=str(f.source), fix="rebuild the unit; the file is gone")
        info = infos[f.dest] = read_elf(f.source)
        links = tuple(f.links)
        if f.kind == "library":
            names = {PurePosixPath(f.dest).name, *links}
            if info is not None and info.soname and info.soname not in names:
                links += (info.soname,)       # ld.so opens a library by its SONAME: that name must exist
                names.add(info.soname)
            for n in names:
                if provided.get(n, f.dest) != f.dest:
                    raise AssembleError(f"two build libraries answer to {n}: {provided[n]} and {f.dest}",
                                        fix="keep one of them (merge picks one ggml/llama set)")
                provided[n] = f.dest
        links_of[f.dest] = links
    return infos, provided, links_of


class _Walk:
    """The closure: every NEEDED (and policy-listed dlopen) of our files, resolved as ld.so would."""

    def __init__(self, provided: dict[str, str], search_dirs: tuple[Path, ...], recipe: Any) -> None:
        self.provided, self.search_dirs, self.recipe = provided, search_dirs, recipe
        self.nodes: dict[str, _Node] = {}                 # every name a vendor library is needed as
        self.by_identity: dict[tuple[int, int], _Node] = {}
        self.system: dict[str, SystemLib] = {}
        self.unresolved: dict[str, list[str]] = {}
        self.passed_over: dict[str, list[str]] = {}
        self.conflicts: list[str] = []
        self.warnings: list[str] = []
        self.edges: dict[str, list[str]] = {}             # requester label -> sonames of vendor libraries
        self.queue: list[tuple[str, ElfInfo, tuple[ElfInfo, ...]]] = []

    def run(self, roots: Sequence[tuple[str, ElfInfo]]) -> None:
        self.queue = [(label, info, ()) for label, info in roots]
        while self.queue:
            label, info, loaders = self.queue.pop(0)     # breadth first, as ld.so loads
            for name in info.needed:
                self.visit(name, label, info, loaders)
            if label in self.nodes:
                self.companions(label, info, loaders)

    def companions(self, label: str, info: ElfInfo, loaders: tuple[ElfInfo, ...]) -> None:
        """What a vendor library dlopens by a name it carries as a string (HIP -> comgr)."""
        for comp in companions_for(label):
            found = section_strings(self.nodes[label].real, _glob_regex(comp.dlopens))
            # "...failed to open libx.so.13.5." ends a sentence: the name stops before the dot
            candidates = dict.fromkeys(n.rstrip(".-_+") for n in found)
            names = [n for n in candidates if fnmatchcase(n, comp.dlopens)]
            if not names:
                self.warnings.append(f"{label} names no {comp.dlopens} to dlopen: not carried ({comp.reason})")
            for n in names:
                if not self.visit(n, label, info, loaders, dlopen=comp.reason, required=comp.required):
                    self.warnings.append(f"{n} (dlopened by {label}) not found: not carried ({comp.reason})")

    def visit(self, name: str, label: str, requester: ElfInfo, loaders: tuple[ElfInfo, ...],
              dlopen: str | None = None, required: bool = True) -> bool:
        """Account for one needed name; False when it could not be found."""
        if name in self.provided:
            return True
        decision, reason = classify(name, self.recipe)
        if decision != BUNDLE:
            prev = self.system.get(name)
            who = prev.needed_by if prev else ()
            self.system[name] = SystemLib(name, decision, reason, who + ((label,) if label not in who else ()))
            return True
        found: Lookup = lookup(name, requester, loaders=loaders, extra_dirs=self.search_dirs)
        node = self.nodes.get(name)
        if node is not None:                              # ld.so reuses the loaded copy: it must be the same one
            if found.path is not None and not _same_content(found.path, node.real):
                self.conflicts.append(f"{name}: {node.source} (for {', '.join(node.needed_by)}) "
                                      f"and {found.path} (for {label})")
        elif found.path is None:
            if required:
                self.unresolved.setdefault(name, []).append(label)
                self.passed_over.setdefault(name, []).extend(f"{p} ({why})" for p, why in found.rejected)
            return False
        else:
            node = self._node(name, found, requester, loaders, f"dlopened by {label}: {dlopen}" if dlopen else reason)
        if label not in node.needed_by:
            node.needed_by.append(label)
        self.edges.setdefault(label, []).append(node.soname)
        return True

    def _node(self, name: str, found: Lookup, requester: ElfInfo, loaders: tuple[ElfInfo, ...],
              reason: str) -> _Node:
        assert found.path is not None, "a node is made for a library that was found"
        chain, real = symlink_chain(found.path)
        st = real.stat()
        node = self.by_identity.get((st.st_dev, st.st_ino))
        if node is None:                                  # the same bytes under another path: copy once
            node = next((o for o in self.by_identity.values()
                         if o.real.name == real.name and _same_content(o.real, real)), None)
        if node is None:
            node = _Node(soname=name, source=found.path, real=real, info=_as_opened(read_elf(real), found.path),
                         reason=reason, via=found.via or "", loaders=(requester, *loaders))
            self.by_identity[(st.st_dev, st.st_ino)] = node
            self.queue.append((name, node.info, node.loaders))
        for a, b in itertools.pairwise(chain):
            node.links.setdefault(a, b)
        if chain[-1] != node.real.name:                   # same bytes reached under another real name
            node.links.setdefault(chain[-1], node.real.name)
        self.nodes[name] = node
        return node

    def fail_if_incomplete(self, refusals: Refusals) -> None:
        if self.unresolved:
            items = []
            for name, who in self.unresolved.items():
                extra = f"; passed over {', '.join(self.passed_over[name])}" if self.passed_over.get(name) else ""
                items.append(f"{name} (needed by {', '.join(who)}{extra})")
            raise BuildFailed(f"unresolved libraries: {'; '.join(items)}", where="bundle", fix=refusals.unresolved)
        if self.conflicts:
            raise BuildFailed(f"one soname, two different files: {'; '.join(self.conflicts)}", where="bundle",
                              fix=refusals.conflict)

    def libraries(self) -> list[_Node]:
        return list(self.by_identity.values())


def plan_bundle(own: Sequence[OwnFile], *, search_dirs: Sequence[Path] = (), recipe: Any = None,
                prune_archs: bool = True, refusals: Refusals = BUILD_REFUSALS) -> BundlePlan:
    """Everything to place, from ELF headers: closure, policy, data folders, pins.

    search_dirs: library folders a recipe's toolchains add (searched after the
    file's own RUNPATH, before ld.so.cache). prune_archs: keep only the
    recipe's hip.targets in vendor data folders (arch-less files always stay).
    Raises BuildFailed naming each unresolved library and who needs it, worded
    and with the exit status of the caller's `refusals`.
    """
    try:
        return _plan_bundle(own, search_dirs, recipe, prune_archs, refusals)
    except BuildFailed as exc:
        exc.code = refusals.code      # whose fault: the build's, or the inputs a repair was given
        raise


def _plan_bundle(own: Sequence[OwnFile], search_dirs: Sequence[Path], recipe: Any, prune_archs: bool,
                 refusals: Refusals) -> BundlePlan:
    infos, provided, links_of = _own_names(own)
    walk = _Walk(provided, tuple(Path(d) for d in search_dirs), recipe)
    walk.run([(f.dest, info) for f in own if (info := infos[f.dest]) is not None])
    walk.fail_if_incomplete(refusals)

    libraries = walk.libraries()
    vendor = tuple(_vendor_plan(n) for n in libraries)
    data, data_warnings = _plan_data(libraries, vendor, recipe, prune_archs)

    # libggml in lib/ is ours, so it gets DT_RPATH $ORIGIN: the loader chain every module inherits
    has_loader = any(PurePosixPath(g.dest).parent == PurePosixPath(LIB_DIR)
                     and is_ggml_loader(PurePosixPath(g.dest).name) for g in own)
    own_plans = []
    for f in own:
        info = infos[f.dest]
        rpath = None
        pins: tuple[tuple[str, str], ...] = ()
        if info is not None and info.has_dynamic:
            dirs = [LIB_DIR] + [str(PurePosixPath(provided[n]).parent) for n in info.needed if n in provided]
            pins = _pins(f.dest, info, walk.nodes, walk.edges)
            if not _inherits_loader_rpath(f, info, dirs, pins, has_loader) \
                    and not _carries_rpath(f.dest, info, dirs, pins):
                rpath = _rpath_for(f.dest, dirs)
        own_plans.append(OwnPlan(source=Path(f.source), dest=f.dest, kind=f.kind, links=links_of[f.dest],
                                 rpath=rpath, pins=pins))
    modules = [PurePosixPath(f.dest).name for f in own if f.kind == "module"]
    test_links = module_links_in_tests(modules) if any(f.kind == "test" for f in own) else ()
    _check_collisions(own_plans, vendor, data, test_links)

    all_infos = [i for i in infos.values() if i is not None] + [n.info for n in libraries]
    glibc = max_version(f"{SYMBOL_PREFIX}{v}" for i in all_infos if (v := i.max_version(SYMBOL_PREFIX)))
    glibcxx = max_version(f"GLIBCXX_{v}" for i in all_infos if (v := i.max_version("GLIBCXX_")))
    return BundlePlan(own=tuple(own_plans), vendor=vendor, data=data,
                      system=tuple(sorted(walk.system.values(), key=lambda s: s.soname)),
                      glibc_min=glibc.removeprefix(SYMBOL_PREFIX) if glibc else None,
                      glibcxx_min=glibcxx.removeprefix("GLIBCXX_") if glibcxx else None,
                      warnings=tuple(walk.warnings + data_warnings), test_links=test_links)


def _as_opened(info: ElfInfo | None, opened: Path) -> ElfInfo:
    """ElfInfo of the real file, but with the path ld.so opened it by ($ORIGIN is that folder)."""
    if info is None:
        raise BuildFailed("not an ELF library", where=str(opened),
                          fix="a linker script or text file sits where a library should be: install the real one")
    return replace(info, path=opened)


def _vendor_plan(n: _Node) -> VendorPlan:
    dest = f"{LIB_DIR}/{n.real.name}"
    links = tuple((f"{LIB_DIR}/{a}", b) for a, b in n.links.items() if a != n.real.name)
    return VendorPlan(soname=n.soname, source=n.source, real=n.real, dest=dest, links=links,
                      needed_by=tuple(n.needed_by), reason=n.reason, via=n.via)


def _hijackable(info: ElfInfo) -> str | None:
    """Why a vendor library's own lookups could miss the bundle's lib/ (None: they cannot).

    With DT_RUNPATH, ld.so searches LD_LIBRARY_PATH first and ignores every
    DT_RPATH up the chain, ours included. A DT_RPATH entry that is not
    $ORIGIN-relative (say /opt/rocm/lib) is searched before our lib/ too.
    """
    if info.runpath:
        return f"RUNPATH {':'.join(info.runpath)}"
    outside = [e for e in info.rpath if e and _leaves_runtime(e)]
    if outside:
        return f"RPATH {':'.join(outside)}"
    return None


def _leaves_runtime(entry: str) -> bool:
    """Whether an RPATH entry of a library placed in lib/ points outside the runtime."""
    for origin in ("${ORIGIN}", "$ORIGIN"):
        if entry.startswith(origin):
            rel = os.path.normpath(os.path.join(LIB_DIR, entry[len(origin):].lstrip("/")))
            return rel == ".." or rel.startswith("../")
    return True


def _pins(dest: str, info: ElfInfo, nodes: dict[str, _Node], edges: dict[str, list[str]]) -> tuple[tuple[str, str], ...]:
    """Vendor sonames to add as NEEDED of this own file: those a reachable vendor library finds
    through a lookup that LD_LIBRARY_PATH (or a foreign absolute path) can hijack.

    ld.so loads a file's NEEDED list before any of their dependencies, through
    our DT_RPATH; a later lookup of the same soname reuses the loaded copy.
    """
    pins: dict[str, str] = {}
    stack = list(edges.get(dest, ()))
    seen: set[str] = set()
    while stack:
        s = stack.pop()
        if s in seen or s not in nodes:
            continue
        seen.add(s)
        node = nodes[s]
        why = _hijackable(node.info)
        for target in edges.get(s, ()):
            if why and target not in info.needed and target not in pins:
                pins[target] = f"{s} finds it through its {why}"
            stack.append(target)
    return tuple(sorted(pins.items()))


def _check_collisions(own: Sequence[OwnPlan], vendor: Sequence[VendorPlan], data: Sequence[DataPlan],
                      test_links: Sequence[tuple[str, str]] = ()) -> None:
    taken: dict[str, str] = {}

    def claim(path: str, who: str) -> None:
        if taken.get(path, who) != who:
            raise BuildFailed(f"{path} is claimed by both {taken[path]} and {who}", where="bundle",
                              fix="rename one of the build outputs or drop the duplicate library")
        taken[path] = who

    for o in own:
        claim(o.dest, o.dest)
        folder = str(PurePosixPath(o.dest).parent)
        for link in o.links:
            claim(f"{folder}/{link}", o.dest)
    for v in vendor:
        claim(v.dest, str(v.real))
        for link, _ in v.links:
            claim(link, str(v.real))
    for d in data:
        claim(d.dest, str(d.source))
    for link, target in test_links:
        claim(link, target)


# --- data folders ------------------------------------------------------------


def _has_marker(folder: Path, marker: str) -> bool:
    try:
        return any(fnmatchcase(e.name, marker) for e in os.scandir(folder) if e.is_file()) or \
            any(True for _ in folder.rglob(marker))
    except OSError:
        return False


def walk_files(folder: Path) -> list[tuple[str, int]]:
    out = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            p = Path(root) / name
            try:
                size = p.stat().st_size       # follows a symlink: the data is copied, not the link
            except OSError:
                raise BuildFailed("dangling symlink in a data folder", where=str(p),
                                  fix="repair the vendor installation") from None
            out.append((str(p.relative_to(folder)), size))
    return out


def _plan_data(nodes: Sequence[_Node], vendor: Sequence[VendorPlan], recipe: Any, prune: bool
               ) -> tuple[tuple[DataPlan, ...], list[str]]:
    archs: tuple[str, ...] = ()
    if prune and recipe is not None and getattr(recipe, "hip", None) is not None:
        archs = tuple(dict.fromkeys(t.arch for t in recipe.hip.targets))   # gfx90a:xnack- reads gfx90a's files
    plans: list[DataPlan] = []
    warnings: list[str] = []
    for node, vp in zip(nodes, vendor, strict=True):
        for rule in data_rules_for(node.soname):
            places = expected_places(node.real, rule)
            bases = [node.source.parent] + ([node.real.parent] if node.real.parent != node.source.parent else [])
            source = next((b / p for p in places for b in bases
                           if (b / p).is_dir() and _has_marker(b / p, rule.marker)), None)
            want = places[0]
            if source is None:
                msg = (f"{node.soname} reads its data from {bases[0] / want}, which is missing or holds no "
                       f"{rule.marker}")
                if rule.required:
                    raise BuildFailed(msg, where=str(node.source),
                                      fix="install the package that ships the data folder next to the library")
                warnings.append(f"{msg}: {rule.reason}")
                continue
            files = walk_files(source)
            kept = [(r, s) for r, s in files if not archs or not arch_tokens(r) or arch_tokens(r) & set(archs)]
            for arch in archs:
                if not any(arch in arch_tokens(r) for r, _ in kept):
                    msg = f"{node.soname}'s data folder {source} has no files for {arch}"
                    if rule.required:
                        raise BuildFailed(msg, where=str(source),
                                          fix=f"use a {node.soname} built for {arch}, or target a GPU arch it covers")
                    warnings.append(f"{msg}: {rule.reason}")
            dest = str(PurePosixPath(LIB_DIR) / want)
            _check_dest(dest, f"data folder of {node.soname}")
            if any(d.dest == dest for d in plans):
                continue
            plans.append(DataPlan(library=vp.dest, source=source, dest=dest, files=tuple(kept), archs=archs,
                                  pruned=len(files) - len(kept), reason=rule.reason))
    return tuple(plans), warnings


# --- placing -----------------------------------------------------------------













