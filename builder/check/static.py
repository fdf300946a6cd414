"""Static checks of a runtime: what ld.so would do with its files, and where its vendor data sits.

Nothing here runs the runtime's code. Every answer comes from ELF headers
(builder.elf), the bundling policy (builder.policy) and the folder itself:
  libraries resolve        every DT_NEEDED, walked as ld.so loads a process with an empty
                           environment, lands inside the runtime or is left to the host on purpose
  RPATH of own files       DT_RPATH relative to $ORIGIN, inside the runtime; never DT_RUNPATH
  LD_LIBRARY_PATH lookups  no lookup of a carried library passes LD_LIBRARY_PATH first
  never-bundled libraries  no driver, loader or link-time stub was copied in
  <vendor> data            rocBLAS/hipBLASLt data folders where the library itself reads them,
                           with files for every GPU target the runtime was built for
  hip code objects         libggml-hip.so carries code for each of those targets (a sibling arch
                           loads, then faults)
  glibc floor              this host's glibc is at least the newest version the runtime's files ask for
                           (or its manifest records, if that is newer)
  glibc promise            no file needs a newer GLIBC_ version than the floor the manifest promises
                           (builder.config.glibc), read from the files' .gnu.version_r, not the manifest
"""

from __future__ import annotations

import os
import mmap
import re
import struct
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from elftools.elf.elffile import ELFFile

from builder.runtime.layout import (BIN_DIR, LIB_DIR, TESTS_DIR, arch_tokens, data_layout, data_libraries,
                                    is_ggml_loader, module_backend)
from builder.config import glibc
from builder.config.glibc import host_glibc
from builder.runtime.elf import ElfInfo, Lookup, VersionNeed, highest_need, lookup, read_elf
from builder.runtime.manifest import BUILT, GlibcFloor, Manifest
from builder.config.targets import GfxTarget
from builder.errors import AssembleError
from builder.runtime.policy import BUNDLE, NEVER, DataRule, classify
from builder.toolchain.detect import version_tuple
from builder.check.cpulevel import cpu_level_check
from builder.check.report import FAIL, PASS, SKIP, WARN, Check

# A directory that never exists: lookups see LD_LIBRARY_PATH's place in the search order
# without anything being found there, so the answer is the empty environment's.
_PROBE_LDLP = "/nonexistent/assemble-ld-library-path-probe"
# Display names for the vendor data checks; other libraries are named by their folder.
_VENDOR_NAMES = {"rocblas": "rocBLAS", "hipblaslt": "hipBLASLt"}
_KERNEL_SUFFIXES = (".co", ".hsaco")


def run(runtime: Path, manifest: Manifest | None, backends: tuple[str, ...], recipe: Any = None,
        extra_hip_targets: tuple[str, ...] = (), here: bool = True) -> list[Check]:
    """here=False: the runtime is checked for another host (verify --static), so this host's glibc
    being older is a warning, not a failure."""
    runtime = Path(runtime).resolve()
    unreadable: list[str] = []
    files = _elf_files(runtime, manifest, unreadable)
    own = _own_files(files, manifest)
    resolved = _walk(runtime, files, own)
    allowed = manifest.host_sonames() if manifest else set()
    checks = [
        _closure_check(runtime, resolved, allowed, recipe, unreadable),
        _rpath_check(runtime, files, own),
        _hijack_check(runtime, resolved),
        _never_check(runtime, files, manifest, recipe),
    ]
    hip_targets = manifest.gpu_targets.hip if manifest else ()
    hip_targets += tuple(t for t in extra_hip_targets if t not in hip_targets)
    checks += data_checks(runtime, hip_targets)
    checks += hip_code_checks(runtime, hip_targets)
    if levels := cpu_level_check(runtime):
        checks.append(levels)
    need = highest_need(files.items())       # from the files themselves: a manifest can be edited
    recorded = [v for v in (need.version if need else None, manifest.glibc_min if manifest else None) if v]
    checks.append(glibc_check(max(recorded, key=version_tuple) if recorded else None, host_glibc(), here))
    checks.append(glibc_promise_check(need, manifest.glibc_floor if manifest else None))
    return checks


