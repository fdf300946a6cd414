"""builder.runtime.cudacode: the code objects in real nvcc-built libraries, read from headers only,
and NVIDIA's rules for which of them a GPU of a given compute capability can run."""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from builder.errors import AssembleError
from builder.runtime.cudacode import CudaCode, read_cuda_code, runs_on, scan
from tests.support.common import TEST_CACHE

KERNEL = """
__global__ void add(float *a, const float *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += b[i];
}
extern "C" void launch(float *a, const float *b, int n) { add<<<(n + 255) / 256, 256>>>(a, b, n); }
"""

# One library per case, compiled once per module (CUDA 13.0 accepts these; it dropped < sm_75).
BUILDS = {
    "mixed": ["-gencode", "arch=compute_75,code=compute_75", "-gencode", "arch=compute_80,code=sm_80",
              "-gencode", "arch=compute_86,code=sm_86", "-gencode", "arch=compute_90a,code=sm_90a",
              "-gencode", "arch=compute_100f,code=sm_100f", "-gencode", "arch=compute_120a,code=sm_120a",
              "-gencode", "arch=compute_120f,code=compute_120f",
              "-gencode", "arch=compute_89,code=lto_89"],   # LTO IR (kind 8): for a later link, not code
    # every entry compressed: Zstd (nvcc's default mode) and LZ4 (--compress-mode=speed)
    "zstd": ["-gencode", "arch=compute_86,code=[sm_86,compute_86]", "-gencode", "arch=compute_120a,code=sm_120a",
             "-Xfatbin", "-compress-all"],
    "lz4": ["-gencode", "arch=compute_89,code=[sm_89,compute_89]", "--compress-mode=speed",
            "-Xfatbin", "-compress-all"],
}
EXPECTED = {
    "mixed": CudaCode(("sm_80", "sm_86", "sm_90a", "sm_100f", "sm_120a"), ("compute_75", "compute_120f")),
    "zstd": CudaCode(("sm_86", "sm_120a"), ("compute_86",)),
    "lz4": CudaCode(("sm_89",), ("compute_89",)),
}
COMPRESSED = {"zstd": 0x8000, "lz4": 0x2000}


def _nvcc() -> str | None:
    for candidate in (shutil.which("nvcc"), "/usr/local/cuda-13.0/bin/nvcc", "/usr/local/cuda/bin/nvcc"):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


