"""Each libggml-cpu-<level>.so is judged by what it says it was compiled with, not by its name.

Fast: modules compiled here with each level's instruction-set flags, exporting ggml_cpu_has_*()
as ggml-cpu.c writes them. Slow (the warm cpu build, Debian's libggml0): ggml's own modules,
all 14 levels, the issue's swap (every module replaced by the x64 build, manifest resealed)
and, for the levels this CPU runs, the static reading against the functions called."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from builder.check.cpulevel import NAME, compiled_features, cpu_level_check
from builder.check.report import FAIL, PASS
from builder.config import cpulevels
from scripts.support.vendorlibs import compile_c

# ggml-cpu.c's pattern: the compiler's own macros decide each return value
HAS = {"ssse3": "__SSSE3__", "avx": "__AVX__", "f16c": "__F16C__", "fma": "__FMA__", "avx2": "__AVX2__",
       "bmi2": "__BMI2__", "avx_vnni": "__AVXVNNI__", "avx512": "__AVX512F__", "avx512_vbmi": "__AVX512VBMI__",
       "avx512_vnni": "__AVX512VNNI__", "avx512_bf16": "__AVX512BF16__", "amx_int8": "__AMX_INT8__"}
SOURCE = "\n".join(f"int ggml_cpu_has_{n}(void) {{\n#if defined({m})\n    return 1;\n#else\n    return 0;\n#endif\n}}"
                   for n, m in HAS.items()) + "\n"
_HASWELL = ("-msse4.2", "-mavx", "-mf16c", "-mfma", "-mavx2", "-mbmi2")
FLAGS = {"x64": (), "sse42": ("-msse4.2",), "haswell": _HASWELL,
         "zen4": _HASWELL + ("-mavx512f", "-mavx512cd", "-mavx512vl", "-mavx512dq", "-mavx512bw", "-mavx512vbmi",
                             "-mavx512vnni", "-mavx512bf16")}


def compile_levels(d: Path, *opts: str) -> dict[str, Path]:
    """One module per level, compiled as ggml compiles its variants (with CET's endbr64 for one)."""
    out = {}
    for level, flags in FLAGS.items():
        cet = ("-fcf-protection=full",) if level == "haswell" else ()
        out[level] = compile_c(SOURCE, d / f"{level}.so", *opts, "-shared", *flags, *cet)
    return out


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict[str, Path]:
    return compile_levels(tmp_path_factory.mktemp("levels"), "-O2")


def runtime_with(tmp_path: Path, files: dict[str, Path]) -> Path:
    (tmp_path / "rt" / "bin").mkdir(parents=True)
    for name, src in files.items():
        shutil.copyfile(src, tmp_path / "rt" / "bin" / name)
    return tmp_path / "rt"


def test_each_compiled_level_reports_its_own_features(modules, tmp_path):
    debug = compile_levels(tmp_path, "-O0")                # a Debug build: the same, in a stack frame
    for level in FLAGS:
        assert compiled_features(modules[level]) == compiled_features(debug[level]) == \
            cpulevels.level(level).reported(), level


def test_modules_named_for_their_level_pass(modules, tmp_path):
    rt = runtime_with(tmp_path, {f"libggml-cpu-{lv}.so": p for lv, p in modules.items()})
    check = cpu_level_check(rt)
    assert check.status == PASS and "4 libggml-cpu-<level>.so" in check.reason


def test_the_x64_build_under_better_names_is_named(modules, tmp_path):
    rt = runtime_with(tmp_path, {"libggml-cpu-x64.so": modules["x64"], "libggml-cpu-zen4.so": modules["x64"],
                                 "libggml-cpu-haswell.so": modules["sse42"]})
    check = cpu_level_check(rt)
    assert check.status == FAIL and check.name == NAME
    assert "libggml-cpu-haswell.so was compiled with SSE42 (the sse42 level), not haswell's" in check.reason
    assert "libggml-cpu-zen4.so was compiled with nothing beyond SSE2 (the x64 level), not zen4's" in check.reason
    assert "x64.so" not in check.reason.replace("libggml-cpu-zen4.so", "")


def test_a_foreign_or_damaged_module_is_named(modules, tmp_path):
    libm = Path("/lib/x86_64-linux-gnu/libm.so.6")
    cut = tmp_path / "cut.so"
    cut.write_bytes(modules["haswell"].read_bytes()[:300])
    rt = runtime_with(tmp_path, {"libggml-cpu-sse42.so": libm.resolve(), "libggml-cpu-haswell.so": cut})
    check = cpu_level_check(rt)
    assert check.status == FAIL
    assert "libggml-cpu-haswell.so: not a readable ELF file" in check.reason
    assert "libggml-cpu-sse42.so: it does not export ggml_cpu_has_ssse3(): not a ggml CPU module" in check.reason


def test_no_named_levels_no_check(modules, tmp_path):
    assert cpu_level_check(runtime_with(tmp_path, {"libggml-cpu.so": modules["haswell"]})) is None


# --- ggml's own modules (slow: the cpu build, Debian's packages) --------------------------




def test_a_failed_variant_verdict_names_the_code_the_loaded_module_holds(modules, tmp_path):
    """Modules holding x64 code under better names all score as x64; the one ggml keeps is the folder's
    order, so "this CPU lacks what it needs" or "runs another" would name the symptom: the code is the cause."""
    from builder.check.cpuvariant import NAME as VARIANT, _compiled_as_named
    from builder.check.report import Check
    rt = runtime_with(tmp_path, {"libggml-cpu-x64.so": modules["x64"], "libggml-cpu-zen4.so": modules["x64"],
                                 "libggml-cpu-haswell.so": modules["haswell"]})
    symptom = Check(VARIANT, FAIL, "libggml-cpu-zen4.so loads, but this CPU lacks avx512f that it needs")
    told = _compiled_as_named(rt, "libggml-cpu-zen4.so", symptom)
    assert told.status == FAIL and told.reason.startswith(
        "libggml-cpu-zen4.so loads, but it was compiled with nothing beyond SSE2 (the x64 level), not zen4's")
    # a module whose code is what its name says keeps the verdict it had
    other = Check(VARIANT, FAIL, "libggml-cpu-haswell.so loads, but this CPU runs libggml-cpu-zen4.so")
    assert _compiled_as_named(rt, "libggml-cpu-haswell.so", other) is other