# --- what this host can run, and what the runtime promised -------------------------

def glibc_promise_check(need: VersionNeed | None, floor: GlibcFloor | None) -> Check:
    """FAIL when a file needs a newer GLIBC_ version than the floor the runtime promises."""
    needs = f"needs glibc {need.version} ({need.file}: {need.symbol})" if need else "no file needs a GLIBC_ version"
    if floor is None or floor.promised is None:
        why = ("its files were linked elsewhere: a repair's inputs, a container's or another machine's unit, and "
               "no recipe glibc_floor" if floor is not None else "the manifest records none")
        return Check("glibc promise", SKIP, f"not run: no floor promised ({why}); {needs}")
    promise = f"glibc {floor.promised} the {floor.stated_by or 'manifest'} promises"
    if need is None or not glibc.newer(need.version, floor.promised):
        return Check("glibc promise", PASS, f"{needs}, within the {promise}")
    return Check("glibc promise", FAIL, f"{need.file} needs {need.symbol}, newer than the {promise}: the runtime "
                 f"will not start on glibc {floor.promised}",
                 f"build on a distribution with glibc {floor.promised} or older (a container unit, or a runner "
                 f"like Ubuntu 22.04 for {glibc.RELEASE_FLOOR}), or state the floor it has: "
                 f'glibc_floor = "{need.version}" in the recipe')


def glibc_check(need: str | None, have: str | None, here: bool) -> Check:
    if not need:
        return Check("glibc floor", PASS, "no file in bin/ or lib/ needs a GLIBC_ symbol version, and the manifest "
                     "records none")
    if not have:
        return Check("glibc floor", SKIP, f"not run: this host's C library is not glibc (the runtime needs {need})")
    if version_tuple(have) >= version_tuple(need):
        return Check("glibc floor", PASS, f"needs glibc {need}, this host has {have}")
    return Check("glibc floor", FAIL if here else WARN,
                 f"needs glibc {need}, this host has {have}: its binaries will not start here",
                 "run it on a host (or image) with that glibc or newer, or build on an older distribution "
                 "(a container unit) to lower the floor")


# --- HIP code objects ------------------------------------------------------------

# Offload bundle entry ids, e.g. "hipv4-amdgcn-amd-amdhsa--gfx1100" or "...--gfx90a:xnack-".
_HIP_ENTRY = re.compile(rb"(?:hip|hipv4|openmp)-amdgcn-amd-amdhsa-[a-z0-9]*-(gfx[0-9a-f]+)")
_COMPRESSED_BUNDLE = b"CCOB"


_HIP_ANCHOR = b"-amdgcn-amd-amdhsa-"


_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
_BUNDLE_GAP = 1 << 16          # the padding between two bundles (they start 4 KiB aligned)


