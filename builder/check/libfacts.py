"""The manifest's library facts against the ELF files (builder.check.facts runs them):

  glibc_min, glibcxx_min   the newest GLIBC_ / GLIBCXX_ version any ELF file in bin/, lib/ or tests/
                           needs, as the bundler computes it over every file it places
  glibc_floor.needed_by    the file in bin/ or lib/ needing the newest GLIBC_ one (elf.folder_need, as
                           build and repair call it)
  SONAMEs                  each library in lib/ is reached by its DT_SONAME there (the bundler makes that
                           link), and every NEEDED name lib/ answers leads to the file with that SONAME
  system_libs              the NEEDED names the runtime does not carry, exactly, each with the files
                           needing it and policy.classify's reason: what the static walk leaves to the host
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from builder.config.glibc import SYMBOL_PREFIX
from builder.errors import AssembleError
from builder.runtime.elf import ElfInfo, VersionNeed, folder_need, highest_need, read_elf, version_key
from builder.runtime.layout import BIN_DIR, LIB_DIR, TESTS_DIR, in_tests
from builder.runtime.manifest import Manifest, SystemLib, tests_left_out
from builder.runtime.policy import BUNDLE, classify

GLIBCXX = "GLIBCXX_"


@dataclass(frozen=True)
class Files:
    """The runtime's ELF files directly in bin/, lib/ and tests/ (never a link), read once."""
    runtime: Path
    elf: dict[str, ElfInfo]           # runtime path -> its dynamic facts
    tests_absent: bool                # packaged without tests/: what only its files say is unknown


def read(runtime: Path, m: Manifest | None = None) -> Files:
    elf: dict[str, ElfInfo] = {}
    for folder in (BIN_DIR, LIB_DIR, TESTS_DIR):
        d = Path(runtime) / folder
        for p in sorted(d.iterdir()) if d.is_dir() else ():
            if p.is_symlink() or not p.is_file():
                continue
            try:
                info = read_elf(p)
            except AssembleError:
                continue              # a damaged file: the hashes and 'libraries resolve' name it
            if info is not None:
                elf[f"{folder}/{p.name}"] = info
    return Files(Path(runtime), elf, m is not None and tests_left_out(runtime, m))


def problems(files: Files, m: Manifest, recipe: object = None) -> list[str]:
    return _glibc(files, m) + _sonames(files) + _system(files, m, recipe)


# --- glibc ---------------------------------------------------------------------------------

def needs(files: Files) -> tuple[VersionNeed | None, VersionNeed | None]:
    """(GLIBC_, GLIBCXX_): the newest version of each any file needs, and the file."""
    return highest_need(files.elf.items(), SYMBOL_PREFIX), highest_need(files.elf.items(), GLIBCXX)


def _glibc(files: Files, m: Manifest) -> list[str]:
    out = []
    for key, stated, need in zip(("glibc_min", "glibcxx_min"), (m.glibc_min, m.glibcxx_min), needs(files),
                                 strict=True):
        found = need.version if need else None
        if stated == found:
            continue
        if files.tests_absent and stated is not None and (found is None or _newer(stated, found)):
            continue                  # the need may be tests/' own, which is not here to read
        said = f"{need.file} needs {need.symbol}, the newest" if need else "no file needs a version of it"
        out.append(f"{key}: {stated or 'none'}, but {said}")
    floor = m.glibc_floor
    if floor is not None:
        need = folder_need(files.runtime)
        found_by = need.file if need else None
        if floor.needed_by != found_by:
            out.append(f"glibc_floor.needed_by: {floor.needed_by or 'none'}, but "
                       + (f"{found_by} needs {need.symbol}, the newest in bin/ and lib/" if need else
                          "no file in bin/ or lib/ needs a GLIBC_ version"))
    return out


def _newer(a: str, b: str) -> bool:
    return version_key(a) > version_key(b)


# --- SONAMEs --------------------------------------------------------------------------------

def _lib_target(runtime: Path, name: str) -> str | None:
    """The runtime path lib/<name> leads to, when it is a file inside lib/ (None: no such entry)."""
    if "/" in name or name in ("", ".", ".."):
        return None
    entry = runtime / LIB_DIR / name
    if not os.path.lexists(entry):
        return None
    real = Path(os.path.realpath(entry))
    lib = Path(os.path.realpath(runtime / LIB_DIR))
    return f"{LIB_DIR}/{real.name}" if real.parent == lib and real.is_file() else f"{LIB_DIR}/{name} (leads elsewhere)"


