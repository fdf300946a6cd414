"""Runtime folders whose ELF files need a known glibc: tiny C programs and libraries compiled here,
with DT_RPATH as assemble sets it, planted into tests.support.runtimes' small runtime."""

from __future__ import annotations

from pathlib import Path

from builder.digest import sha256_file
from tests.support.manifests import read_raw, refresh_facts, write_raw
from tests.support.runtimes import make_runtime
from scripts.support.vendorlibs import compile_c

# arc4random appeared in glibc 2.36 (Debian 12's): a file calling it needs GLIBC_2.36.
NEEDS_236 = "#include <stdlib.h>\nint main(void) { return (int)(arc4random() & 1); }\n"
NEEDS_236_LIB = "#include <stdlib.h>\nunsigned pick(void) { return arc4random(); }\n"
# any program linked against glibc >= 2.34 needs __libc_start_main@GLIBC_2.34
PLAIN = "int main(void) { return 0; }\n"
PLAIN_LIB = "int ggml_backend_init(void) { return 0; }\n"
RPATH = "-Wl,-rpath,$ORIGIN/../lib,--disable-new-dtags"   # DT_RPATH, not DT_RUNPATH


def plant(rt: Path, rel: str, built: Path) -> None:
    """Replace a runtime file with `built` and update the manifest consistently (hash, size, and what the
    manifest says the files need: refresh_facts)."""
    dest = rt / rel
    dest.write_bytes(built.read_bytes())
    dest.chmod(0o755)
    raw = read_raw(rt)
    for f in raw["files"]:
        if f["path"] == rel:
            f.update(sha256=sha256_file(dest), size=dest.stat().st_size)
    write_raw(rt, {k: v for k, v in raw.items() if k not in ("schema", "created_by")})
    refresh_facts(rt)


def glibc_runtime(root: Path, *, server: str = PLAIN, module: str = PLAIN_LIB, floor: dict | None = None) -> Path:
    """A runtime whose bin/llama-server and bin/libggml-cpu.so are compiled from these sources;
    floor: the manifest's glibc_floor record (None: none, as before the floor was recorded)."""
    rt = make_runtime(root)
    work = root / "src"
    work.mkdir()
    plant(rt, "bin/llama-server", compile_c(server, work / "llama-server", RPATH))
    plant(rt, "bin/libggml-cpu.so", compile_c(module, work / "libggml-cpu.so", "-shared", RPATH))
    if floor is not None:
        raw = read_raw(rt)
        raw["glibc_floor"] = floor
        write_raw(rt, {k: v for k, v in raw.items() if k not in ("schema", "created_by")})
        refresh_facts(rt)
    return rt


def retag(path: Path, old: bytes, new: bytes) -> None:
    """Rename a symbol version in a file's string table (same length): how a file built against a
    newer glibc than this host's reads, without that glibc (Debian sid's inputs need GLIBC_2.43)."""
    data = path.read_bytes()
    assert len(old) == len(new) and old in data, old
    path.write_bytes(data.replace(old, new))