def hip_archs(module: Path) -> tuple[set[str], bool]:
    """The gfx archs libggml-hip.so carries code for, and whether some bundles were compressed
    (their entry ids are then inside the compressed data and cannot be read here).

    The module is 1.2 GB in Debian's build: it is mapped, not read. Its .hip_fatbin section is a
    row of offload bundles, each a header naming its entries (id, offset, size), so the walk
    reads headers only and jumps over the code; anything else (a compressed bundle, a layout
    not understood) falls back to searching the whole map for the literal every entry id holds."""
    with open(module, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        start, stop = _fatbin_range(f, len(data))
        walked = _walk_bundles(data, start, stop)
        return walked if walked is not None else _scan_bundles(data)


def _fatbin_range(f: BinaryIO, size: int) -> tuple[int, int]:
    try:
        sec = ELFFile(f).get_section_by_name(".hip_fatbin")
    except Exception:  # noqa: BLE001 -- not an ELF file we can read: the whole file
        return 0, size
    if sec is None or sec["sh_offset"] + sec["sh_size"] > size:
        return 0, size
    return sec["sh_offset"], sec["sh_offset"] + sec["sh_size"]


def _walk_bundles(data: mmap.mmap, start: int, stop: int) -> tuple[set[str], bool] | None:
    archs: set[str] = set()
    pos = data.find(_BUNDLE_MAGIC, start, min(stop, start + _BUNDLE_GAP))
    if pos < 0:
        return None
    while pos >= 0:
        (count,) = struct.unpack_from("<Q", data, pos + len(_BUNDLE_MAGIC))
        if not 0 < count <= 4096:
            return None
        q = end = pos + len(_BUNDLE_MAGIC) + 8
        for _ in range(count):
            if q + 24 > stop:
                return None
            offset, size, id_len = struct.unpack_from("<QQQ", data, q)
            if id_len > 256 or pos + offset + size > stop:
                return None
            m = _HIP_ENTRY.search(data[q + 24:q + 24 + id_len])
            if m:
                archs.add(m.group(1).decode())
            q += 24 + id_len
            end = max(end, q, pos + offset + size)
        pos = data.find(_BUNDLE_MAGIC, end, min(stop, end + _BUNDLE_GAP))
        if pos < 0 and (stop - end > _BUNDLE_GAP or data[end:stop].strip(b"\0")):
            return None            # something other than padding follows: not the plain layout
    return archs, False


def _scan_bundles(data: mmap.mmap) -> tuple[set[str], bool]:
    """Every entry id in the file, wherever it is (bytes.find runs at memory speed; a regex over
    the whole file took 4 s), each hit then matched in its few surrounding bytes."""
    archs: set[str] = set()
    pos = data.find(_HIP_ANCHOR)
    while pos >= 0:
        m = _HIP_ENTRY.search(data[max(0, pos - 8):pos + len(_HIP_ANCHOR) + 64])   # a slice: re on an
        # mmap with pos/endpos walks the whole map each time
        if m:
            archs.add(m.group(1).decode())
        pos = data.find(_HIP_ANCHOR, pos + len(_HIP_ANCHOR))
    return archs, data.find(_COMPRESSED_BUNDLE) >= 0


def hip_code_checks(runtime: Path, targets: tuple[str, ...]) -> list[Check]:
    module = runtime / "bin" / "libggml-hip.so"
    if not module.is_file() or not targets:
        return []
    archs, compressed = hip_archs(module)
    wanted = sorted({GfxTarget.parse(t).arch for t in targets})   # checked by the manifest reader or the CLI
    missing = [t for t in wanted if t not in archs]
    if not archs:
        reason = ("its offload bundles are compressed" if compressed else "no amdgcn offload bundle found")
        return [Check("hip code objects", SKIP, f"not run: {reason}, so the archs it carries are unknown")]
    if missing:
        return [Check("hip code objects", FAIL, f"bin/{module.name} has code for {', '.join(sorted(archs))}, not for "
                      f"{', '.join(missing)}: on such a card it loads, then faults (a sibling arch is no substitute)",
                      f"build the rocm unit for that arch: --hip-target {missing[0]}")]
    return [Check("hip code objects", PASS, f"bin/{module.name} carries {', '.join(sorted(archs))}")]


# --- the files ---------------------------------------------------------------

def _elf_files(runtime: Path, manifest: Manifest | None, unreadable: list[str]) -> dict[str, ElfInfo]:
    """ELF files directly in bin/, lib/ and tests/ (data folders hold GPU code objects: not ours to load;
    tests/ holds test-backend-ops, checked like any program when present, and links to bin/'s modules).

    A file that starts like ELF but cannot be parsed (a truncated copy) goes to `unreadable`.
    """
    data = _data_paths(manifest)
    out: dict[str, ElfInfo] = {}
    for folder in (BIN_DIR, LIB_DIR, TESTS_DIR):
        d = runtime / folder
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir()):
            rel = f"{folder}/{p.name}"
            if p.is_symlink() or not p.is_file() or rel in data:
                continue
            try:
                info = read_elf(p)
            except AssembleError as exc:
                unreadable.append(f"{rel}: {exc.what}")
                continue
            if info is None:
                continue
            short = _truncated(p, info.size)
            if short:
                unreadable.append(f"{rel}: {short}")
                continue
            out[rel] = info
    return out


