"""builder.config.drivers: the driver floors table (builder/data/drivers.toml), its lookups and checks."""

from __future__ import annotations

import tomllib

import pytest

from builder.config.drivers import (
    TABLE,
    CudaDriverFloor,
    RocmDriverExpectation,
    cuda_driver_floor,
    driver_at_least,
    parse_table,
    rocm_driver_expectation,
    table,
)
from builder.errors import AssembleError

NOTES = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html"
MATRIX = "https://rocm.docs.amd.com/projects/install-on-linux/en/latest/reference/user-kernel-space-compat-matrix.html"


# --- CUDA -------------------------------------------------------------------------------

@pytest.mark.parametrize("version, minimum, toolkit_driver", [
    ("11.8", "450.80.02", "520.61.05"),
    ("12.0", "525.60.13", "525.60.13"),
    ("12.1", "525.60.13", "530.30.02"),
    ("12.2", "525.60.13", "535.54.03"),
    ("12.3", "525.60.13", "545.23.06"),
    ("12.4", "525.60.13", "550.54.14"),
    ("12.5", "525.60.13", "555.42.02"),
    ("12.6", "525.60.13", "560.28.03"),
    ("12.8", "525.60.13", "570.26"),
    ("12.9", "525.60.13", "575.51.03"),
    ("13.0", "580", "580.65.06"),
    ("13.1", "580", "590.44.01"),
    ("13.2", "580", "595.45.04"),
])
def test_cuda_table(version, minimum, toolkit_driver):
    floor = cuda_driver_floor(version)
    assert (floor.toolkit, floor.minimum, floor.toolkit_driver) == (version, minimum, toolkit_driver)
    assert floor.source == NOTES
    assert floor.minimum_source.startswith("https://docs.nvidia.com/")
    # the GA driver is a floor for the line: its updates only ever need more
    assert all(driver_at_least(u, floor.toolkit_driver) for u in floor.update_drivers)
    assert driver_at_least(floor.toolkit_driver, floor.minimum)


def test_cuda_updates():
    assert cuda_driver_floor("12.8").update_drivers == ("570.124.06",)
    assert cuda_driver_floor("13.0").update_drivers == ("580.82.07", "580.95.05")
    assert cuda_driver_floor("11.8").update_drivers == ()


@pytest.mark.parametrize("spelling", ["12.8", "12.8.0", "12.8.93", "V12.8.93", "v12.8.61", " 12.8.93\n"])
def test_cuda_version_forms(spelling):
    assert cuda_driver_floor(spelling) == cuda_driver_floor("12.8")


def test_cuda_unknown_minor_falls_back_to_the_major():
    floor = cuda_driver_floor("12.7.1")
    assert floor == CudaDriverFloor(
        "12.7", "525.60.13", "", floor.source,
        "CUDA 12.7 is not in the driver table: only the 12.x minor version compatibility floor is known",
        (), floor.source)
    assert cuda_driver_floor("13.9").minimum == "580" and cuda_driver_floor("13.9").toolkit_driver == ""
    assert "13.9 is not in the driver table" in cuda_driver_floor("13.9").note


@pytest.mark.parametrize("version", ["10.2", "14.0", "9.0.176"])
def test_cuda_unknown_major(version):
    assert cuda_driver_floor(version) is None


@pytest.mark.parametrize("bad", ["", "12", "twelve", "12.x", "cuda 12.8", "12.8-rc1", None, 12.8])
def test_cuda_bad_version(bad):
    with pytest.raises(ValueError, match="is not a CUDA toolkit version"):
        cuda_driver_floor(bad)


@pytest.mark.parametrize("installed, floor, ok", [
    ("570.86.15", "525.60.13", True),
    ("525.60.13", "525.60.13", True),
    ("525.60.12", "525.60.13", False),
    ("525.105.17", "525.60.13", True),      # numeric, not textual: 105 > 60
    ("570.26", "570.124.06", False),        # 26 < 124
    ("570.124.06", "570.124.6", True),      # leading zeros do not matter
    ("580.65.06", "580", True),             # a branch floor: 580 means 580.0.0
    ("575.57.08", "580", False),
    ("580", "580.65.06", False),
    ("1000.1", "999.99.99", True),
    (" 570.86.15\n", "525.60.13", True),
])
def test_driver_at_least(installed, floor, ok):
    assert driver_at_least(installed, floor) is ok


@pytest.mark.parametrize("installed, floor", [("570.86.15-open", "525"), ("", "525"), ("570", "r570"),
                                              ("570..1", "525"), (570, "525")])
def test_driver_at_least_refuses(installed, floor):
    with pytest.raises(ValueError, match="is not a driver version"):
        driver_at_least(installed, floor)


# --- ROCm -------------------------------------------------------------------------------