# libs: 15-20 s of nvcc on the 2-core machine, once per nvcc release: the libraries are kept in the test
# cache under a key of nvcc's --version, the kernel and the flags (a new nvcc or a changed case compiles
# again), so a second run, and the second xdist worker, read them in milliseconds.
@pytest.fixture(scope="module")
def libs() -> dict[str, Path]:
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("needs nvcc (the CUDA toolkit) to compile real fat binaries")
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    key = hashlib.sha256(json.dumps([version, KERNEL, BUILDS]).encode()).hexdigest()[:16]
    folder = TEST_CACHE / "cudacode" / key
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)         # the other worker may be compiling them
        if not (folder / "done").is_file():
            source = folder / "k.cu"
            source.write_text(KERNEL)
            procs = {name: subprocess.Popen([nvcc, "-shared", "-Xcompiler", "-fPIC", "-o", str(folder / f"{name}.so"),
                                             str(source), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            text=True)
                     for name, args in BUILDS.items()}   # in parallel: each takes seconds
            for name, proc in procs.items():
                out, _ = proc.communicate(timeout=300)
                assert proc.returncode == 0, f"nvcc {name} failed:\n{out}"
            (folder / "done").write_text(version)
    return {name: folder / f"{name}.so" for name in BUILDS}


def _section(path: Path) -> tuple[int, int, int]:
    """(section header offset, sh_offset, sh_size) of .nv_fatbin, for the tests that damage a copy."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        index = elf.get_section_index(".nv_fatbin")
        sec = elf.get_section(index)
        return elf["e_shoff"] + index * elf["e_shentsize"], sec["sh_offset"], sec["sh_size"]


def _entry_flags(path: Path) -> list[tuple[int, int, int]]:
    """(kind, arch, flags) of every entry, walked here from the raw section (the layout the reader documents)."""
    _, off, size = _section(path)
    data = path.read_bytes()[off:off + size]
    out, pos = [], 0
    while pos < len(data):
        _magic, _ver, head, body = struct.unpack_from("<IHHQ", data, pos)
        entry, stop = pos + head, pos + head + body
        while entry < stop:
            kind, _v, ehead, payload = struct.unpack_from("<HHIQ", data, entry)
            arch, = struct.unpack_from("<I", data, entry + 0x1c)
            flags, = struct.unpack_from("<Q", data, entry + 0x28)
            out.append((kind, arch, flags))
            entry += ehead + payload
        pos = stop
    return out


class Counting:
    """A stream that counts the bytes read through it."""

    def __init__(self, raw):
        self.raw, self.count = raw, 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.count += len(data)
        return data

    def seek(self, off: int, whence: int = 0) -> int:
        return self.raw.seek(off, whence)

    def tell(self) -> int:
        return self.raw.tell()


# --- reading real fat binaries ----------------------------------------------------------

@pytest.mark.parametrize("name", sorted(BUILDS))
def test_reads_exactly_the_compiled_archs(libs, name):
    assert read_cuda_code(libs[name]) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(COMPRESSED))
def test_compressed_entries_still_name_their_arch(libs, name):
    entries = [e for e in _entry_flags(libs[name]) if e[0] in (1, 2)]
    assert entries and all(flags & COMPRESSED[name] for _, _, flags in entries), entries
    assert read_cuda_code(libs[name]) == EXPECTED[name]


def test_lto_entries_are_stepped_over(libs):
    assert (8, 89) in {(kind, arch) for kind, arch, _ in _entry_flags(libs["mixed"])}
    assert "sm_89" not in read_cuda_code(libs["mixed"]).sass


def test_variant_flags_as_nvcc_writes_them(libs):
    # arch-specific and family-specific builds differ only in two flag bits, for SASS and PTX alike
    by_arch = {(kind, arch): flags for kind, arch, flags in _entry_flags(libs["mixed"])}
    assert by_arch[(2, 90)] & 0x300000 == 0x100000      # sm_90a
    assert by_arch[(2, 120)] & 0x300000 == 0x100000     # sm_120a
    assert by_arch[(2, 100)] & 0x300000 == 0x200000     # sm_100f
    assert by_arch[(1, 120)] & 0x300000 == 0x200000     # compute_120f
    assert by_arch[(2, 86)] & 0x300000 == 0             # sm_86
    assert by_arch[(1, 75)] & 0x300000 == 0             # compute_75


def test_not_cuda(tmp_path):
    assert read_cuda_code("/bin/true") is None                  # an ELF without .nv_fatbin
    text = tmp_path / "notes.txt"
    text.write_text("not an ELF file\n")
    assert read_cuda_code(text) is None
    with pytest.raises(AssembleError, match="cannot open"):
        read_cuda_code(tmp_path / "missing.so")


def test_reads_headers_only(libs):
    with open(libs["mixed"], "rb", buffering=0) as raw:
        counted = Counting(raw)
        assert scan(counted) == EXPECTED["mixed"]
    _, _, size = _section(libs["mixed"])
    assert counted.count < size / 2, (counted.count, size)


def test_a_large_library_costs_kilobytes(libs, tmp_path):
    """A 1 GiB sparse copy whose .nv_fatbin holds 300 MiB payloads: the payloads are never read."""
    lib = tmp_path / "big.so"
    shutil.copyfile(libs["mixed"], lib)
    header_at, _, _ = _section(lib)
    start = (lib.stat().st_size + 4095) // 4096 * 4096
    payload = 300 << 20
    entries = [(2, 86, 0x11), (2, 120, 0x100011), (1, 75, 0x8011)]
    with open(lib, "r+b") as f:
        pos = start
        for kind, arch, flags in entries:             # one container per entry, as per-object linking makes
            f.seek(pos)
            f.write(struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 64 + payload))
            head = bytearray(64)
            struct.pack_into("<HHIQ", head, 0, kind, 0x0101, 64, payload)
            struct.pack_into("<I", head, 0x1c, arch)
            struct.pack_into("<Q", head, 0x28, flags)
            f.write(head)
            pos += 16 + 64 + payload
        f.truncate(pos)                               # the payloads are holes
        f.seek(header_at + 24)
        f.write(struct.pack("<QQ", start, pos - start))   # point the section header at the new fat binary
    assert lib.stat().st_size > 900 << 20
    with open(lib, "rb", buffering=0) as raw:
        counted = Counting(raw)
        assert scan(counted) == CudaCode(("sm_86", "sm_120a"), ("compute_75",))
    assert counted.count < 64 * 1024, counted.count


# --- damaged files: one AssembleError line, never a traceback ----------------------------

def _damaged(libs, tmp_path, edit) -> Path:
    lib = tmp_path / "damaged.so"
    shutil.copyfile(libs["mixed"], lib)
    header_at, off, size = _section(lib)
    with open(lib, "r+b") as f:
        edit(f, header_at, off, size)
    return lib


def _first_entry(f, off: int) -> int:
    f.seek(off + 6)
    head, = struct.unpack("<H", f.read(2))
    return off + head


DAMAGE = {
    "bad magic": (lambda f, h, off, size: (f.seek(off), f.write(b"\x11\x22\x33\x44")),
                  "no fat binary container"),
    "container too long": (lambda f, h, off, size: (f.seek(off + 8), f.write(struct.pack("<Q", size * 4))),
                           "past the end of the section"),
    "entry too long": (lambda f, h, off, size: (f.seek(_first_entry(f, off) + 8),
                                                f.write(struct.pack("<Q", size * 4))),
                       "does not fit its container"),
    "entry header too short": (lambda f, h, off, size: (f.seek(_first_entry(f, off) + 4),
                                                        f.write(struct.pack("<I", 8))),
                               "does not fit its container"),
    "both variant flags": (lambda f, h, off, size: (f.seek(_first_entry(f, off) + 0x28),
                                                    f.write(struct.pack("<Q", 0x300011))),
                           "both arch-specific and family-specific"),
    "section past end of file": (lambda f, h, off, size: (f.seek(h + 32), f.write(struct.pack("<Q", 1 << 40))),
                                 "past the end of the file"),
    "stray bytes": (lambda f, h, off, size: (f.seek(h + 32), f.write(struct.pack("<Q", size + 4)),
                                             f.seek(off + size), f.write(b"\x01\x02\x03\x04")),
                    "stray bytes"),
    "section headers cut off": (lambda f, h, off, size: f.truncate(h - 8), "not a readable ELF file"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damage_is_one_line(libs, tmp_path, case):
    edit, words = DAMAGE[case]
    lib = _damaged(libs, tmp_path, edit)
    with pytest.raises(AssembleError) as info:
        read_cuda_code(lib)
    line = info.value.line()
    assert words in line and "\n" not in line and str(lib) in line, line


def test_zero_padding_between_containers_is_skipped(libs, tmp_path):
    # a linker that aligns input sections to 16 leaves zeros between containers: not damage
    lib = tmp_path / "padded.so"
    shutil.copyfile(libs["lz4"], lib)
    header_at, off, size = _section(lib)
    blob = lib.read_bytes()[off:off + size]
    start = (lib.stat().st_size + 15) // 16 * 16
    with open(lib, "r+b") as f:
        f.seek(start)
        f.write(blob + b"\0" * 24 + blob + b"\0" * 8)
        f.seek(header_at + 24)
        f.write(struct.pack("<QQ", start, 2 * size + 32))
    assert read_cuda_code(lib) == EXPECTED["lz4"]


# --- the value and its rules -------------------------------------------------------------

def test_normalised_and_round_trips():
    code = CudaCode(("sm_120a", "sm_86", "sm_100f", "sm_86", "sm_90"), ("compute_120", "compute_75"))
    assert code.sass == ("sm_86", "sm_90", "sm_100f", "sm_120a")
    assert code.ptx == ("compute_75", "compute_120")
    assert code.as_dict() == {"sass": ["sm_86", "sm_90", "sm_100f", "sm_120a"], "ptx": ["compute_75", "compute_120"]}
    assert CudaCode.from_dict(code.as_dict()) == code
    assert CudaCode.from_dict({"sass": [], "ptx": []}) == CudaCode()
    with pytest.raises(ValueError, match="sass must be a list of names"):
        CudaCode("sm_86")


@pytest.mark.parametrize("data, words", [
    ({"sass": ["sm_86", "compute_75"], "ptx": []}, "'compute_75' is not a name like sm_86"),
    ({"sass": [], "ptx": ["sm_86"]}, "'sm_86' is not a name like compute_75"),
    ({"sass": ["sm_8"], "ptx": []}, "is not a name"),
    ({"sass": ["sm_90b"], "ptx": []}, "is not a name"),
    ({"sass": "sm_86", "ptx": []}, "must be a list"),
    ({"sass": [86], "ptx": []}, "must be a list of names"),
    ({"sass": []}, "exactly 'sass' and 'ptx'"),
    ({"sass": [], "ptx": [], "extra": 1}, "exactly 'sass' and 'ptx'"),
    (["sm_86"], "exactly 'sass' and 'ptx'"),
])
def test_from_dict_refuses(data, words):
    with pytest.raises(ValueError, match=words):
        CudaCode.from_dict(data)


MIXED = EXPECTED["mixed"]   # sass sm_80 sm_86 sm_90a sm_100f sm_120a; ptx compute_75 compute_120f
PTX_TAIL = ("is JIT-compiled by the driver at first use (slow first start, needs a driver at least as new as "
            "the toolkit)")


@pytest.mark.parametrize("capability, ok, reason", [
    (61, False, "no SASS for 6.x and no PTX at or below compute_61"),
    (75, True, f"no SASS for 7.x; PTX compute_75 {PTX_TAIL}"),
    (80, True, "SASS sm_80 runs on 8.0 (built for this capability)"),
    (86, True, "SASS sm_86 runs on 8.6 (built for this capability)"),
    (87, True, "SASS sm_86 runs on 8.7 (same major, binary compatible)"),
    (89, True, "SASS sm_86 runs on 8.9 (same major, binary compatible)"),
    (90, True, "SASS sm_90a runs on 9.0 (arch-specific, built for exactly this capability)"),
    (100, True, "SASS sm_100f runs on 10.0 (built for this capability, family-specific)"),
    (103, True, "SASS sm_100f runs on 10.3 (same family 10.x, binary compatible)"),
    (110, True, f"no SASS for 11.x; PTX compute_75 {PTX_TAIL}"),
    (120, True, "SASS sm_120a runs on 12.0 (arch-specific, built for exactly this capability)"),
    (121, True, f"no SASS for 12.1 (sm_120a runs only on 12.0); PTX compute_120f {PTX_TAIL}"),
    (130, True, f"no SASS for 13.x; PTX compute_75 {PTX_TAIL}"),
])
def test_runs_on_the_compiled_library(libs, capability, ok, reason):
    assert read_cuda_code(libs["mixed"]) == MIXED
    assert runs_on(MIXED, capability) == (ok, reason)


@pytest.mark.parametrize("code, capability, ok, reason", [
    (CudaCode(("sm_86",)), 80, False, ("no SASS for 8.0 (sm_86 needs 8.6 or a newer 8.x) and no PTX at or below "
                                       "compute_80")),
    (CudaCode(("sm_86",)), 90, False, "no SASS for 9.x and no PTX at or below compute_90"),
    (CudaCode(("sm_90a",)), 90, True, "SASS sm_90a runs on 9.0 (arch-specific, built for exactly this capability)"),
    (CudaCode(("sm_100a",)), 103, False, ("no SASS for 10.3 (sm_100a runs only on 10.0) and no PTX at or below "
                                          "compute_103")),
    (CudaCode(("sm_103f",)), 100, False, ("no SASS for 10.0 (sm_103f needs 10.3 or a newer 10.x) and no PTX at or "
                                          "below compute_100")),
    (CudaCode(("sm_100f",)), 120, False, "no SASS for 12.x and no PTX at or below compute_120"),
    (CudaCode(("sm_90", "sm_90a")), 90, True, ("SASS sm_90a runs on 9.0 (arch-specific, built for exactly this "
                                               "capability)")),
    (CudaCode(ptx=("compute_120a",)), 121, False, ("no SASS for 12.x and no PTX the driver can JIT for 12.1 "
                                                   "(compute_120a runs only on 12.0)")),
    (CudaCode(ptx=("compute_100f",)), 120, False, ("no SASS for 12.x and no PTX the driver can JIT for 12.0 "
                                                   "(compute_100f needs 10.0 or a newer 10.x)")),
    (CudaCode(ptx=("compute_100f",)), 103, True, f"no SASS for 10.x; PTX compute_100f {PTX_TAIL}"),
    (CudaCode(ptx=("compute_75", "compute_86")), 89, True, f"no SASS for 8.x; PTX compute_86 {PTX_TAIL}"),
    (CudaCode(), 89, False, "no SASS for 8.x and no PTX at or below compute_89"),
])
def test_runs_on_rules(code, capability, ok, reason):
    assert runs_on(code, capability) == (ok, reason)


@pytest.mark.parametrize("bad", [8.9, "89", True, 0, 9, 1000, None])
def test_runs_on_refuses_a_bad_capability(bad):
    with pytest.raises(ValueError, match="compute capability x10"):
        runs_on(CudaCode(), bad)


def test_verify_judges_cards_against_a_real_module(libs, tmp_path):
    """verify's `CUDA code` check on a real fatbin: the cards asked for (--cuda-arch) and the cards here."""
    from builder.check.gpufit import cuda_code_checks
    from builder.toolchain.gpus import NvidiaGpu, NvidiaHost
    from builder.config.targets import CudaArch

    module = tmp_path / "bin" / "libggml-cuda.so"
    module.parent.mkdir()
    shutil.copyfile(libs["mixed"], module)
    ok = cuda_code_checks(tmp_path, [module], CudaArch.parse_list("75,89", "--cuda-arch"), None)
    assert [c.status for c in ok] == ["pass"]
    assert "7.5 (--cuda-arch 75): no SASS for 7.x; PTX compute_75" in ok[0].reason and "SASS sm_86 runs on 8.9" in ok[0].reason
    bad = cuda_code_checks(tmp_path, [module], (), NvidiaHost("470.256.02", (NvidiaGpu("Tesla P40", 61),), "nvidia-smi"))
    assert bad[0].status == "fail" and "6.1 (Tesla P40 here)" in bad[0].reason and "--cuda-arch 61" in bad[0].hint
    listed = cuda_code_checks(tmp_path, [module], (), None)[0]
    assert listed.status == "pass" and "SASS sm_80, sm_86, sm_90a, sm_100f, sm_120a" in listed.reason
    shutil.copyfile("/bin/true", module)
    assert cuda_code_checks(tmp_path, [module], (), None)[0].status == "fail"    # a CUDA module with no device code