def _truncated(path: Path, size: int) -> str | None:
    """A partial copy keeps the ELF header but loses what it points to: compare the furthest
    segment and the section header table with the file's size."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 52:
            return f"a truncated ELF file ({size} bytes)"
        is64, endian = head[4] == 2, "<" if head[5] == 1 else ">"
        fmt = endian + ("QQ" if is64 else "II")
        phoff, shoff = struct.unpack_from(fmt, head, 0x20 if is64 else 0x1C)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(endian + "HHHH", head, 0x36 if is64 else 0x2A)
        if shoff + shentsize * shnum > size:
            return f"truncated: its section headers end at byte {shoff + shentsize * shnum}, the file has {size}"
        if phoff + phentsize * phnum > size:
            return f"truncated: its program headers end at byte {phoff + phentsize * phnum}, the file has {size}"
        try:
            segments = list(ELFFile(f).iter_segments())
        except Exception as exc:  # noqa: BLE001 -- pyelftools raises many types on a corrupt file
            return f"a corrupt ELF file ({type(exc).__name__})"
    end = max((seg["p_offset"] + seg["p_filesz"] for seg in segments), default=0)
    return f"truncated: its segments end at byte {end}, the file has {size}" if end > size else None


def _data_paths(manifest: Manifest | None) -> set[str]:
    return {f.path for f in manifest.files if f.role == "data"} if manifest else set()


def _own_files(files: dict[str, ElfInfo], manifest: Manifest | None) -> list[str]:
    """Files the build produced (test programs too): the manifest says so; without one, bin/ and tests/."""
    if manifest and manifest.files:
        roles = {f.path: f.role for f in manifest.files}
        return [rel for rel in files if roles.get(rel) in BUILT]
    return [rel for rel in files if rel.startswith((BIN_DIR + "/", TESTS_DIR + "/"))]


def _inside(runtime: Path, path: Path) -> bool:
    real = Path(os.path.realpath(path))
    return real == runtime or runtime in real.parents


# --- ld.so's walk ------------------------------------------------------------

@dataclass(frozen=True)
class Resolution:
    requester: str            # runtime-relative path of the object whose DT_NEEDED this is
    name: str
    found: Lookup


def _walk(runtime: Path, files: dict[str, ElfInfo], own: list[str]) -> list[Resolution]:
    """Every DT_NEEDED lookup ld.so makes, breadth first as it loads, with an empty environment.

    Roots: each program in bin/ and tests/ (its own process), then each backend module
    dlopen()ed into llama-server's process. An object already loaded under a
    name answers later lookups of that name, as in ld.so: pinned NEEDED
    entries work that way. Our own libraries nothing reaches come next, and
    last the vendor libraries nothing reaches by DT_NEEDED (those a vendor
    library dlopen()s, such as HIP's comgr), into the same process.
    """
    programs = [rel for rel, i in files.items() if rel.startswith((BIN_DIR + "/", TESTS_DIR + "/")) and i.is_program]
    modules = [rel for rel in files if rel.startswith("bin/") and module_backend(Path(rel).name)]
    host = "bin/llama-server" if "bin/llama-server" in programs else (programs[0] if programs else None)
    # A dlopen()ed module's loader chain: libggml, whose code dlopen()s it, then the executable.
    loader = _ggml_loader(files)
    host_chain = tuple(files[r] for r in (loader, host) if r is not None)
    out: list[Resolution] = []
    reached: set[str] = set()

    def load(rel: str, loaders: tuple[ElfInfo, ...], loaded: dict[str, Path]) -> None:
        reached.add(rel)
        queue = deque([(rel, files[rel], loaders)])
        while queue:
            label, obj, chain = queue.popleft()
            for name in obj.needed:
                if name in loaded:
                    continue
                found = lookup(name, obj, loaders=chain, ld_library_path=_PROBE_LDLP)
                out.append(Resolution(label, name, found))
                if found.path is None:
                    continue
                real = Path(os.path.realpath(found.path))
                loaded[name] = real
                if not _inside(runtime, real):
                    continue          # the host's libraries and their dependencies are the host's business
                dep_label = str(real.relative_to(runtime))
                try:
                    dep = read_elf(found.path)
                except AssembleError:
                    continue
                if dep is None:
                    continue
                if dep.soname:
                    loaded.setdefault(dep.soname, real)
                if dep_label not in reached:
                    reached.add(dep_label)
                    queue.append((dep_label, dep, (obj, *chain)))

    process: dict[str, Path] = {}
    for rel in programs:
        loaded: dict[str, Path] = {}
        load(rel, (), loaded)
        if rel == host:
            process = loaded
    for rel in modules:
        load(rel, host_chain, process)
    for rel in [*own, *files]:
        if rel not in reached:
            load(rel, host_chain, process)
    return out


def _decision(name: str, allowed: set[str], recipe: Any) -> tuple[str, str]:
    if name in allowed:
        return "system", "left to the host by the manifest"
    try:
        return classify(name, recipe)
    except AssembleError as exc:
        return NEVER, exc.what


def _closure_check(runtime: Path, resolved: list[Resolution], allowed: set[str], recipe: Any,
                   unreadable: list[str]) -> Check:
    problems = list(unreadable)
    host_libs: set[str] = set()
    absent: set[str] = set()
    inside = 0
    for r in resolved:
        decision, reason = _decision(r.name, allowed, recipe)
        path = r.found.path
        if path is not None and _inside(runtime, path):
            inside += 1
            continue
        if decision != BUNDLE:
            (host_libs if path is not None else absent).add(r.name)
            continue
        if path is None:
            passed = f"; passed over {', '.join(f'{p} ({why})' for p, why in r.found.rejected)}" \
                if r.found.rejected else ""
            problems.append(f"{r.name} (needed by {r.requester}) is not found{passed}")
        else:
            problems.append(f"{r.name} (needed by {r.requester}) resolves to {path}, outside the runtime, "
                            f"though the policy carries it ({reason})")
    if problems:
        return Check("libraries resolve", FAIL, _join(problems),
                     "a library the runtime must carry is missing from lib/: rebuild, or copy the whole "
                     "runtime again (a partial copy loses files)")
    note = f"; absent on this host: {', '.join(sorted(absent))}" if absent else ""
    return Check("libraries resolve", PASS, f"{inside} lookups land inside the runtime; "
                 f"{len(host_libs | absent)} libraries left to the host on purpose{note}")


def _hijack_check(runtime: Path, resolved: list[Resolution]) -> Check:
    """A carried library found after LD_LIBRARY_PATH was searched: any copy there would win."""
    problems = []
    for r in resolved:
        f = r.found
        if f.path is None or not _inside(runtime, f.path) or f.via in ("rpath", "direct"):
            continue
        if any(step == "ld_library_path" for step, _ in f.searched):
            problems.append(f"{r.name} (needed by {r.requester}) is found through its {f.via}, "
                            "after LD_LIBRARY_PATH")
    if problems:
        return Check("LD_LIBRARY_PATH lookups", FAIL, _join(problems) + ": a copy of that name on LD_LIBRARY_PATH "
                     "would be loaded instead", "give our own files DT_RPATH (patchelf --force-rpath), and pin a "
                     "vendor library's RUNPATH dependencies as NEEDED of our file: rebuild with assemble build")
    return Check("LD_LIBRARY_PATH lookups", PASS, "every carried library is found through DT_RPATH before LD_LIBRARY_PATH")


def _ggml_loader(files: dict[str, ElfInfo]) -> str | None:
    """lib/libggml.so*: the library that dlopen()s backend modules."""
    return next((rel for rel in sorted(files) if Path(rel).parent == Path(LIB_DIR)
                 and is_ggml_loader(Path(rel).name) and not files[rel].is_program), None)


# --- RPATH of our own files --------------------------------------------------

def _names_lib(runtime: Path, rel: str, info: ElfInfo) -> bool:
    return runtime / LIB_DIR in {_origin_entry(runtime, rel, e) for e in info.rpath}


def _rpath_check(runtime: Path, files: dict[str, ElfInfo], own: list[str]) -> Check:
    problems = []
    lib = runtime / LIB_DIR
    loader = _ggml_loader(files)
    inherited = 0
    for rel in own:
        info = files[rel]
        if info.runpath:
            problems.append(f"{rel} has DT_RUNPATH {':'.join(info.runpath)} (LD_LIBRARY_PATH is searched "
                            "before it and it is not inherited)")
            continue
        if not info.needed:
            continue
        if not info.rpath and module_backend(Path(rel).name) and Path(rel).parent == Path(BIN_DIR) \
                and loader is not None and _names_lib(runtime, loader, files[loader]):
            inherited += 1        # glibc searches its loader chain's DT_RPATH: libggml's, then the executable's
            continue
        if not info.rpath:
            problems.append(f"{rel} has no DT_RPATH: it finds its libraries only on the host")
            continue
        dirs = []
        for entry in info.rpath:
            where = _origin_entry(runtime, rel, entry)
            if where is None:
                problems.append(f"{rel} has RPATH entry {entry!r}, "
                                + ("the working directory" if not entry else "not relative to $ORIGIN"))
            elif not (where == runtime or runtime in where.parents):
                problems.append(f"{rel} has RPATH entry {entry!r}, which leaves the runtime")
            dirs.append(where)
        if lib not in dirs:
            problems.append(f"{rel} has RPATH {':'.join(info.rpath)}, which does not name {LIB_DIR}/")
    if problems:
        return Check("RPATH of own files", FAIL, _join(problems),
                     "rebuild with assemble build (it links DT_RPATH=$ORIGIN/../lib; repair sets it with patchelf --force-rpath); "
                     "never patch a runtime by hand without regenerating its manifest")
    note = f" ({inherited} backend modules without one use their loader's: {loader})" if inherited else ""
    return Check("RPATH of own files", PASS, f"{len(own)} files use DT_RPATH relative to $ORIGIN, no DT_RUNPATH"
                 + note)


def _origin_entry(runtime: Path, rel: str, entry: str) -> Path | None:
    for token in ("${ORIGIN}", "$ORIGIN"):
        if entry.startswith(token):
            rest = entry[len(token):].lstrip("/")
            return Path(os.path.normpath(runtime / Path(rel).parent / rest))
    return None


# --- never-bundled -----------------------------------------------------------

def _never_check(runtime: Path, files: dict[str, ElfInfo], manifest: Manifest | None, recipe: Any) -> Check:
    problems = []
    names: dict[str, str] = {}            # name -> runtime path that answers to it
    data = _data_paths(manifest)
    for p in sorted(runtime.rglob("*.so*")):
        rel = p.relative_to(runtime).as_posix()
        if rel not in data and (p.is_symlink() or p.is_file()):
            names.setdefault(p.name, rel)
    for rel, info in files.items():
        if info.soname:
            names.setdefault(info.soname, rel)
    for name, rel in sorted(names.items()):
        decision, reason = _decision(name, set(), recipe)
        if decision == NEVER:
            problems.append(f"{rel} ({name}) must never be bundled: {reason}")
    for rec in manifest.files if manifest else ():
        if "stubs" in Path(rec.origin).parts:
            problems.append(f"{rec.path} was copied from a stubs/ folder ({rec.origin}): a link-time stub "
                            "fails at run time")
    if problems:
        return Check("never-bundled libraries", FAIL, _join(problems),
                     "delete them and rebuild; the host must provide these (the bundling policy says why)")
    return Check("never-bundled libraries", PASS, "no driver, loader, glibc or stub library inside")


# --- vendor data folders -----------------------------------------------------


def data_checks(runtime: Path, hip_targets: tuple[str, ...]) -> list[Check]:
    """For each vendor library with a data rule: the folder it reads, then its files per GPU target."""
    runtime = Path(runtime)
    checks: list[Check] = []
    for library, rule in data_libraries(runtime):
        checks += _data_rule_checks(runtime, library, rule, hip_targets)
    return checks


def _label(rule: DataRule) -> str:
    top = rule.place.split("/", 1)[0]
    return _VENDOR_NAMES.get(top, top)


def _data_rule_checks(runtime: Path, library: Path, rule: DataRule, targets: tuple[str, ...]) -> list[Check]:
    label = _label(rule)
    bad = FAIL if rule.required else WARN
    consequence = ("it aborts at the first GEMM (after /health already said ok)" if rule.required
                   else "it falls back to slower kernels")
    want, problems, missing = data_layout(runtime, library, rule)
    problems += [missing] if missing else []
    rel_want = want.relative_to(runtime)
    hint = (f"rebuild with assemble build, or copy the vendor folder with its structure: mkdir -p "
            f"{rel_want} && cp -a SRC/. {rel_want}/; {label} reads {rel_want} ({rule.reason})")
    if rule.env:
        hint += f"; {rule.env} overrides it"
    if problems:
        return [Check(f"{label} data", bad, f"{library.name} reads {rel_want}: " + _join(problems)
                      + f"; {consequence}", hint)]
    source = "read from the library's strings" if want != library.parent / rule.place else "upstream layout"
    checks = [Check(f"{label} data", PASS, f"{rel_want} ({source}), {sum(1 for _ in want.rglob('*'))} entries")]
    for target in targets:
        gfx = GfxTarget.parse(target).arch     # "gfx90a:xnack-": the feature suffix names no other files
        checks.append(_arch_check(runtime, want, gfx, label, bad, consequence))
    if not targets:
        checks.append(Check(f"{label} kernels", SKIP, "not run: the manifest names no hip GPU targets"))
    return checks


def _arch_check(runtime: Path, folder: Path, gfx: str, label: str, bad: str, consequence: str) -> Check:
    """rocBLAS/hipBLASLt look in <gfx>-<xnack>/, <gfx>/, then the folder: an index and code objects for gfx."""
    subdirs = [d for d in sorted(folder.glob(f"{gfx}*")) if d.is_dir() and (d.name == gfx or d.name.startswith(gfx + "-"))]
    index_names = (f"TensileLibrary_lazy_{gfx}.dat", f"TensileLibrary_{gfx}.dat", "TensileLibrary.dat")
    index = next((d / n for d in (*subdirs, folder) for n in index_names if (d / n).is_file()), None)
    kernels = [p for d in (*subdirs, folder) for p in d.iterdir()
               if p.is_file() and p.suffix in _KERNEL_SUFFIXES and gfx in arch_tokens(p.name)]
    name = f"{label} {gfx}"
    where = folder.relative_to(runtime)
    if index is None:
        lazy = ", ".join(index_names)
        others = sorted({t for p in folder.iterdir() for t in arch_tokens(p.name)})
        return Check(name, bad, f"no {lazy} in {where} (archs present: {', '.join(others) or 'none'}); "
                     f"{consequence} on a {gfx} card",
                     f"use a {label} build that covers {gfx}, or target an arch it covers")
    if not kernels:
        return Check(name, bad, f"{index.name} is there but no {gfx} code objects (*.co, *.hsaco) in {where}; "
                     f"{consequence}", "the data folder was pruned or copied partially: rebuild")
    orphans = _missing_fallback_indexes(folder, gfx)
    if orphans:
        return Check(name, bad, f"{len(orphans)} {gfx} fallback kernels lack their arch-less index "
                     f"({orphans[0]} ...); {consequence}",
                     "arch pruning must keep the arch-less *_fallback.dat files: rebuild")
    return Check(name, PASS, f"{index.name} and {len(kernels)} code objects")


def _missing_fallback_indexes(folder: Path, gfx: str) -> list[str]:
    """X_fallback_<gfx>.hsaco is described by the arch-less X_fallback.dat: losing it loses the kernels."""
    out = []
    suffix = f"_fallback_{gfx}.hsaco"
    for p in sorted(folder.glob(f"*{suffix}")):
        dat = p.name[: -len(suffix)] + "_fallback.dat"
        if not (folder / dat).is_file():
            out.append(dat)
    return out


def _join(problems: list[str], limit: int = 4) -> str:
    more = f" (+{len(problems) - limit} more)" if len(problems) > limit else ""
    return "; ".join(problems[:limit]) + more
