"""The x86-64 CPU levels ggml builds its CPU backend for: one home for their names, the
instruction-set options each turns on, the CPU flags each needs and the score ggml's loader
gives it.

With GGML_CPU_ALL_VARIANTS (the default here) ggml builds one `libggml-cpu-<level>.so` per
level below and its loader picks, at run time, the highest-scoring one this CPU supports
(ggml/src/ggml-cpu/arch/x86/cpu-feats.cpp scores, ggml/src/CMakeLists.txt levels; both read
at the pinned sha). A recipe may instead name one level (`[cpu] variants = "haswell"`): then
exactly that level's options are set, and nothing about the build host or its environment
(GGML_NATIVE, SOURCE_DATE_EPOCH) can change what is compiled.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL = "all"

# ggml's instruction-set options (GGML_<feature>), in the order of its x86 score bits.
# Each: (score bit or None when it adds no score, the /proc/cpuinfo flags it needs).
FEATURES: dict[str, tuple[int | None, tuple[str, ...]]] = {
    "FMA": (0, ("fma",)),
    "F16C": (1, ("f16c",)),
    "SSE42": (2, ("sse4_2",)),
    "BMI2": (3, ("bmi2",)),
    "AVX": (4, ("avx",)),
    "AVX2": (5, ("avx2",)),
    "AVX_VNNI": (6, ("avx_vnni",)),
    "AVX512": (7, ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    "AVX512_VBMI": (8, ("avx512vbmi",)),
    "AVX512_BF16": (9, ("avx512_bf16",)),
    "AVX512_VNNI": (10, ("avx512_vnni",)),
    "AMX_INT8": (11, ("amx_int8",)),
    "AMX_TILE": (None, ("amx_tile",)),
    "AMX_BF16": (None, ("amx_bf16",)),
}

# What each CPU module says it was compiled with: ggml's exported ggml_cpu_has_<name>() return 1
# or 0 by the compiler's own macros (__AVX2__, ...; ggml-cpu.c), and the backend's
# get_features reports exactly these. SSE4.2 has none: ssse3 stands for it (the x64 level is
# plain SSE2; SSE4.2 implies SSSE3). AMX_TILE and AMX_BF16 report nothing.
SELF_REPORT: dict[str, str] = {
    "ssse3": "SSE42", "avx": "AVX", "f16c": "F16C", "fma": "FMA", "avx2": "AVX2", "bmi2": "BMI2",
    "avx_vnni": "AVX_VNNI", "avx512": "AVX512", "avx512_vbmi": "AVX512_VBMI", "avx512_vnni": "AVX512_VNNI",
    "avx512_bf16": "AVX512_BF16", "amx_int8": "AMX_INT8",
}


@dataclass(frozen=True)
class CpuLevel:
    name: str                         # libggml-cpu-<name>.so
    features: tuple[str, ...]         # GGML_<feature> options turned on

    def defines(self) -> tuple[tuple[str, str], ...]:
        """Every instruction-set option, each set explicitly: none is left to ggml's defaults."""
        return tuple((f"GGML_{f}", "ON" if f in self.features else "OFF") for f in FEATURES)

    def cpu_flags(self) -> frozenset[str]:
        return frozenset(flag for f in self.features for flag in FEATURES[f][1])

    def score(self) -> int:
        """What ggml's loader scores this level on a CPU that supports it (1 + its feature bits)."""
        return 1 + sum(1 << bit for f in self.features if (bit := FEATURES[f][0]) is not None)

    def runs_on(self, flags: frozenset[str] | set[str]) -> bool:
        return self.cpu_flags() <= set(flags)

    def reported(self) -> frozenset[str]:
        """The features a module of this level says it was compiled with (SELF_REPORT's names)."""
        return frozenset(f for f in self.features if f in SELF_REPORT.values())


_BASE = ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2")
LEVELS: tuple[CpuLevel, ...] = (
    CpuLevel("x64", ()),
    CpuLevel("sse42", ("SSE42",)),
    CpuLevel("sandybridge", ("SSE42", "AVX")),
    CpuLevel("ivybridge", ("SSE42", "AVX", "F16C")),
    CpuLevel("piledriver", ("SSE42", "AVX", "F16C", "FMA")),
    CpuLevel("haswell", _BASE),
    CpuLevel("skylakex", _BASE + ("AVX512",)),
    CpuLevel("cannonlake", _BASE + ("AVX512", "AVX512_VBMI")),
    CpuLevel("cascadelake", _BASE + ("AVX512", "AVX512_VNNI")),
    CpuLevel("icelake", _BASE + ("AVX512", "AVX512_VBMI", "AVX512_VNNI")),
    CpuLevel("cooperlake", _BASE + ("AVX512", "AVX512_VNNI", "AVX512_BF16")),
    CpuLevel("zen4", _BASE + ("AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16")),
    CpuLevel("alderlake", _BASE + ("AVX_VNNI",)),
    CpuLevel("sapphirerapids", _BASE + ("AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_TILE",
                                        "AMX_INT8")),
)
BY_NAME = {lv.name: lv for lv in LEVELS}
# With all variants the top-level options only seed ggml's cache (each variant sets its own):
# pinned OFF so the cache reads the same whatever the environment.
ALL_VARIANTS_DEFINES = tuple((f"GGML_{f}", "OFF") for f in FEATURES)


def level(name: str) -> CpuLevel | None:
    return BY_NAME.get(name)


def best_level(flags: frozenset[str] | set[str], present: tuple[str, ...] | None = None) -> CpuLevel | None:
    """The level ggml's loader would choose on a CPU with these flags, among `present` (level names
    shipped; all by default): the highest score among those it can run."""
    names = set(present) if present is not None else set(BY_NAME)
    runnable = [lv for lv in LEVELS if lv.name in names and lv.runs_on(flags)]
    return max(runnable, key=CpuLevel.score, default=None)


def host_cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The flags of the first processor in /proc/cpuinfo (empty when it cannot be read)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def variant_of(module_name: str) -> str | None:
    """"libggml-cpu-haswell.so" -> "haswell"; the single-level module "libggml-cpu.so" -> None."""
    stem = module_name.split(".so", 1)[0]
    return stem[len("libggml-cpu-"):] if stem.startswith("libggml-cpu-") else None
