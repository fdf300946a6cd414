"""Prove a runtime works before anyone ships it.

Static checks read files only; dynamic checks run the runtime's own binaries with
an empty environment from a neutral working directory. A check that cannot run
on this host says "not run: ..." (status skip), it never passes silently.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder import ui
from builder import windows
from builder.errors import AssembleError
from builder.check import cpuvariant, facts, gpufit, integrity, placement, prebuiltloader
from builder.check import dynamic as devices
from builder.check import ops as opscheck
from builder.check import static as staticcheck
from builder.check.report import FAIL, PASS, SKIP, WARN, Check, Report
from builder.config.recipe import DEVICE_PREFIX, Recipe
from builder.config.targets import CudaArch
from builder.prebuilt.loader import LOADER_PATCH
from builder.runtime.gpuruntime import CudaRuntimeRecord, RocmRecord
from builder.runtime.manifest import Manifest
from builder.toolchain import gpus as gpu_probes
from builder.paths import scratch


def _device_checks(runtime: Path, backends: tuple[str, ...], env: dict[str, str],
                   host: _GpuHost) -> tuple[list[Check], devices.Listed]:
    """Each backend module must load; every device it reports must appear in --list-devices."""
    checks: list[Check] = []
    expected: list[str] = []
    for backend in backends:
        probes = [(module, devices.probe_module(runtime, module, env)) for module in devices.module_files(runtime, backend)]
        if backend == "cpu" and len(probes) > 1:      # CPU variants: one line for all of them
            checks.append(_cpu_variants_loaded(probes))
            continue
        for module, probe in probes:
            if probe.error:
                checks.append(Check(f"load {module.name}", FAIL, probe.error,
                                    "a library it needs is missing or the wrong version: see the static checks"))
            elif backend == "cpu":
                checks.append(Check(f"load {module.name}", PASS, "loads with an empty environment"))
            elif not probe.devices:
                checks.append(gpufit.no_device_failure(backend, module.name, host.nvidia, host.amd, host.cuda,
                                                       host.rocm)
                              or Check(f"load {module.name}", SKIP, f"not run: no {backend} device on this host "
                                       "(the module loads and reports none)"))
            else:
                checks.append(Check(f"load {module.name}", PASS, f"reports {', '.join(probe.devices)}"))
                expected += probe.devices
    listed = devices.list_devices(runtime, env)
    if listed.error:
        checks.append(Check("--list-devices", FAIL, listed.error, "run bin/llama-server --list-devices to see why"))
        return checks, devices.Listed()
    missing = [d for d in expected if d not in listed.devices]
    if missing:
        checks.append(Check("--list-devices", FAIL, f"{', '.join(missing)} missing from llama-server --list-devices "
                            f"(listed: {', '.join(listed.devices) or 'none'})",
                            "the backend module failed to load inside llama-server: check its dependencies"))
    else:
        checks.append(Check("--list-devices", PASS, ", ".join(listed.devices) or "(no GPU devices on this host)"))
    return checks, listed


def _cpu_variants_loaded(probes: list[Any]) -> Check:
    failed = [(m, p) for m, p in probes if p.error]
    if failed:
        m, p = failed[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return Check("load CPU variants", FAIL, f"{m.name}: {p.error}{more}",
                     "a library it needs is missing or the wrong version: see the static checks")
    beyond = [m.name for m, p in probes if p.unsupported]
    note = f"; {len(beyond)} need features this CPU lacks (ggml skips them here)" if beyond else ""
    return Check("load CPU variants", PASS, f"{len(probes) - len(beyond)} of {len(probes)} load with an empty "
                 f"environment{note}")


def _planted_check(runtime: Path, env: dict[str, str], accepted: str | None = None) -> Check:
    result = devices.planted_module_loaded(runtime, env)
    if result.loaded is None:
        return Check("working-directory modules", SKIP, f"not run: {result.how}")
    if result.loaded and accepted:   # a prebuilt loader that cannot be patched, and the user said so when repairing
        return Check("working-directory modules", WARN, f"llama-server loaded a planted libggml-cpu-*.so from its "
                     f"working directory ({result.how}); accepted when repaired: {accepted}")
    if result.loaded:
        return Check("working-directory modules", FAIL, f"llama-server loaded a planted libggml-cpu-*.so from its "
                     f"working directory ({result.how}): anyone who can write there runs code in it",
                     "build with the loader patch (backend-loader-no-cwd), which is on by default")
    return Check("working-directory modules", PASS, result.how)


def _ld_library_path_check(runtime: Path, env: dict[str, str]) -> Check:
    searched = devices.ld_library_path_searched(runtime, env)
    if searched.not_run:
        return Check("LD_LIBRARY_PATH decoys", SKIP, f"not run: {searched.not_run}")
    if searched.found:
        items = "; ".join(f"{name} (needed by {who})" for name, who in searched.found[:4])
        return Check("LD_LIBRARY_PATH decoys", FAIL, f"ld.so searched LD_LIBRARY_PATH for {items} before the "
                     "runtime's own copy: a library of that name there would be loaded instead",
                     "our files need DT_RPATH, not DT_RUNPATH (see 'RPATH of own files'): rebuild")
    return Check("LD_LIBRARY_PATH decoys", PASS, "with LD_LIBRARY_PATH set, ld.so never looked there for a "
                 "library the runtime carries")


def _smoke_checks(runtime: Path, devices_listed: list[str], env: dict[str, str], model: Path | None) -> list[Check]:
    checks = []
    given = model
    with scratch("smoke-") as tmp:
        if model is None:
            from builder.check.tinymodel import write_tiny_llama
            model = write_tiny_llama(tmp / "tiny-random-llama.gguf")
        configs = [("CPU", ["--device", "none"])] + [(d, ["--device", d, "-ngl", "99"]) for d in devices_listed]
        for label, args in configs:
            checks.append(_smoke_check(label, devices.smoke(runtime, model, args, env)))
        if len(devices_listed) >= 2:
            checks += _split_checks(runtime, tuple(devices_listed), env, given, tmp)
    return checks


def _smoke_check(label: str, result: devices.Smoke) -> Check:
    if result.error:
        return Check(f"smoke {label}", FAIL, result.error, f"log: {result.log}" if result.log else "")
    if result.foreign:
        return Check(f"smoke {label}", FAIL, "libraries loaded from outside the runtime: " + ", ".join(result.foreign),
                     "bundle them, or fix the RPATH of our files")
    return Check(f"smoke {label}", PASS, _speeds(result))


def _split_checks(runtime: Path, split: tuple[str, ...], env: dict[str, str], model: Path | None,
                  tmp: Path) -> list[Check]:
    """The layer split over every GPU device, started at two context sizes: it must serve (smoke), and the
    server's log must show each device holding layers whose KV grows with the context (placement)."""
    if model is None:     # the smoke model has too few layers to split: one with enough (tinymodel.SPLIT)
        from builder.check.tinymodel import split_shape, write_tiny_llama
        model = write_tiny_llama(tmp / "split-random-llama.gguf", split_shape(len(split)))
    label = f"{','.join(split)} layer split"
    args = ["--device", ",".join(split), "-ngl", "99", "--split-mode", "layer", *placement.LOG_VERBOSITY]
    runs = []
    for ctx in placement.CONTEXTS:
        result = devices.smoke(runtime, model, args, env, ctx=ctx,
                               while_loaded=lambda pid: {"cards": gpu_probes.card_memory()})
        check = _smoke_check(f"{label} (context {ctx})", result)
        if check.status != PASS:
            return [check, Check("placement", SKIP, f"not run: the {label} did not serve at context {ctx}")]
        runs.append(placement.Loaded(ctx, placement.read_log(result.server_log), result.observed.get("cards", ())))
    return [Check(f"smoke {label}", PASS, f"serves at contexts {' and '.join(map(str, placement.CONTEXTS))}; "
                  + _speeds(result)),
            placement.judge(split, runs[0], runs[1], placement.offloadable_mib(model))]


