"""The CPU variant check's judging, without a build: real ld.so traces captured from the pinned
llama.cpp (`LD_DEBUG=files llama-server --list-devices`, trimmed), fake CPU flag sets and lists of
shipped modules."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from builder.check import cpuvariant as cv
from builder.check.report import FAIL, PASS, SKIP
from builder.config import cpulevels

ALL = tuple(f"libggml-cpu-{lv.name}.so" for lv in cpulevels.LEVELS)
BASE = frozenset({"fpu", "sse", "sse2", "ssse3", "sse4_1", "popcnt"})   # flags no level asks about


def flags_of(level: str, *extra: str) -> frozenset[str]:
    return BASE | cpulevels.BY_NAME[level].cpu_flags() | set(extra)


NEHALEM = flags_of("sse42")                                  # SSE4.2, no AVX
SAPPHIRE = flags_of("sapphirerapids", "amx_bf16")
ZEN4 = flags_of("zen4", "avx_vnni")                          # the development machine's EPYC

# An all-variants runtime on an AVX-512 EPYC (2 cores, 2026-11-30): every variant is opened and
# closed by the scan, the best (zen4) opened again and left mapped. Three of the 14 kept.
ALL_TRACE = """\
     15850:\tfile=/rt/bin/libggml-cpu-zen4.so [0];  dynamically loaded by /rt/bin/../lib/libggml.so.0 [0]
     15850:\tfile=/rt/bin/libggml-cpu-zen4.so [0];  generating link map
     15850:\tcalling init: /rt/bin/libggml-cpu-zen4.so
     15850:\topening file=/rt/bin/libggml-cpu-zen4.so [0]; direct_opencount=1
     15850:\tcalling fini: /rt/bin/libggml-cpu-zen4.so [0]
     15850:\t
     15850:\tfile=/rt/bin/libggml-cpu-zen4.so [0];  destroying link map
     15850:\tfile=/rt/bin/libggml-cpu-haswell.so [0];  dynamically loaded by /rt/bin/../lib/libggml.so.0 [0]
     15850:\tfile=/rt/bin/libggml-cpu-haswell.so [0];  generating link map
     15850:\tcalling init: /rt/bin/libggml-cpu-haswell.so
     15850:\topening file=/rt/bin/libggml-cpu-haswell.so [0]; direct_opencount=1
     15850:\tcalling fini: /rt/bin/libggml-cpu-haswell.so [0]
     15850:\tfile=/rt/bin/libggml-cpu-haswell.so [0];  destroying link map
     15850:\tfile=/rt/bin/libggml-cpu-x64.so [0];  dynamically loaded by /rt/bin/../lib/libggml.so.0 [0]
     15850:\tfile=/rt/bin/libggml-cpu-x64.so [0];  generating link map
     15850:\tcalling init: /rt/bin/libggml-cpu-x64.so
     15850:\tcalling fini: /rt/bin/libggml-cpu-x64.so [0]
     15850:\tfile=/rt/bin/libggml-cpu-x64.so [0];  destroying link map
     15850:\tfile=/rt/bin/libggml-cpu-zen4.so [0];  dynamically loaded by /rt/bin/../lib/libggml.so.0 [0]
     15850:\tfile=/rt/bin/libggml-cpu-zen4.so [0];  generating link map
     15850:\tcalling init: /rt/bin/libggml-cpu-zen4.so
     15850:\topening file=/rt/bin/libggml-cpu-zen4.so [0]; direct_opencount=1
0.00.012.064 I load_backend: loaded CPU backend from /rt/bin/libggml-cpu-zen4.so
     15850:\tcalling fini: /rt/bin/libggml-cpu-zen4.so [0]
"""

# The best variant needs a library that is not there: dlopen() fails, ggml says nothing, the next best loads.
BROKEN_TRACE = """\
     16096:\tfile=/rt/bin/libggml-cpu-zen4.so [0];  dynamically loaded by /rt/bin/../lib/libggml.so.0 [0]
     16096:\tfile=/rt/bin/libggml-cpu-zen4.so [0];  generating link map
     16096:\tfile=libnothere.so.1 [0];  needed by /rt/bin/libggml-cpu-zen4.so [0]
     16096:\tfile=/rt/bin/libggml-cpu-zen4.so [0];  destroying link map
     16096:\tfile=/rt/bin/libggml-cpu-cooperlake.so [0];  dynamically loaded by /rt/bin/../lib/libggml.so.0 [0]
     16096:\tfile=/rt/bin/libggml-cpu-cooperlake.so [0];  destroying link map
     16096:\tfile=/rt/bin/libggml-cpu-cooperlake.so [0];  dynamically loaded by /rt/bin/../lib/libggml.so.0 [0]
     16096:\tcalling fini: /rt/bin/libggml-cpu-cooperlake.so [0]
