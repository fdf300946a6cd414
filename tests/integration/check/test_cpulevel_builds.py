"""CPU levels on real builds: the cpu recipe's fourteen levels and Debian's, read and called (slow tier: a llama.cpp build, Debian's packages)."""

from __future__ import annotations

import ctypes
import shutil

from builder.check.cpulevel import NAME, compiled_features, cpu_level_check
from builder.check.report import FAIL, PASS
from builder.config import cpulevels
from tests.unit.check.test_cpulevel import runtime_with  # shared with the quick tier


def test_the_cpu_builds_fourteen_levels_each_report_their_own(cpu_runtime):
    check = cpu_level_check(cpu_runtime)
    assert check.status == PASS and f"{len(cpulevels.LEVELS)} libggml-cpu-<level>.so" in check.reason


def test_what_the_file_says_is_what_the_module_returns_when_called(cpu_runtime):
    """For the levels this CPU runs: load each module and call its ggml_cpu_has_*()."""
    flags = cpulevels.host_cpu_flags()
    ctypes.CDLL(str(cpu_runtime / "lib" / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    runnable = [lv for lv in cpulevels.LEVELS if lv.runs_on(flags)]
    assert runnable                       # x64 runs everywhere
    for lv in runnable:
        lib = ctypes.CDLL(str(cpu_runtime / "bin" / f"libggml-cpu-{lv.name}.so"))
        called = {f for n, f in cpulevels.SELF_REPORT.items() if getattr(lib, f"ggml_cpu_has_{n}")()}
        assert compiled_features(cpu_runtime / "bin" / f"libggml-cpu-{lv.name}.so") == called == lv.reported()


def test_debians_fourteen_levels_each_report_their_own(tmp_path):
    from tests.support.debianllama import FACTS, debian_llama_root
    backends = debian_llama_root() / FACTS.backend_dir.lstrip("/")
    rt = runtime_with(tmp_path, {p.name: p for p in backends.glob("libggml-cpu-*.so")})
    assert cpu_level_check(rt).status == PASS


def test_every_module_replaced_by_the_x64_build_fails_verify_static(cpu_runtime, tmp_path):
    """The issue's case: manifest hashes updated, so only what the modules say gives it away."""
    from tests.integration.check.test_verify import copy_runtime, reseal

    from builder.check.verify import verify_runtime
    rt = copy_runtime(cpu_runtime, tmp_path / "rt")
    x64 = rt / "bin" / "libggml-cpu-x64.so"
    swapped = [p for p in (rt / "bin").glob("libggml-cpu-*.so") if p != x64]
    for p in swapped:
        shutil.copyfile(x64, p)
    reseal(rt, changed=tuple(f"bin/{p.name}" for p in swapped))
    report = verify_runtime(rt, static=True)
    failed = [c for c in report.checks if c.status == FAIL]
    assert [c.name for c in failed] == [NAME] and not report.passed
    assert "(the x64 level), not " in failed[0].reason and f"(+{len(swapped) - 2} more)" in failed[0].reason


def test_the_best_name_over_x64_code_is_no_pass_for_the_loaded_variant(cpu_runtime, tmp_path):
    """The dynamic verify of the issue's case: every module holds x64 code, so each scores as x64 and
    ggml keeps one of them (a tie, decided by the order it reads bin/ in, which differs between hosts
    and filesystems); whichever it is, the cpu variant check names what that module holds."""
    from tests.integration.check.test_verify import copy_runtime, reseal

    from builder.check.verify import verify_runtime
    rt = copy_runtime(cpu_runtime, tmp_path / "rt")
    best = cpulevels.best_level(cpulevels.host_cpu_flags())
    assert best is not None and best.name != "x64"          # every x86-64 CPU with SSE4.2 has a better level
    x64 = rt / "bin" / "libggml-cpu-x64.so"
    swapped = [p for p in (rt / "bin").glob("libggml-cpu-*.so") if p != x64]
    for p in swapped:
        shutil.copyfile(x64, p)
    reseal(rt, changed=tuple(f"bin/{p.name}" for p in swapped))
    checks = {c.name: c for c in verify_runtime(rt).checks}
    assert checks[NAME].status == FAIL and checks["load CPU variants"].status == PASS
    variant = checks["cpu variant"]
    assert variant.status == FAIL, variant.reason
    loaded = variant.reason.partition(" loads")[0]
    assert loaded in {p.name for p in (rt / "bin").glob("libggml-cpu-*.so")}, variant.reason
    if loaded == x64.name:                                  # the one module whose name is true
        assert f"this CPU runs libggml-cpu-{best.name}.so, shipped beside it" in variant.reason
    else:                                                   # the best name, or any other: its code gives it away
        level = loaded.removeprefix("libggml-cpu-").removesuffix(".so")
        assert f"loads, but it was compiled with nothing beyond SSE2 (the x64 level), not {level}'s" \
            in variant.reason