@dataclass(frozen=True)
class _GpuHost:
    """The cards and drivers here (none looked for under --static), and what the runtime needs of them."""
    nvidia: gpu_probes.NvidiaHost | None = None
    amd: gpu_probes.AmdHost | None = None
    cuda: CudaRuntimeRecord | None = None
    rocm: RocmRecord | None = None


def _speeds(result: devices.Smoke) -> str:
    """The server's own timings: prompt processing and generation apart (a whole-request time hides both)."""
    pp = f" at {result.prompt_per_second:.0f} t/s" if result.prompt_per_second is not None else ""
    tg = f" at {result.predicted_per_second:.1f} t/s" if result.predicted_per_second is not None else ""
    return (f"{result.prompt_tokens}-token prompt{pp}, {result.predicted} tokens generated{tg} "
            f"({result.seconds:.2f}s in all)")


def verify_runtime(runtime: Path, recipe: Recipe | None = None, smoke: bool = False, model: Path | None = None,
                   extra_env: dict[str, str] | None = None, static: bool = False, hip_targets: tuple[str, ...] = (),
                   cuda_archs: tuple[CudaArch, ...] = (), ops: opscheck.Selection | None = None) -> Report:
    """static: read files only (for a runtime meant for another host); hip_targets / cuda_archs: also
    check the code (and AMD data) for these cards; ops: also run tests/test-backend-ops on these cases
    for every GPU device listed (check/ops.py)."""
    runtime = Path(runtime).resolve()
    env = dict(extra_env or {})
    m, invalid = integrity.load(runtime)
    if m is not None and m.platform == windows.PLATFORM:
        from builder.check.windows import verify_windows      # a DLL folder: read, never run here
        report = verify_windows(runtime, m)
        return Report(report.subject, (*report.checks, _facts_check(runtime, m, None, report.checks)))
    listed = recipe.backends if recipe else (m.recipe.backends if m else None)
    backends = listed or ("cpu",)
    checks = integrity.checks(runtime, m, invalid, backends, listed)
    if m is not None:             # what the manifest states about the files, from the files
        checks.append(_facts_check(runtime, m, recipe, checks))
    checks += staticcheck.run(runtime, m, backends, recipe=recipe, extra_hip_targets=hip_targets, here=not static)
    gpus = m.gpu_runtimes if m else None
    host = _GpuHost() if static else _GpuHost(
        gpu_probes.nvidia_host() if "cuda" in backends else None,
        gpu_probes.amd_host() if "hip" in backends else None,
        gpus.cuda if gpus else None, gpus.rocm if gpus else None)
    # the code of the CUDA module a listed backend ships (an unlisted one is the integrity checks' failure)
    cuda_modules = devices.module_files(runtime, "cuda") if "cuda" in backends else []
    checks += gpufit.cuda_code_checks(runtime, cuda_modules, cuda_archs, host.nvidia)
    accepted = m.loader.accepted_risk if m and m.loader else None
    recorded = m.loader.backend_dirs if m and m.loader else ()
    if loader_dir := prebuiltloader.backend_dir_check(runtime, accepted, recorded, here=not static):
        checks.append(loader_dir)
    if static:
        patched = bool(m and any(p.name == LOADER_PATCH for p in m.llama_cpp.patches))
        if cwd := prebuiltloader.cwd_search_check(runtime, accepted, patched):
            checks.append(cwd)
        checks.append(Check("devices, loader and smoke", SKIP, "not run: --static reads files only"))
    elif (runtime / "bin" / "llama-server").is_file():
        if driver := gpufit.cuda_driver_check(host.cuda, host.nvidia):
            checks.append(driver)
        device_checks, shown = _device_checks(runtime, backends, env, host)
        checks += device_checks
        gpu_listed = [d for d in shown.devices if any(d.startswith(DEVICE_PREFIX[b]) for b in backends if b in DEVICE_PREFIX)]
        checks.append(cpuvariant.cpu_variant_check(runtime, env))
        checks.append(_planted_check(runtime, env, accepted))
        checks.append(_ld_library_path_check(runtime, env))
        if smoke:
            checks += _smoke_checks(runtime, gpu_listed, env, model)
            for b in backends:   # a GPU backend with nothing to run on is reported, never passed silently
                if b in DEVICE_PREFIX and not any(d.startswith(DEVICE_PREFIX[b]) for d in gpu_listed):
                    checks.append(Check(f"smoke {DEVICE_PREFIX[b]}", SKIP, f"not run: no {b} device on this host"))
        if ops is not None:
            checks += opscheck.ops_checks(runtime, gpu_listed, shown.descriptions, ops, env)
    else:
        checks.append(Check("llama-server", FAIL, "bin/llama-server is missing", "rebuild the runtime"))
    return Report(str(runtime), tuple(checks))


