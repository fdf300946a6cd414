"""The one grammar of each GPU target kind. Recipes, the command line, the toolkit rules,
verify and matrix all parse through here, so a value one of them accepts the others accept.

CUDA architectures as CMake's CMAKE_CUDA_ARCHITECTURES takes them:
    90         real + PTX for compute capability 9.0
    90a        architecture-specific features (sm_90a)
    120f       family-specific (CUDA >= 12.9)
    86-real    machine code only;  75-virtual  PTX only
AMD gfx targets as clang's --offload-arch and rocminfo name them:
    gfx1100, gfx90a, gfx942      one chip
    gfx90a:xnack-                with target features (xnack, sramecc; + or -)
    gfx11-generic, gfx9-4-generic  a generic family target (ROCm >= 6.4)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from builder.errors import AssembleError

_CUDA = re.compile(r"(?P<number>[1-9][0-9]{1,2})(?P<suffix>[af]?)(?:-(?P<kind>real|virtual))?")
_NVCC = re.compile(r"(?:compute|sm)_(?P<number>[1-9][0-9]{1,2})(?P<suffix>[af]?)")
CUDA_FORMS = '"90", "90a", "120f", "86-real" or "75-virtual" (never "native")'

_GFX_CHIP = r"gfx[0-9]{1,2}[0-9a-f]{2}"                 # gfx803, gfx90a, gfx942, gfx1100, gfx1151
_GFX_GENERIC = r"gfx[0-9]{1,2}(?:-[0-9]+)?-generic"     # gfx11-generic, gfx9-4-generic
_GFX = re.compile(rf"(?P<arch>{_GFX_CHIP}|{_GFX_GENERIC})(?P<features>(?::(?:xnack|sramecc)[+-])*)")
GFX_FORMS = '"gfx1100", "gfx90a:xnack-" or "gfx11-generic" (the arch rocminfo shows)'
GFX_TOKEN = re.compile(rf"{_GFX_GENERIC}|{_GFX_CHIP}")  # a gfx arch inside a longer name (data files)


# The CUDA code a recipe ships when it names none ([cuda] architectures): machine code (SASS) for
# the cards people serve on, PTX at both ends. SASS sm_80/86/89/90/120a: A100/A30, RTX 30xx/A10/A40
# (and 8.7 by binary compatibility), RTX 40xx/L4/L40S, H100/H200, RTX 50xx/RTX PRO 6000 Blackwell.
# PTX compute_75: Turing (T4, RTX 20xx), JIT-compiled by the driver at first start. PTX compute_90:
# what no SASS covers (B200 at 10.0, GB10 at 12.1, later cards), also JIT. ggml's own default at the
# pinned sha differs: PTX only for 7.5/8.0/9.0 (a first start that compiles for minutes on H100)
# and 5.0-7.0 PTX that CUDA 13 cannot build.
DEFAULT_CUDA_ARCHITECTURES = ("75-virtual", "80-real", "86-real", "89-real", "90", "120a-real")


def _comma_list(text: str, where: str, example: str) -> list[str]:
    # "90,,120" is a typo, not two entries: an empty entry is refused, never dropped
    items = text.split(",")
    if any(not i.strip() for i in items):
        raise AssembleError(f"{text!r} has an empty entry", where=where, fix=f"write e.g. {example}")
    return items


@dataclass(frozen=True)
class CudaArch:
    number: int                 # compute capability x10: 90, 120
    suffix: str = ""            # "" | "a" (arch-specific) | "f" (family-specific)
    kind: str = ""              # "" (real + PTX) | "real" | "virtual"

    @classmethod
    def parse(cls, text: str, where: str = "") -> CudaArch:
        m = _CUDA.fullmatch(text.strip()) if isinstance(text, str) else None
        if not m:
            raise AssembleError(f"{text!r} is not a CUDA architecture", where=where or None,
                                fix=f"write it as {CUDA_FORMS}")
        return cls(int(m.group("number")), m.group("suffix"), m.group("kind") or "")

    @classmethod
    def parse_list(cls, text: str, where: str) -> tuple[CudaArch, ...]:
        """A comma list from the command line: "90,120"."""
        return tuple(cls.parse(i, where) for i in _comma_list(text, where, f"90,120 ({CUDA_FORMS})"))

    @classmethod
    def from_nvcc(cls, text: str) -> tuple[CudaArch, ...]:
        """What `nvcc --list-gpu-arch` names (compute_90, compute_120f), sorted, without repeats."""
        found = {cls(int(m.group("number")), m.group("suffix")) for m in _NVCC.finditer(text)}
        return tuple(sorted(found, key=lambda a: (a.number, a.suffix)))

    @property
    def base(self) -> str:
        """"120" for 120a-real: what toolkits and rules compare."""
        return str(self.number)

    def as_ggml_builds(self) -> CudaArch:
        """The architecture ggml's CMake compiles for this one: a plain 12X becomes 12Xa (Blackwell's FP4
        tensor-core code is not forward compatible; ggml-cuda/CMakeLists.txt rewrites every 12X, -real and
        -virtual too). The plan asks for it directly, so the manifest states the code the module carries."""
        if 120 <= self.number <= 129 and not self.suffix:
            return CudaArch(self.number, "a", self.kind)
        return self

    def __str__(self) -> str:
        return f"{self.number}{self.suffix}" + (f"-{self.kind}" if self.kind else "")


@dataclass(frozen=True)
class GfxTarget:
    arch: str                        # "gfx90a", "gfx11-generic"
    features: tuple[str, ...] = ()   # ("xnack-",), ("sramecc+", "xnack-")

    @classmethod
    def parse(cls, text: str, where: str = "") -> GfxTarget:
        m = _GFX.fullmatch(text.strip()) if isinstance(text, str) else None
        if not m:
            raise AssembleError(f"{text!r} is not a gfx target", where=where or None, fix=f"write it as {GFX_FORMS}")
        features = tuple(f for f in m.group("features").split(":") if f)
        if len({f[:-1] for f in features}) != len(features):
            raise AssembleError(f"{text!r} names a target feature twice", where=where or None,
                                fix=f"write it as {GFX_FORMS}")
        return cls(m.group("arch"), features)

    @classmethod
    def parse_list(cls, text: str, where: str) -> tuple[GfxTarget, ...]:
        """A comma list from the command line: "gfx1100,gfx942"."""
        return tuple(cls.parse(i, where) for i in _comma_list(text, where, f"gfx1100,gfx942 ({GFX_FORMS})"))

    @property
    def generic(self) -> bool:
        return self.arch.endswith("-generic")

    def __str__(self) -> str:
        return ":".join((self.arch, *self.features))


def gfx_tokens(name: str) -> set[str]:
    """The gfx chips a file name is specific to ("Kernels.so-000-gfx1100.hsaco" -> {"gfx1100"});
    a generic family target belongs to no single chip."""
    return {t for t in GFX_TOKEN.findall(name) if not t.endswith("-generic")}
