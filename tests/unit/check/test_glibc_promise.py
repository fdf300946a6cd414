"""The glibc floor a runtime promises, against the one its files need (read from .gnu.version_r).

Real ELF files compiled here: a program calling arc4random (glibc 2.36) needs GLIBC_2.36, any
other needs GLIBC_2.34 (__libc_start_main). `verify --static` fails a runtime that needs more than
its recipe promised, naming the file and the symbol version; a repaired runtime promises nothing
and is told as it is (a sid input needs GLIBC_2.43). The recipe's grammar and the manifest record.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from builder.check.report import FAIL, PASS, SKIP, WARN
from builder.config import glibc
from builder.config.recipe import parse_recipe
from builder.errors import AssembleError
from builder.runtime.elf import folder_need, read_elf
from builder.runtime.manifest import Manifest, ManifestInvalid
from tests.support.common import GOOD_RECIPE, assemble, one_error_line
from tests.support.glibcfloor import NEEDS_236, NEEDS_236_LIB, glibc_runtime, plant, retag
from tests.support.manifests import read_raw, write_raw
from scripts.support.vendorlibs import compile_c


def _checks(proc) -> dict:
    return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}


def _objdump_max(path) -> str:
    """binutils' answer: the highest GLIBC_ version in the file's dynamic symbol versions."""
    out = subprocess.run(["objdump", "-T", str(path)], capture_output=True, text=True, check=True).stdout
    versions = {w.strip("()") for w in out.split() if w.strip("()").startswith("GLIBC_2.")}
    return max((v.removeprefix("GLIBC_") for v in versions), key=lambda v: tuple(map(int, v.split("."))))


def test_the_need_is_read_from_the_files_and_names_the_file(tmp_path):
    rt = glibc_runtime(tmp_path, module=NEEDS_236_LIB)
    need = folder_need(rt)
    assert (need.version, need.symbol, need.file) == ("2.36", "GLIBC_2.36", "bin/libggml-cpu.so")
    assert _objdump_max(rt / "bin" / "libggml-cpu.so") == "2.36" and _objdump_max(rt / "bin" / "llama-server") == "2.34"
    assert read_elf(rt / "bin" / "llama-server").max_version("GLIBC_") == "2.34"


def test_verify_static_fails_a_runtime_needing_more_than_its_recipe_promised(tmp_path):
    rt = glibc_runtime(tmp_path, server=NEEDS_236,
                       floor={"promised": "2.35", "stated_by": "recipe", "needed_by": "bin/llama-server"})
    proc = assemble("verify", str(rt), "--static", "--json")
    assert proc.returncode == 1, proc.stderr
    c = _checks(proc)["glibc promise"]
    assert c["status"] == FAIL
    assert "bin/llama-server needs GLIBC_2.36" in c["reason"] and "2.35 the recipe promises" in c["reason"]
    assert 'glibc_floor = "2.36"' in c["hint"]
    # the same runtime promising what it needs passes, and every other check of it passes too
    write_raw(rt, {**{k: v for k, v in read_raw(rt).items() if k not in ("schema", "created_by")},
                   "glibc_floor": {"promised": "2.36", "stated_by": "build host", "needed_by": "bin/llama-server"}})
    proc = assemble("verify", str(rt), "--static", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    c = _checks(proc)["glibc promise"]
    assert c["status"] == PASS and "needs glibc 2.36 (bin/llama-server: GLIBC_2.36)" in c["reason"]
    assert "2.36 the build host promises" in c["reason"]


def test_a_carried_library_counts(tmp_path):
    rt = glibc_runtime(tmp_path, floor={"promised": "2.35", "stated_by": "recipe", "needed_by": "bin/llama-server"})
    lib = compile_c(NEEDS_236_LIB, tmp_path / "src" / "libvendor.so", "-shared")
    zlib = next(p for p in (rt / "lib").iterdir() if p.name.startswith("libz.so.1.") and not p.is_symlink())
    plant(rt, f"lib/{zlib.name}", lib)       # a vendor file in lib/, manifest updated to match
    c = _checks(assemble("verify", str(rt), "--static", "--json"))["glibc promise"]
    assert c["status"] == FAIL and f"lib/{zlib.name} needs GLIBC_2.36" in c["reason"]


def test_a_repaired_runtime_promises_nothing_and_is_told_as_it_is(tmp_path):
    """Debian sid's prebuilt files need GLIBC_2.43: no promise to break, the need and the host said."""
    rt = glibc_runtime(tmp_path, server=NEEDS_236, floor={"promised": None, "needed_by": "bin/llama-server"})
    retag(rt / "bin" / "llama-server", b"GLIBC_2.36", b"GLIBC_2.43")
    plant(rt, "bin/llama-server", rt / "bin" / "llama-server")
    proc = assemble("verify", str(rt), "--static", "--json")
    c = _checks(proc)
    assert c["glibc promise"]["status"] == SKIP
    reason = c["glibc promise"]["reason"]
    assert "no floor promised (its files were linked elsewhere" in reason
    assert reason.endswith("needs glibc 2.43 (bin/llama-server: GLIBC_2.43)")
    assert c["glibc floor"]["status"] == WARN and "needs glibc 2.43, this host has" in c["glibc floor"]["reason"]
    assert proc.returncode == 0      # --static: for another host
    assert assemble("verify", str(rt), "--json").returncode == 1     # here: it would not start


@pytest.mark.parametrize("value", ['"2.35"', '"2.4"'])
def test_a_recipe_states_its_floor(tmp_path, value):
    r = parse_recipe(tmp_path / "t.toml", f"glibc_floor = {value}\n" + GOOD_RECIPE)
    assert r.glibc_floor == value.strip('"')
    assert parse_recipe(tmp_path / "t.toml", GOOD_RECIPE).glibc_floor is None


@pytest.mark.parametrize("value", ['"2.35\\n"', '"2.35.1"', '"3.1"', '"latest"', '" 2.35"', "2.35", '""'])
def test_a_malformed_floor_is_refused_at_load(tmp_path, value):
    with pytest.raises(AssembleError) as err:
        parse_recipe(tmp_path / "t.toml", f"glibc_floor = {value}\n" + GOOD_RECIPE)
    assert "glibc_floor" in err.value.where and err.value.code == 2


def test_a_malformed_floor_is_one_line_from_the_cli(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text('glibc_floor = "2.35; rm -rf /"\n' + GOOD_RECIPE)
    one_error_line(assemble("show", str(path)), 2, ["glibc_floor"])


def test_the_default_promise_is_the_build_hosts_glibc():
    assert glibc.default_promise("2.35") == ("2.35", glibc.BY_RECIPE)
    have = glibc.host_glibc()
    assert have and glibc.default_promise(None) == (have, glibc.BY_BUILD_HOST)
    assert glibc.default_promise(None, built_here=False) == (None, None)      # a container or adopted unit
    assert glibc.default_promise("2.35", built_here=False) == ("2.35", glibc.BY_RECIPE)


@pytest.mark.parametrize("floor", [{"promised": "2.35\n"}, {"promised": "2.35", "stated_by": "me"},
                                   {"promised": "2.35", "needed_by": "../etc/passwd"}, {"promised": 2.35}])
def test_a_manifest_floor_outside_the_grammar_is_invalid(tmp_path, floor):
    rt = glibc_runtime(tmp_path)
    raw = read_raw(rt)
    raw["glibc_floor"] = floor
    write_raw(rt, {k: v for k, v in raw.items() if k not in ("schema", "created_by")})
    with pytest.raises(ManifestInvalid) as err:
        Manifest.load(rt)
    assert "glibc_floor" in err.value.what
