"""Where things go in a runtime folder: the one home of every layout fact.

    runtime-<recipe>/
      bin/            executables and the ggml backend modules (ggml's loader looks next to
                      the executable, never in lib/)
      lib/            our shared libraries with their SONAME links, and vendor libraries;
                      a vendor data folder sits where the library that reads it looks
      tests/          upstream's test-backend-ops ([tests] backend_ops), with one relative link per
                      backend module (ggml's loader looks next to the executable); may be absent as a
                      whole (`package` leaves it out unless --with-tests)
      licenses/       one folder per component carried (llama.cpp, each vendor package): the licence
                      texts it ships (builder.runtime.licenses)
      manifest.json   what the runtime is made of (builder.runtime.manifest)
      ops-checks.json the last `verify --ops` result per device (written after the build: not listed)

The bundler places files by these facts and the verifier checks them by the same ones.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
import posixpath
from fnmatch import fnmatchcase
from pathlib import Path

from builder.config.targets import gfx_tokens
from builder.runtime.policy import DataRule, data_rules_for

BIN_DIR = "bin"                       # executables and backend modules
LIB_DIR = "lib"                       # shared libraries, ours and the vendors'
TESTS_DIR = "tests"                   # test programs, beside bin/ (never on a user's PATH with the tools)
# The DT_RPATH `build` links into every file it compiles: lib/ seen from bin/ (executables, backend
# modules), from tests/ (a sibling of bin/: the same string) and, as lib/../lib, from lib/. The bundler
# copies files that carry it byte for byte.
LINK_RPATH = "$ORIGIN/" + posixpath.relpath(LIB_DIR, BIN_DIR)
assert posixpath.relpath(LIB_DIR, TESTS_DIR) == posixpath.relpath(LIB_DIR, BIN_DIR), "tests/ is a sibling of bin/"
LICENSES_DIR = "licenses"             # licenses/<component>/<text>: every runtime, Linux and Windows
KINDS = ("executable", "module", "library", "test")
BACKEND_OPS = "test-backend-ops"      # upstream's judge: every op of a backend against the CPU backend's
# The last `verify --ops` result per device, a sidecar at the runtime root: never in manifest.json, whose
# digest is the runtime's identity (deploy's release id, the provenance verify checks); a verify that
# rewrote it would break both. The one file a runtime may hold that its manifest does not list.
OPS_RECORD = "ops-checks.json"
# The library whose code dlopen()s the backend modules (ggml-backend-reg.cpp is part of it).
GGML_LOADER = "libggml.so"


def is_ggml_loader(name: str) -> bool:
    """libggml.so, libggml.so.0, libggml.so.0.9.4: ggml's backend loader, by its file name."""
    return name == GGML_LOADER or name.startswith(GGML_LOADER + ".")

# ggml backend modules: libggml-<backend>[-<variant>].so, loaded by ggml at run time.
MODULE_RE = re.compile(r"libggml-(cpu|cuda|hip|vulkan|musa|sycl|opencl|rpc|blas|metal|cann|webgpu|zdnn|hexagon)"
                       r"(-[A-Za-z0-9_]+)?\.so")


def runtime_dir_name(recipe: str) -> str:
    """The folder a build writes (by default) and an archive unpacks to."""
    return f"runtime-{recipe}"


def runtime_label(recipe: str, hip_targets: Iterable[object]) -> str:
    """<recipe>[-<gfx>]: a HIP runtime runs on exactly the card arch it was built for, so its name says
    it; a target's features stay in the name without the ':' ("gfx90a:xnack-" -> "gfx90a-xnack-")."""
    return "-".join([recipe, *(str(t).replace(":", "-") for t in hip_targets if t)])


def archive_stem(label: str, sha: str | None, arch: str, build: str | None = None, toolkit: str | None = None,
                 system: str = "linux") -> str:
    """What `assemble package` writes and `assemble matrix` announces:
    runtime-<label>[-<bNNNN>][-<toolkit line>]-<sha12>-<system>-<arch>, e.g.
    runtime-cuda-vulkan-b7416-cuda12.8-0c1e57098bba-linux-x86_64, runtime-cpu-b7416-local-windows-x64
    (config.upstream owns the build and toolkit grammars)."""
    parts = [runtime_dir_name(label), build, toolkit, (sha or "local")[:12], system, arch]
    return "-".join(p for p in parts if p)


def module_backend(filename: str) -> str | None:
    """"libggml-cpu-haswell.so" -> "cpu"; None for anything that is not a backend module."""
    m = MODULE_RE.fullmatch(filename)
    return m.group(1) if m else None


def module_dest(filename: str) -> str:
    return f"{BIN_DIR}/{filename}"


