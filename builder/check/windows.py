"""verify for a Windows runtime, by reading its files (a Linux host cannot load them).

Checks: the manifest's hashes; every .exe and .dll is x64; every DLL any of them imports is in the
folder or is left to the host by the policy (builder/data/windows.toml); no driver DLL is carried;
each backend the manifest names has its module; what ggml's loader searches besides the folder.
"""

from __future__ import annotations

from pathlib import Path

from builder.check.report import FAIL, PASS, SKIP, WARN, Check, Report
from builder.errors import AssembleError
from builder.prebuilt.loader import LOADER_PATCH, READS_CWD
from builder.runtime.manifest import Manifest, ManifestInvalid, check_files
from builder.windows import ARCH
from builder.windows.assemble import LOADER, module_backend
from builder.windows.pe import PeFile, is_pe, read_pe
from builder.windows.policy import host_rule


def _binaries(runtime: Path) -> tuple[list[PeFile], list[str]]:
    pes, bad = [], []
    for p in sorted(runtime.iterdir()):
        if p.is_file() and p.suffix.lower() in (".exe", ".dll"):
            if not is_pe(p):
                bad.append(f"{p.name}: not a PE file")
                continue
            try:
                pes.append(read_pe(p))
            except AssembleError as exc:
                bad.append(f"{p.name}: {exc.what}")
    return pes, bad


def _check(name: str, problems: list[str], good: str, hint: str) -> Check:
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        return Check(name, FAIL, "; ".join(problems[:3]) + more, hint)
    return Check(name, PASS, good)


# ggml.dll reads the working directory for one thing only, the loader's search of it
# (ggml-backend-reg.cpp); what reads it: builder.prebuilt.loader.READS_CWD.


def reads_working_directory(ggml: PeFile) -> list[str]:
    """The imports by which this ggml.dll can learn the working directory (none: it cannot search it)."""
    return sorted({f"{dll}!{name}" for dll, name in ggml.symbols if READS_CWD.search(name)})


def loader_check(pes: list[PeFile], accepted: str | None) -> Check:
    """Whether ggml's loader (in ggml.dll) also loads ggml-<backend>-*.dll from the working directory.
    A loader that cannot read the working directory cannot search it: the proof reads imports only
    (the Wine test runs both kinds with a planted DLL: tests/integration/test_windows.py)."""
    name = "module search"
    ggml = next((p for p in pes if p.path.name.lower() == LOADER), None)
    if ggml is None:
        return Check(name, PASS, f"no {LOADER}: no backend loader, the backends are linked in")
    readers = reads_working_directory(ggml)
    if not readers:
        return Check(name, PASS, f"{LOADER} searches only the executable's folder: it imports no way to read the "
                                 f"working directory (assemble's {LOADER_PATCH} patch)")
    risk = (f"{LOADER} also loads every ggml-<backend>-*.dll in the working directory (it imports {readers[0]}): "
            "a DLL planted where llama-server starts runs inside it, and a higher score replaces the real backend")
    if accepted:
        return Check(name, WARN, f"{risk}; accepted when repaired: {accepted}")
    return Check(name, FAIL, risk, "start llama-server only from its own folder and repair with --accept-loader-risk "
                                   "REASON to record that, or use a ggml.dll built by assemble (its loader patch "
                                   "removes the working-directory search)")


def verify_windows(runtime: Path, m: Manifest | None = None, accepted: str | None = None) -> Report:
    runtime = Path(runtime).resolve()
    try:
        m = m or Manifest.load(runtime)
    except ManifestInvalid as exc:
        return Report(str(runtime), (Check("manifest", FAIL, exc.what, "repair the runtime again"),))
    checks = [_check("manifest hashes", check_files(runtime, m), f"{len(m.files)} files match their sha256",
                     "a file was changed, removed or added after the repair: repair again, or copy the whole folder")]
    pes, unreadable = _binaries(runtime)
    here = {p.path.name.lower() for p in pes}
    checks.append(_check("architecture", unreadable + [f"{p.path.name} is {p.machine}" for p in pes
                                                       if p.machine != ARCH],
                         f"{len(pes)} executables and DLLs, all {ARCH}",
                         "one process loads one architecture: take every file from the x64 zips"))
    unresolved = [f"{p.path.name} imports {dll}, which is neither here nor a Windows or driver DLL"
                  for p in pes for dll in p.imports if dll.lower() not in here and host_rule(dll) is None]
    host = sorted({dll.lower() for p in pes for dll in p.imports if dll.lower() not in here})
    checks.append(_check("imports", unresolved, f"every import is in the folder or left to the host "
                                                f"({len(host)} host DLLs, each with its reason in the manifest)",
                         "add the zip that ships the missing DLL and repair again"))
    carried_drivers = [f"{p.path.name}: {r.reason}" for p in pes
                       if (r := host_rule(p.path.name)) and r.kind == "driver"]
    checks.append(_check("driver DLLs", carried_drivers, "none carried: the host's driver provides them",
                         "delete it from the inputs: a driver DLL must be the one the installed driver brought"))
    found = {b for p in pes if (b := module_backend(p.path.name)) is not None}
    missing = [f"no ggml-{b}*.dll for backend {b}" for b in m.recipe.backends if b not in found]
    checks.append(_check("backend modules", missing, f"{', '.join(sorted(found)) or '(none)'}",
                         "repair again from the zips that carry those backends"))
    checks.append(loader_check(pes, accepted or (m.loader.accepted_risk if m.loader else None)))
    checks.append(Check("run", SKIP, "a Windows runtime runs on Windows (or under Wine): `wine llama-server.exe "
                                     "--list-devices` from another folder is the first test there"))
    return Report(str(runtime), tuple(checks))
