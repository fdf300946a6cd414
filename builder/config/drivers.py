"""Driver floors as data with their sources (builder/data/drivers.toml): which NVIDIA driver a CUDA
toolkit's code needs, and which amdgpu kernel-mode drivers AMD supports a ROCm user space with.

    cuda_driver_floor("V12.8.93")  -> minimum 525.60.13 (12.x minor version compatibility),
                                      toolkit_driver 570.26 (12.8 GA: full features, PTX JIT)
    driver_at_least("570.86.15", "525.60.13") -> True
    rocm_driver_expectation("6.4.1") -> amdgpu 6.1.x, 6.2.x, 6.3.x, 6.4.x or 30.10.x

Pure lookups: the table is read once; nothing here looks at the machine.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from builder.errors import AssembleError
from builder.paths import builtin_data

TABLE = builtin_data("drivers.toml")
_TOOLKIT = re.compile(r"[vV]?(\d+)\.(\d+)(?:\.\d+)*")          # 12.8, 12.8.93, V12.8.93
_ROCM = re.compile(r"(\d+)\.(\d+)(?:\.\d+)*(?:-[0-9A-Za-z.]+)?")  # 6.4, 6.4.1, 6.4.1-120 (.info/version)
_DRIVER = re.compile(r"\d+(?:\.\d+)*")                          # 580, 570.26, 570.124.06
_LINE = re.compile(r"\d+\.\d+")
_KMD = re.compile(r"\d+\.\d+\.x")
_URL = re.compile(r"https://\S+")


@dataclass(frozen=True)
class CudaDriverFloor:
    toolkit: str                    # "12.8": the toolkit line asked about
    minimum: str                    # minor version compatibility floor of its major: SASS runs from here
    toolkit_driver: str             # the toolkit's GA driver: full features, JIT of its PTX ("" if not known)
    source: str                     # where toolkit_driver is from (where minimum is from, if that is all)
    note: str = ""                  # set when something is not known, or worth knowing
    update_drivers: tuple[str, ...] = ()   # newer drivers the line's later updates came with
    minimum_source: str = ""        # where minimum is from


@dataclass(frozen=True)
class RocmDriverExpectation:
    rocm: str                       # "6.4"
    kernel_driver: str              # in words, for a report line
    source: str
    kernel_drivers: tuple[str, ...] = ()   # AMD's supported amdgpu kernel-mode drivers: "6.4.x", "30.10.x"
    note: str = ""


@dataclass(frozen=True)
class DriverTable:
    cuda_majors: Mapping[int, Any]           # major (int) -> (minimum, source, note)
    cuda_toolkits: Mapping[str, Any]         # "12.8" -> (driver, updates, source)
    rocm: Mapping[str, Any]                  # "6.4" -> RocmDriverExpectation


def _fail(path: Path, key: str, what: str) -> AssembleError:
    return AssembleError(f"{key}: {what}", where=str(path), fix="restore the file from the package")


def _text(path: Path, key: str, raw: dict[str, Any], name: str, pattern: re.Pattern[str], example: str) -> str:
    value = raw.get(name)
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise _fail(path, f"{key}.{name}", f"{value!r} is not {example}")
    return value


def _keys(path: Path, key: str, raw: object, required: set[str], optional: set[str] | frozenset[str] = frozenset()) -> None:
    if not isinstance(raw, dict) or not required <= set(raw) <= required | optional:
        names = ", ".join(sorted(required)) + (f" (and optionally {', '.join(sorted(optional))})" if optional else "")
        raise _fail(path, key, f"an entry has exactly {names}")


def parse_table(path: Path, text: str | None = None) -> DriverTable:
    """The table, checked: every entry well-formed and sourced; AssembleError naming the first fault."""
    try:
        data = tomllib.loads(text if text is not None else path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AssembleError(f"cannot read the driver table ({exc})", where=str(path),
                            fix="restore the file from the package") from None
    extra = set(data) - {"cuda_major", "cuda_toolkit", "rocm"}
    if extra:
        raise _fail(path, min(extra), "unknown table (cuda_major, cuda_toolkit and rocm are known)")
    majors: dict[int, tuple[str, str, str]] = {}
    for i, raw in enumerate(data.get("cuda_major", [])):
        key = f"cuda_major[{i}]"
        _keys(path, key, raw, {"major", "minimum", "source"}, {"note"})
        major = raw["major"]
        if not isinstance(major, int) or isinstance(major, bool) or major < 1 or major in majors:
            raise _fail(path, f"{key}.major", f"{major!r} is not a new major version number")
        note = raw.get("note", "")
        if not isinstance(note, str):
            raise _fail(path, f"{key}.note", "must be text")
        majors[major] = (_text(path, key, raw, "minimum", _DRIVER, "a driver version like 525.60.13"),
                         _text(path, key, raw, "source", _URL, "an https:// address"), note)
    toolkits: dict[str, Any] = {}
    for i, raw in enumerate(data.get("cuda_toolkit", [])):
        key = f"cuda_toolkit[{i}]"
        _keys(path, key, raw, {"version", "driver", "source"}, {"updates"})
        version = _text(path, key, raw, "version", _LINE, "a toolkit line like 12.8")
        if version in toolkits:
            raise _fail(path, f"{key}.version", f"{version} is listed twice")
        if int(version.split(".")[0]) not in majors:
            raise _fail(path, f"{key}.version", f"no cuda_major entry for {version}")
        updates = raw.get("updates", [])
        if not isinstance(updates, list) or not all(isinstance(u, str) and _DRIVER.fullmatch(u) for u in updates):
            raise _fail(path, f"{key}.updates", "must be a list of driver versions")
        toolkits[version] = (_text(path, key, raw, "driver", _DRIVER, "a driver version like 570.26"),
                             tuple(updates), _text(path, key, raw, "source", _URL, "an https:// address"))
    rocm: dict[str, Any] = {}
    for i, raw in enumerate(data.get("rocm", [])):
        key = f"rocm[{i}]"
        _keys(path, key, raw, {"version", "kernel_drivers", "source"})
        version = _text(path, key, raw, "version", _LINE, "a ROCm release line like 6.4")
        if version in rocm:
            raise _fail(path, f"{key}.version", f"{version} is listed twice")
        kmds = raw["kernel_drivers"]
        if not isinstance(kmds, list) or not kmds or not all(isinstance(k, str) and _KMD.fullmatch(k) for k in kmds):
            raise _fail(path, f"{key}.kernel_drivers", "must be a non-empty list like [\"6.4.x\", \"30.10.x\"]")
        words = ", ".join(kmds[:-1]) + (" or " if len(kmds) > 1 else "") + kmds[-1]
        rocm[version] = RocmDriverExpectation(
            version, f"AMD GPU Driver (amdgpu) {words}", _text(path, key, raw, "source", _URL, "an https:// address"),
            tuple(kmds), "AMD's supported user/kernel-space combinations; an upstream kernel's amdgpu is not listed")
    if not majors or not toolkits or not rocm:
        raise _fail(path, "cuda_major/cuda_toolkit/rocm", "each table needs at least one entry")
    # read-only views: the table is shared by every caller through the cache
    return DriverTable(MappingProxyType(majors), MappingProxyType(toolkits), MappingProxyType(rocm))


@lru_cache(maxsize=4)
def _load(path: Path) -> DriverTable:
    return parse_table(path)


def table(path: Path | None = None) -> DriverTable:
    return _load(path or TABLE)


def _line(version: object, pattern: re.Pattern[str], what: str) -> tuple[int, int]:
    m = pattern.fullmatch(version.strip()) if isinstance(version, str) else None
    if not m:
        raise ValueError(f"{version!r} is not a {what}")
    return int(m.group(1)), int(m.group(2))


def cuda_driver_floor(version: str, drivers: DriverTable | None = None) -> CudaDriverFloor | None:
    """The driver floors of a CUDA toolkit ("12.8", "12.8.93" or nvcc's "V12.8.93": major.minor counts).

    None for a major the table does not know; a minor it does not know gets the major's floor only.
    ValueError for something that is not a version.
    """
    t = drivers or table()
    major, minor = _line(version, _TOOLKIT, "CUDA toolkit version like 12.8 or V12.8.93")
    if major not in t.cuda_majors:
        return None
    minimum, major_source, major_note = t.cuda_majors[major]
    line = f"{major}.{minor}"
    if line not in t.cuda_toolkits:
        return CudaDriverFloor(line, minimum, "", major_source,
                               f"CUDA {line} is not in the driver table: only the {major}.x minor version "
                               f"compatibility floor is known", minimum_source=major_source)
    driver, updates, source = t.cuda_toolkits[line]
    return CudaDriverFloor(line, minimum, driver, source, major_note, updates, major_source)


def driver_at_least(installed: str, floor: str) -> bool:
    """Numeric compare of dotted driver versions: "570.86.15" >= "525.60.13"; "580" means 580.0.0."""
    parts = []
    for value in (installed, floor):
        if not isinstance(value, str) or not _DRIVER.fullmatch(value.strip()):
            raise ValueError(f"{value!r} is not a driver version like 570.86.15")
        parts.append([int(x) for x in value.strip().split(".")])
    a, b = parts
    width = max(len(a), len(b))
    return a + [0] * (width - len(a)) >= b + [0] * (width - len(b))


def rocm_driver_expectation(version: str, drivers: DriverTable | None = None) -> RocmDriverExpectation | None:
    """AMD's supported kernel-mode drivers for a ROCm release ("6.4", "6.4.1", "6.4.1-120"); None if not listed."""
    t = drivers or table()
    major, minor = _line(version, _ROCM, "ROCm version like 6.4 or 6.4.1")
    return t.rocm.get(f"{major}.{minor}")