def _facts_check(runtime: Path, m: Manifest, recipe: Recipe | None, before: Sequence[Check]) -> Check:
    """The manifest's facts against its files, once the files are those it lists: facts read from a
    folder the hashes already fail would only repeat that failure."""
    if not any(c.name == "manifest hashes" and c.status == PASS for c in before):
        return Check(facts.NAME, SKIP, "not run: the files are not those the manifest lists (manifest hashes)")
    return facts.finding(runtime, m, recipe).check()


def require_passed(report: Report, where: str, what: str = "the new runtime") -> None:
    """Show the report; a failed one stops the caller before anything is swapped in (exit 1)."""
    render(report)
    if not report.passed:
        raise AssembleError(f"{what} failed verification; the output is untouched", where=where,
                            fix="see the failed checks above", code=1)


def render(report: Report, as_json: bool = False) -> None:
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
        return
    if ui.level() < ui.NORMAL and report.passed:
        return
    width = _width(report)
    for c in report.checks:
        print(_line(c, width), file=sys.stderr)
    verdict = ui.ok("all checks passed") if report.passed else ui.bad("verification FAILED")
    print(f"  {verdict} ({sum(c.status == FAIL for c in report.checks)} failed, "
          f"{sum(c.status == SKIP for c in report.checks)} not run)", file=sys.stderr)


def _width(report: Report) -> int:
    return max(len(c.name) for c in report.checks) if report.checks else 10


def _line(c: Check, width: int) -> str:
    colour: dict[str, Callable[[str], str]] = {PASS: ui.ok, FAIL: ui.bad, WARN: str, SKIP: str}
    line = f"  {c.name.ljust(width)}  {colour[c.status](c.status.upper().ljust(4))}  {c.reason}"
    if c.hint and c.status in (FAIL, WARN):
        line += f"\n  {' ' * width}        hint: {c.hint}"
    return line


def failed_lines(report: Report) -> str:
    """The failed checks only, each line as `verify` prints it: what a caller that refuses the runtime shows."""
    return "\n".join(_line(c, _width(report)) for c in report.checks if c.status == FAIL)