@pytest.mark.parametrize("version, kmds", [
    ("6.0", ("5.6.x", "5.7.x", "6.0.x", "6.1.x", "6.2.x")),
    ("6.1", ("5.7.x", "6.0.x", "6.1.x", "6.2.x", "6.3.x", "6.4.x")),
    ("6.2", ("6.0.x", "6.1.x", "6.2.x", "6.3.x", "6.4.x", "30.10.x")),
    ("6.3", ("6.1.x", "6.2.x", "6.3.x", "6.4.x", "30.10.x")),
    ("6.4", ("6.1.x", "6.2.x", "6.3.x", "6.4.x", "30.10.x")),
    ("7.0", ("6.2.x", "6.3.x", "6.4.x", "30.10.x")),
])
def test_rocm_table(version, kmds):
    got = rocm_driver_expectation(version)
    assert isinstance(got, RocmDriverExpectation)
    assert (got.rocm, got.kernel_drivers, got.source) == (version, kmds, MATRIX)
    assert got.kernel_driver == "AMD GPU Driver (amdgpu) " + ", ".join(kmds[:-1]) + " or " + kmds[-1]
    assert "supported" in got.note


@pytest.mark.parametrize("spelling", ["6.4", "6.4.0", "6.4.1", "6.4.1-120", " 6.4.3\n"])
def test_rocm_version_forms(spelling):
    assert rocm_driver_expectation(spelling).rocm == "6.4"


@pytest.mark.parametrize("version", ["5.7", "5.7.1", "7.9", "8.0"])
def test_rocm_unknown(version):
    assert rocm_driver_expectation(version) is None


@pytest.mark.parametrize("bad", ["", "6", "rocm-6.4", "V6.4", None])
def test_rocm_bad_version(bad):
    with pytest.raises(ValueError, match="is not a ROCm version"):
        rocm_driver_expectation(bad)


# --- the data file ----------------------------------------------------------------------

def test_shipped_table_is_well_formed_and_sourced():
    raw = tomllib.loads(TABLE.read_text(encoding="utf-8"))
    entries = raw["cuda_major"] + raw["cuda_toolkit"] + raw["rocm"]
    assert entries and all(e["source"].startswith("https://") for e in entries)
    assert table() is table()                                   # read once
    assert sorted(table().cuda_majors) == [11, 12, 13]
    with pytest.raises(TypeError):
        table().rocm["9.9"] = None                              # shared, so read-only


GOOD = '''
[[cuda_major]]
major = 12
minimum = "525.60.13"
source = "https://example.invalid/notes"
[[cuda_toolkit]]
version = "12.8"
driver = "570.26"
source = "https://example.invalid/notes"
[[rocm]]
version = "6.4"
kernel_drivers = ["6.4.x"]
source = "https://example.invalid/matrix"
'''


def test_a_minimal_table(tmp_path):
    t = parse_table(tmp_path / "drivers.toml", GOOD)
    assert cuda_driver_floor("12.8", t).toolkit_driver == "570.26"
    assert rocm_driver_expectation("6.4", t).kernel_driver == "AMD GPU Driver (amdgpu) 6.4.x"


@pytest.mark.parametrize("edit, words", [
    (lambda s: s.replace('source = "https://example.invalid/notes"', 'source = "see the notes"', 1),
     "cuda_major[0].source: 'see the notes' is not an https:// address"),
    (lambda s: s.replace('driver = "570.26"\nsource = "https://example.invalid/notes"\n', 'driver = "570.26"\n'),
     "cuda_toolkit[0]: an entry has exactly driver, source, version"),
    (lambda s: s.replace('driver = "570.26"', 'driver = "570.26 or newer"'), "is not a driver version"),
    (lambda s: s.replace('version = "12.8"', 'version = "12.8.1"'), "is not a toolkit line like 12.8"),
    (lambda s: s.replace('version = "12.8"', 'version = "13.0"'), "no cuda_major entry for 13.0"),
    (lambda s: s.replace('major = 12', 'major = "12"'), "is not a new major version number"),
    (lambda s: s.replace('["6.4.x"]', '["6.4"]'), "kernel_drivers: must be a non-empty list"),
    (lambda s: s.replace('["6.4.x"]', '[]'), "kernel_drivers: must be a non-empty list"),
    (lambda s: s + '[[rocm]]\nversion = "6.4"\nkernel_drivers = ["6.4.x"]\nsource = "https://x.invalid"\n',
     "rocm[1].version: 6.4 is listed twice"),
    (lambda s: s + '[[vulkan]]\nversion = "1.3"\n', "vulkan: unknown table"),
    (lambda s: s.replace("[[rocm]]", "[[rocm]\n"), "cannot read the driver table"),
    (lambda s: s.split("[[rocm]]")[0], "each table needs at least one entry"),
])
def test_a_bad_table_is_one_line(tmp_path, edit, words):
    with pytest.raises(AssembleError) as info:
        parse_table(tmp_path / "drivers.toml", edit(GOOD))
    line = info.value.line()
    assert words in line and "\n" not in line and "drivers.toml" in line, line
