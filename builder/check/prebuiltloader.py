"""The loader truth of a runtime whose ggml cannot be patched (assemble repair of a prebuilt):
a compiled-in GGML_BACKEND_DIR is searched before the executable's folder, so modules installed
there on this host are loaded first (on a tie the first found wins). The working-directory
risk is proven dynamically by the planted-module check (builder.check.dynamic) and, for
verify --static, read from libggml's dynamic symbols (builder.prebuilt.loader.cwd_reading)."""

from __future__ import annotations

from pathlib import Path

from builder.check.report import FAIL, PASS, WARN, Check
from builder.errors import AssembleError
from builder.prebuilt.loader import LOADER_PATCH, cwd_reading, host_modules_in, loader_facts

NAME = "compiled-in module folder"
CWD_NAME = "working-directory modules"      # the planted-module check's name: one fact, proven two ways


def _libggml(runtime: Path) -> Path | None:
    lib = runtime / "lib"
    found = sorted(p for p in lib.glob("libggml.so*") if p.is_file() and not p.is_symlink()) if lib.is_dir() else []
    return found[0] if found else None


def backend_dir_check(runtime: Path, accepted: str | None, recorded: tuple[str, ...] = (),
                      here: bool = True) -> Check | None:
    """None when the runtime's ggml has no compiled-in folder (every build of ours). `recorded`: what
    repair found (it saw where the input installed its modules, which the runtime no longer shows)."""
    libggml = _libggml(runtime)
    if libggml is None:
        return None
    try:
        found = loader_facts(libggml).backend_dirs
    except AssembleError:
        found = ()                    # a damaged libggml: the ELF and hash checks name it
    dirs = tuple(dict.fromkeys(recorded + found))
    if not dirs:
        return None
    risk = (f"{libggml.name} searches {', '.join(dirs)} (GGML_BACKEND_DIR, compiled in) before the runtime's bin/: "
            "a module installed there on a host is loaded instead of, or besides, the runtime's own")
    loaded = [(d, host_modules_in(d)) for d in dirs] if here else []
    present = [(d, mods) for d, mods in loaded if mods]
    if present:                       # the risk is real on this host: accepted or not, not the runtime's own code
        d, mods = present[0]
        return Check(NAME, FAIL, f"{risk}: on this host {d} holds {', '.join(mods[:4])}"
                     + (" ..." if len(mods) > 4 else "") + ", which this runtime would load",
                     "remove those packages from the host, run the runtime where they are absent, or repair with "
                     "--accept-loader-risk REASON to record that you accept it")
    where = "nothing is installed there on this host" if here else "this host not looked at (--static)"
    if accepted:
        return Check(NAME, WARN, f"{risk}; {where}; accepted when repaired: {accepted}")
    return Check(NAME, WARN, f"{risk}; {where}",
                 "a host that installs ggml's backend packages later changes what this runtime loads; repair "
                 "with --accept-loader-risk REASON to record that you accept it")


def cwd_search_check(runtime: Path, accepted: str | None, patched: bool = False) -> Check | None:
    """Whether the runtime's ggml loader searches the working directory, read from the dynamic symbols of
    lib/libggml.so* (verify --static; the dynamic verify plants a module instead). None: no libggml.
    `patched`: the manifest records that the build applied the loader patch."""
    libggml = _libggml(runtime)
    if libggml is None:
        return None
    try:
        reading = cwd_reading(libggml)
    except AssembleError:             # a damaged libggml: the ELF and hash checks name it
        return None
    if not reading.readers:
        return Check(CWD_NAME, PASS, f"{libggml.name} imports no way to read the working directory, so its loader "
                     f"cannot search it (assemble's {LOADER_PATCH} patch)")
    if reading.linked_in and set(reading.imported) <= {"getcwd"}:
        # libstdc++'s filesystem code inside libggml imports getcwd for its own current_path(), called or not:
        # the symbols cannot tell whether the loader searches the working directory
        linked = (f"{libggml.name} carries libstdc++'s filesystem code (linked in statically), whose "
                  "current_path() imports getcwd, so its symbols cannot tell whether the loader searches the "
                  "working directory")
        if patched:
            return Check(CWD_NAME, PASS, f"the build applied assemble's {LOADER_PATCH} patch (manifest), which removes "
                         f"the search; {linked}")
        if accepted:
            return Check(CWD_NAME, WARN, f"{linked}; accepted when repaired: {accepted}")
        return Check(CWD_NAME, WARN, linked, "run assemble verify without --static: it plants a module in the "
                     "working directory and sees whether it loads")
    reader = reading.readers[0]
    risk = (f"{libggml.name} imports {reader}: its loader also loads every libggml-*.so in the working "
            "directory, so anyone who can write where llama-server starts runs code in it")
    if accepted:
        return Check(CWD_NAME, WARN, f"{risk}; accepted when repaired: {accepted}")
    return Check(CWD_NAME, FAIL, risk, "start llama-server only from a folder nobody else writes and repair with "
                 "--accept-loader-risk REASON to record that, or build with assemble (its loader patch removes "
                 "the search)")