def _sonames(files: Files) -> list[str]:
    out = []
    for rel, info in files.elf.items():
        if rel.startswith(LIB_DIR + "/") and info.soname and not info.is_program:
            at = _lib_target(files.runtime, info.soname)
            if at != rel:
                out.append(f"symlinks: {rel} has DT_SONAME {info.soname}, but lib/{info.soname} "
                           + ("is missing" if at is None else f"is {at}") + ": ld.so finds a library by its SONAME")
    for rel, info in files.elf.items():
        for name in info.needed:
            at = _lib_target(files.runtime, name)
            target = files.elf.get(at) if at else None
            if target is not None and target.soname and target.soname != name:
                out.append(f"symlinks: {rel} needs {name}, which lib/ answers with {at}, whose DT_SONAME is "
                           f"{target.soname}")
    return out


# --- the host's libraries --------------------------------------------------------------------

def host_needs(files: Files) -> dict[str, list[str]]:
    """NEEDED name -> the files needing it, for every name the runtime does not carry in lib/."""
    out: dict[str, list[str]] = {}
    for rel, info in sorted(files.elf.items()):
        for name in info.needed:
            if _lib_target(files.runtime, name) is None and rel not in out.setdefault(name, []):
                out[name].append(rel)
    return out


def system_libs(files: Files, recipe: object = None) -> tuple[SystemLib, ...]:
    """What the bundler records for these files: each name the policy leaves to the host, why, and who
    needs it. A name the policy carries that is not here is no system library: the bundler refuses it,
    and 'libraries resolve' names it."""
    out = []
    for name, who in sorted(host_needs(files).items()):
        decision, reason = classify(name, recipe)
        if decision != BUNDLE:
            out.append(SystemLib(name, reason, tuple(who)))
    return tuple(out)


def _needers(files: Files, labels: tuple[str, ...]) -> set[str]:
    """The bundler names a requester by its runtime path (our files) or by the name it was needed as
    (a vendor library): both as runtime paths."""
    return {label if "/" in label else (_lib_target(files.runtime, label) or label) for label in labels}


def _system(files: Files, m: Manifest, recipe: object) -> list[str]:
    out = []
    found = host_needs(files)
    seen: set[str] = set()
    for i, s in enumerate(m.system_libs):
        key = f"system_libs[{i}] {s.soname}"
        if s.soname in seen:
            out.append(f"{key}: listed twice")
            continue
        seen.add(s.soname)
        if s.soname not in found:
            if _lib_target(files.runtime, s.soname) is not None:
                out.append(f"{key}: left to the host, but the runtime carries it (lib/{s.soname})")
            elif not (files.tests_absent and s.needed_by and all(in_tests(p) for p in s.needed_by)):
                out.append(f"{key}: left to the host, but no file of the runtime needs it")
            continue
        stated = {p for p in _needers(files, s.needed_by) if not (files.tests_absent and in_tests(p))}
        if stated != set(found[s.soname]):
            out.append(f"{key}.needed_by: {', '.join(sorted(stated)) or 'none'}, but "
                       f"{', '.join(found[s.soname])} need it")
        out += _reason(key, s, m, recipe)
    for name, who in found.items():
        if name not in seen and classify(name, recipe)[0] != BUNDLE:    # a carried name missing: 'libraries resolve'
            out.append(f"system_libs: lacks {name}, which {', '.join(who[:3])} need"
                       + (f" (+{len(who) - 3} more)" if len(who) > 3 else "") + " and the runtime does not carry")
    return out


def _reason(key: str, s: SystemLib, m: Manifest, recipe: object) -> list[str]:
    """The policy's reason; without the recipe, a reason that names the runtime's recipe is that
    recipe's [bundle.never], which the files cannot show (the provenance covers it)."""
    decision, reason = classify(s.soname, recipe)
    if s.reason == reason and decision != BUNDLE:
        return []
    by_recipe = recipe is None and s.reason.startswith(f"recipe {m.recipe.name}: ")
    if by_recipe:
        return []
    if decision == BUNDLE:
        return [f"{key}: left to the host ({s.reason[:80]!r}), but the bundling policy carries it ({reason})"]
    return [f"{key}.reason: {s.reason[:80]!r}, but the bundling policy says {reason!r}"]
