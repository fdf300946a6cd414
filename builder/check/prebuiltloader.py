"""The loader truth of a runtime whose ggml cannot be patched (assemble repair of a prebuilt):
a compiled-in GGML_BACKEND_DIR is searched before the executable's folder, so modules installed
there on this host are loaded first (on a tie the first found wins). The working-directory
risk is proven dynamically by the planted-module check (builder.check.dynamic)."""

from __future__ import annotations

from pathlib import Path

from builder.check.report import FAIL, WARN, Check
from builder.errors import AssembleError
from builder.prebuilt.loader import host_modules_in, loader_facts

NAME = "compiled-in module folder"


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