"""

# A single-level runtime: the one module, loaded once (by libggml's fallback to libggml-cpu.so).
SINGLE_TRACE = """\
     12490:\tfile=libggml-base.so.0 [0];  needed by /rt/bin/../lib/libllama-server-impl.so [0]
     12490:\tfile=libggml-base.so.0 [0];  generating link map
     12490:\tfile=/rt/bin/libggml-cpu.so [0];  dynamically loaded by /rt/bin/../lib/libggml.so.0 [0]
     12490:\tfile=/rt/bin/libggml-cpu.so [0];  generating link map
     12490:\topening file=/rt/bin/libggml-cpu.so [0]; direct_opencount=1
     12490:\tcalling fini: /rt/bin/libggml-cpu.so [0]
"""

# Every variant scored 0 (the scan closes each) and there is no libggml-cpu.so to fall back on.
NONE_TRACE = """\
     77:\tfile=/rt/bin/libggml-cpu-haswell.so [0];  dynamically loaded by /rt/bin/../lib/libggml.so.0 [0]
     77:\tfile=/rt/bin/libggml-cpu-haswell.so [0];  destroying link map
"""

LISTED = "Available devices:\n  (none)\n"


def done(stderr: str, stdout: str = LISTED, rc: int = 0) -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess(["llama-server", "--list-devices"], rc, stdout, stderr)


# --- reading a run ------------------------------------------------------------------------


def test_the_module_left_mapped_is_the_one_loaded():
    assert cv.modules_left_loaded(ALL_TRACE) == ("libggml-cpu-zen4.so",)
    assert cv.interpret(done(ALL_TRACE)) == cv.Loaded("libggml-cpu-zen4.so")
    assert cv.interpret(done(BROKEN_TRACE)).module == "libggml-cpu-cooperlake.so"
    assert cv.interpret(done(SINGLE_TRACE)).module == "libggml-cpu.so"


def test_only_modules_of_the_runtimes_bin_count(tmp_path):
    other = ALL_TRACE.replace("/rt/bin/", "/elsewhere/bin/")
    assert cv.modules_left_loaded(other, Path("/rt/bin")) == ()
    assert cv.modules_left_loaded(ALL_TRACE, Path("/rt/bin")) == ("libggml-cpu-zen4.so",)


def test_a_run_that_maps_no_cpu_module_has_no_cpu_backend():
    assert cv.interpret(done(NONE_TRACE)) == cv.Loaded(None, cv.NOT_LOADED)


def test_two_modules_left_loaded_are_named_not_guessed():
    extra = "     1:\tfile=/rt/bin/libggml-cpu-x64.so [0];  dynamically loaded by /p/libggml.so.0 [0]\n"
    seen = cv.interpret(done(ALL_TRACE + extra))
    assert seen.module is None and "libggml-cpu-zen4.so, libggml-cpu-x64.so" in seen.reason


def test_without_a_trace_ggmls_log_line_is_read_and_its_absence_proves_nothing():
    log = "0.00.007.458 I load_backend: loaded CPU backend from /a dir/bin/libggml-cpu-sse42.so\n"
    assert cv.interpret(done("", LISTED + log)).module == "libggml-cpu-sse42.so"
    seen = cv.interpret(done(""))
    assert seen.module is None and seen.started and seen.reason.startswith("cannot tell")


def test_a_failed_start_quotes_its_error_not_the_trace():
    seen = cv.interpret(done("     9:\tfile=libfoo.so [0];  needed by x [0]\nerror: libfoo.so: cannot open\n",
                             stdout="", rc=127))
    assert not seen.started and seen.reason == ("llama-server --list-devices did not start "
                                                "(exit 127: error: libfoo.so: cannot open)")


@pytest.mark.parametrize("rc", [-signal.SIGILL, 128 + signal.SIGILL])
def test_an_illegal_instruction_is_named(rc):
    seen = cv.interpret(done("", stdout="", rc=rc))
    assert seen.sigill and "SIGILL" in seen.reason


def test_module_names():
    assert cv.is_cpu_module("libggml-cpu.so") and cv.is_cpu_module("libggml-cpu-haswell.so")
    assert not cv.is_cpu_module("libggml-cuda.so") and not cv.is_cpu_module("libggml-cpu.so.0")
    assert not cv.is_cpu_module("libggml-cpuid.so")


# --- judging: all variants -----------------------------------------------------------------


def test_the_best_level_loading_passes():
    c = cv.judge(ALL, cv.Loaded("libggml-cpu-sapphirerapids.so"), SAPPHIRE)
    assert (c.status, c.reason) == (PASS, ("libggml-cpu-sapphirerapids.so loads: the best of the 14 levels "
                                           "shipped for this CPU"))
    assert cv.judge(ALL, cv.Loaded("libggml-cpu-zen4.so"), ZEN4).status == PASS
    assert cv.judge(ALL, cv.Loaded("libggml-cpu-sse42.so"), NEHALEM).status == PASS


def test_best_is_among_the_shipped_levels_only():
    shipped = ("libggml-cpu-x64.so", "libggml-cpu-haswell.so")
    c = cv.judge(shipped, cv.Loaded("libggml-cpu-haswell.so"), SAPPHIRE)
    assert c.status == PASS and "best of the 2 levels" in c.reason


def test_a_lower_level_loading_fails_naming_both_and_how_to_see_why():
    c = cv.judge(ALL, cv.Loaded("libggml-cpu-cooperlake.so"), ZEN4,
                 why_not="loading it alone: libnothere.so.1: cannot open shared object file")
    assert c.status == FAIL
    assert c.reason.startswith("libggml-cpu-cooperlake.so loads, but this CPU runs libggml-cpu-zen4.so")
    assert "full speed silently lost" in c.reason and "libnothere.so.1" in c.reason
    assert "LD_DEBUG=files" in c.hint and "ldd bin/libggml-cpu-zen4.so" in c.hint


def test_no_cpu_backend_names_the_lowest_level_and_the_flags_it_lacks():
    shipped = tuple(f"libggml-cpu-{n}.so" for n in ("haswell", "skylakex", "zen4"))
    c = cv.judge(shipped, cv.Loaded(None, cv.NOT_LOADED), NEHALEM)
    assert c.status == FAIL
    assert c.reason == ("CPU backend is not loaded: the runtime is unusable on this CPU: the lowest level shipped, "
                        "haswell, needs avx avx2 bmi2 f16c fma")


def test_no_cpu_backend_although_one_should_run_is_a_failure_with_the_reason():
    c = cv.judge(ALL, cv.Loaded(None, cv.NOT_LOADED), NEHALEM, why_not="it exports no ggml_backend_score")
    assert c.status == FAIL and "although this CPU runs libggml-cpu-sse42.so" in c.reason
    assert "ggml_backend_score" in c.reason


def test_a_level_this_cpu_lacks_the_flags_of_is_a_failure():
    c = cv.judge(ALL, cv.Loaded("libggml-cpu-haswell.so"), NEHALEM)
    assert c.status == FAIL and "lacks avx avx2 bmi2 f16c fma" in c.reason


def test_what_cannot_be_told_is_skipped():
    assert cv.judge((), cv.Loaded(None), ZEN4).status == SKIP
    assert cv.judge(ALL, cv.Loaded(None, "hung", started=False), ZEN4).status == SKIP
    assert cv.judge(ALL, cv.Loaded(None, "cannot tell: no trace"), ZEN4).status == SKIP
    unknown = cv.judge(ALL + ("libggml-cpu-future.so",), cv.Loaded("libggml-cpu-future.so"), ZEN4)
    assert unknown.status == SKIP and unknown.reason.startswith("not run: ")
    no_flags = cv.judge(ALL, cv.Loaded("libggml-cpu-zen4.so"), frozenset())
    assert no_flags.status == SKIP and "unreadable" in no_flags.reason


def test_sigill_fails_whatever_is_shipped():
    c = cv.judge(ALL, cv.Loaded(None, "llama-server died of SIGILL", started=False, sigill=True), NEHALEM)
    assert c.status == FAIL and "SIGILL" in c.reason


# --- judging: one level ---------------------------------------------------------------------


HASWELL_DEFINES = {"GGML_NATIVE": "OFF", **dict(cpulevels.BY_NAME["haswell"].defines())}


def test_single_level_features_from_the_manifests_defines():
    assert cv.single_level_features(HASWELL_DEFINES) == ("FMA", "F16C", "SSE42", "BMI2", "AVX", "AVX2")
    assert cv.single_level_features({"GGML_NATIVE": "OFF", "GGML_AVX": "on"}) == ("AVX",)
    assert cv.single_level_features({"GGML_NATIVE": "OFF"}) is None
    assert cv.single_level_features(None) is None


def test_a_single_level_loading_passes_naming_its_level():
    c = cv.judge(("libggml-cpu.so",), cv.Loaded("libggml-cpu.so"), ZEN4, HASWELL_DEFINES)
    assert c.status == PASS
    assert c.reason == ("libggml-cpu.so loads: one level, haswell (GGML_FMA, GGML_F16C, GGML_SSE42, GGML_BMI2, "
                        "GGML_AVX, GGML_AVX2 ON)")


def test_a_single_level_without_recorded_options_passes_saying_so():
    c = cv.judge(("libggml-cpu.so",), cv.Loaded("libggml-cpu.so"), ZEN4, {"GGML_NATIVE": "OFF"})
    assert c.status == PASS and "not in the manifest" in c.reason


def test_a_single_level_this_cpu_cannot_run_fails():
    c = cv.judge(("libggml-cpu.so",), cv.Loaded(None, cv.NOT_LOADED), NEHALEM, HASWELL_DEFINES)
    assert c.status == FAIL and c.reason.startswith(cv.NOT_LOADED)
    assert "lacks avx avx2 bmi2 f16c fma" in c.reason and 'variants = "all"' in c.hint
    loaded = cv.judge(("libggml-cpu.so",), cv.Loaded("libggml-cpu.so"), NEHALEM, HASWELL_DEFINES)
    assert loaded.status == FAIL and "lacks avx avx2 bmi2 f16c fma" in loaded.reason