def module_links_in_tests(modules: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """(link, target) per backend module file name: tests/libggml-vulkan.so -> ../bin/libggml-vulkan.so.
    ggml's loader looks for modules only in the executable's own folder, so a test program in tests/
    finds bin/'s modules through these relative links."""
    up = posixpath.relpath(BIN_DIR, TESTS_DIR)
    return tuple((f"{TESTS_DIR}/{name}", f"{up}/{name}") for name in sorted(set(modules)))


def in_tests(path: str) -> bool:
    """Whether a runtime path lies in tests/ (the part a runtime may carry or leave out as a whole)."""
    return path.startswith(TESTS_DIR + "/")


@dataclass(frozen=True)
class OwnFile:
    """A file the llama.cpp build produced, and where it goes in the runtime."""
    source: Path                      # in the build tree (real file)
    dest: str                         # relative path in the runtime: "bin/llama-server", "lib/libllama.so.0.0.1"
    kind: str                         # "executable" | "module" | "library" | "test"
    links: tuple[str, ...] = ()       # symlink names to create beside dest, e.g. ("libllama.so.0", "libllama.so")


def own_file(path: Path, kind: str, links: tuple[str, ...] = ()) -> OwnFile:
    """Executables and modules go to bin/, libraries to lib/, test programs to tests/."""
    folder = {"library": LIB_DIR, "test": TESTS_DIR}.get(kind, BIN_DIR)
    return OwnFile(path, f"{folder}/{path.name}", kind, links)


def arch_tokens(relpath: str) -> set[str]:
    """GPU archs a data file is specific to (from its path); empty for arch-less files."""
    return gfx_tokens(relpath)


# --- vendor data folders ----------------------------------------------------------

def expected_places(library: Path, rule: DataRule) -> tuple[str, ...]:
    """Where this library reads its data, relative to its folder: the versioned place its
    strings name (a distribution's patch) first, then the upstream place."""
    from builder.runtime.elf import section_strings   # here: naming a runtime folder needs no ELF reader
    places: list[str] = []
    if rule.versioned:
        for s in section_strings(library, rule.versioned.encode()):
            if s not in places:
                places.append(s)
    if rule.place not in places:
        places.append(rule.place)
    return tuple(places)


def data_libraries(runtime: Path) -> Iterator[tuple[Path, DataRule]]:
    """(library, rule) for every vendor library in lib/ that reads a data folder."""
    lib = runtime / LIB_DIR
    if not lib.is_dir():
        return
    for entry in sorted(lib.iterdir()):
        if entry.is_symlink() or not entry.is_file():
            continue
        for rule in data_rules_for(entry.name):
            yield entry, rule


def data_layout_problems(runtime: Path) -> list[str]:
    """Where a data folder sits wrongly, one line each (the bundler checks what it just placed with
    this, the verifier too): flattened, nested, shadowed; missing only for a library that cannot
    work without it."""
    runtime = Path(runtime)
    out = []
    for library, rule in data_libraries(runtime):
        want, problems, missing = data_layout(runtime, library, rule)
        for problem in problems + ([missing] if missing and rule.required else []):
            out.append(f"{library.name} reads {want.relative_to(runtime)}: {problem}")
    return out


def data_layout(runtime: Path, library: Path, rule: DataRule) -> tuple[Path, list[str], str | None]:
    """The folder `library` reads, what is wrong with where its data sits, and a line if it is
    simply missing (kept apart: for an optional folder that is only a slower runtime)."""
    lib = library.parent
    places = expected_places(library, rule)   # the library's own strings first (Debian's versioned path)
    want = lib / places[0]
    rel_want = want.relative_to(runtime)
    problems, missing = [], None
    for shadow in rule.shadows:
        s = Path(os.path.normpath(lib / shadow))
        if (s == runtime or runtime in s.parents) and s.is_dir():
            problems.append(f"stray folder {s.relative_to(runtime)}/: {library.name} probes it before "
                            f"{rel_want} and would read it instead")
    strays = sorted(p.name for p in lib.iterdir() if fnmatchcase(p.name, rule.marker) and not p.is_dir())
    if strays:
        problems.append(f"stray {rule.marker} files directly in {LIB_DIR}/ ({', '.join(strays[:3])}"
                        f"{' ...' if len(strays) > 3 else ''}): a flattened copy of the data folder")
    if not holds(want, rule.marker):
        misplaced = _misplaced(runtime, lib, want, places, rule.marker)
        if misplaced:
            problems.append(misplaced)
        else:
            missing = f"{rel_want}/ is missing or holds no {rule.marker} files"
    elif (want / want.name).is_dir():
        problems.append(f"{rel_want}/{want.name}/: a nested copy (cp -r into an existing folder)")
    return want, problems, missing


def holds(folder: Path, marker: str) -> bool:
    try:
        return folder.is_dir() and any(fnmatchcase(p.name, marker) for p in folder.rglob("*"))
    except OSError:
        return False


def _misplaced(runtime: Path, lib: Path, want: Path, places: tuple[str, ...], marker: str) -> str | None:
    """Where the data went instead of `want`: one level up (flattened), or another known place."""
    for parent in want.parents:
        if parent == lib.parent:
            break
        if parent.is_dir() and any(fnmatchcase(p.name, marker) for p in parent.iterdir() if p.is_file()):
            return (f"its files sit in {parent.relative_to(runtime)}/ instead: a flattened copy "
                    "(cp -r into a folder that did not exist)")
    for other in places[1:]:
        if holds(lib / other, marker):
            return (f"the data sits in {(lib / other).relative_to(runtime)}/ (the upstream layout), but this "
                    f"build of the library reads {want.relative_to(runtime)}")
    return None
