"""Release pipelines and fast rebuilds: reproducible archives with SHA256SUMS, the SBOM, the
CI matrix, and the stamp that lets an unchanged build skip configure and compile.

Most archive tests use a small runtime made here from real files (an ELF executable,
a Debian-packaged library, a file from a Python wheel) so they run in seconds; the
end-to-end ones package the real cpu runtime."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from builder.units.plan import UnitPlan, plan_unit
from builder.units.run import run_unit
from builder.config.options import CliOptions, resolve
from builder.config.targets import GfxTarget
from builder.toolchain import survey
from builder.runtime import manifest
from builder.release import matrix
from builder.release import attested, package, sbom
from builder.check.report import FAIL, PASS
from builder.runtime import licenses
from builder.runtime.manifest import LicenseRecord
from builder.errors import AssembleError
from builder.paths import data_dir
from builder.config.recipe import all_recipes, load_recipe, parse_recipe
from builder.source.archive import extract_members
from tests.support.common import GOOD_RECIPE, SHA, assemble, one_error_line
from builder.runtime.manifest import Manifest
from builder.runtime.owners import Owner, dpkg_owners
from tests.support.manifests import read_raw, write_raw
from tests.support.runtimes import COMMIT_TIME, PATCH, make_runtime


def members(archive: Path) -> list[tarfile.TarInfo]:
    mode = "r:gz" if archive.name.endswith(".gz") else "r|"
    if mode == "r|":
        import zstandard
        with open(archive, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as z, \
                tarfile.open(fileobj=z, mode="r|") as tar:
            return list(tar)
    with tarfile.open(archive, mode) as tar:
        return tar.getmembers()


# --- archives --------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["tar.gz", "tar.zst"])
def test_same_runtime_gives_the_same_bytes(tmp_path, fmt):
    rt = make_runtime(tmp_path / "a")
    first = package.package(rt, tmp_path / "dist1", fmt)
    # A copy elsewhere with other mtimes, other permissions bits for group/other and another umask.
    copy = tmp_path / "b" / rt.name
    shutil.copytree(rt, copy, symlinks=True)
    os.utime(copy / "bin" / "llama-server", (1, 1))
    os.chmod(copy / "bin" / "llama-server", 0o700)
    old = os.umask(0o077)
    try:
        second = package.package(copy, tmp_path / "dist2", fmt)
    finally:
        os.umask(old)
    assert first.archive.name == f"runtime-cpu-{SHA[:12]}-linux-x86_64.{fmt}"
    for a, b in ((first.archive, second.archive), (first.sbom, second.sbom), (first.sums, second.sums)):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert first.sha256 == hashlib.sha256(first.archive.read_bytes()).hexdigest()


def test_archive_entries_are_normalised(tmp_path):
    rt = make_runtime(tmp_path)
    result = package.package(rt, tmp_path / "dist", "tar.gz")
    ms = members(result.archive)
    names = [m.name for m in ms]
    assert names[0] == "runtime-cpu" and "runtime-cpu/manifest.json" in names
    assert names == sorted(names, key=lambda n: n.split("/"))
    for m in ms:
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (COMMIT_TIME, 0, 0, "", "")
        assert not m.pax_headers, m.pax_headers
    by_name = {m.name: m for m in ms}
    assert by_name["runtime-cpu/bin/llama-server"].mode == 0o755
    assert by_name["runtime-cpu/lib/data/zlib.txt"].mode == 0o644
    link = by_name["runtime-cpu/lib/libz.so.1"]
    assert link.issym() and link.linkname.startswith("libz.so.1.")
    # gzip header: no file name, the commit's time
    raw = result.archive.read_bytes()
    assert raw[3] & 0x08 == 0 and int.from_bytes(raw[4:8], "little") == COMMIT_TIME
    # unpacked, the runtime is whole again
    out = tmp_path / "unpacked"
    with tarfile.open(result.archive) as tar:
        extract_members(tar, out)   # tarfile's data filter, or ours before Python 3.11.4
    assert manifest.check_files(out / "runtime-cpu", Manifest.load(out / "runtime-cpu")) == []


def test_checksum_file_verifies_and_catches_a_change(tmp_path):
    rt = make_runtime(tmp_path)
    dist = tmp_path / "dist"
    result = package.package(rt, dist, "tar.gz")
    other = make_runtime(tmp_path / "other", name="vulkan")
    package.package(other, dist, "tar.zst")
    sums = attested.load_sums(dist / package.SUMS)
    stem = f"runtime-vulkan-{SHA[:12]}-linux-x86_64"
    assert set(sums) == {result.archive.name, result.sbom.name, result.provenance.name, f"{stem}.tar.zst",
                         f"{stem}.cdx.json", f"{stem}.intoto.json"}
    ok = subprocess.run(["sha256sum", "-c", package.SUMS], cwd=dist, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    sums_path = dist / package.SUMS
    released = attested.load_provenance(result.provenance)
    assert attested.sums_check(sums_path, attested.load_sums(sums_path), released).status == PASS
    with open(result.archive, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    bad = subprocess.run(["sha256sum", "-c", package.SUMS], cwd=dist, capture_output=True, text=True)
    assert bad.returncode != 0 and f"{result.archive.name}: FAILED" in bad.stdout
    bad = attested.sums_check(sums_path, attested.load_sums(sums_path), released)
    assert bad.status == FAIL and bad.reason == f"{result.archive.name} (beside SHA256SUMS): content differs from its line"


def test_zst_archive_reads_with_the_zstd_tool(tmp_path):
    if not shutil.which("zstd"):
        pytest.skip("no zstd command on this host to cross-check the archive")
    result = package.package(make_runtime(tmp_path), tmp_path / "dist", "tar.zst")
    listing = subprocess.run(["sh", "-c", 'zstd -dc "$1" | tar -tvf -', "sh", str(result.archive)],
                             capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr
    assert "runtime-cpu/bin/llama-server" in listing.stdout


def test_hip_runtime_name_carries_its_gfx_target(tmp_path):
    rt = make_runtime(tmp_path, name="rocm", hip=("gfx1100",))
    assert package.package(rt, tmp_path / "d").archive.name == f"runtime-rocm-gfx1100-{SHA[:12]}-linux-x86_64.tar.zst"


def test_a_gfx_target_with_features_names_the_archive_and_the_matrix_alike(tmp_path):
    """gfx90a:xnack- is a target build accepts: its runtime packages, under the name matrix announced
    (a glob where the runner's ROCm decides the toolkit line)."""
    rt = make_runtime(tmp_path, name="rocm", hip=("gfx90a:xnack-",), rocm="6.4")
    archive = package.package(rt, tmp_path / "d").archive.name
    entry = next(e for e in matrix.entries([load_recipe("rocm")], (GfxTarget.parse("gfx90a:xnack-"),)))
    assert archive == f"runtime-rocm-gfx90a-xnack--rocm6.4-{SHA[:12]}-linux-x86_64.tar.zst"
    assert entry.artifact == f"runtime-rocm-gfx90a-xnack--rocm*-{SHA[:12]}-linux-x86_64"
    assert fnmatch.fnmatchcase(archive, f"{entry.artifact}.tar.zst")


@pytest.mark.parametrize("archs, need", [("80,90", "any"), ("90,120", ">=12.8,<13"), ("120,121", ">=12.9,<13"),
                                         ("120f", ">=12.9,<13"), ("110", ">=13.0")])
def test_matrix_asks_for_the_oldest_cuda_that_targets_every_arch(archs, need, tmp_path):
    r = parse_recipe(tmp_path / "c.toml", GOOD_RECIPE.replace('["90"]', repr(archs.split(",")).replace("'", '"')))
    entry = next(e for e in matrix.entries([r]))
    assert entry.needs.cuda_toolkit == need


def test_no_commit_date_needs_source_date_epoch(tmp_path, monkeypatch):
    rt = make_runtime(tmp_path, commit_time=None)
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    with pytest.raises(AssembleError) as info:
        package.package(rt, tmp_path / "d")
    assert info.value.code == 2 and "SOURCE_DATE_EPOCH" in info.value.line()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "soon")
    with pytest.raises(AssembleError, match="not a whole number"):
        package.package(rt, tmp_path / "d")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    result = package.package(rt, tmp_path / "d")
    assert {m.mtime for m in members(result.archive)} == {1700000000}
    assert not list((tmp_path / "d").glob(".*part*"))


def test_a_killed_runs_temporaries_go_only_as_recorded(tmp_path, isolated_cache):
    rt = make_runtime(tmp_path)
    dist = tmp_path / "dist"
    dist.mkdir()
    killed = package._Temps(dist)
    half, f = killed.new(dist / "runtime-cpu.tar.gz")   # a run killed while writing: its finally never ran
    f.write(b"half an archive")
    f.close()
    lookalike = dist / f".runtime-cpu.tar.gz{package.PART_TAG}{os.getpid()}-00000000"   # the user's, same form
    lookalike.write_text("mine\n")
    result = package.package(rt, dist)
    assert not half.exists() and lookalike.read_text() == "mine\n"
    # no lock file and no other temporary in the folder: only the three outputs and the user's file
    assert sorted(os.listdir(dist)) == sorted([lookalike.name, result.archive.name, result.sbom.name,
                                               result.provenance.name, package.SUMS])
    # the ledger keeps no temporary, only the four outputs (what a later run may replace)
    [ledger] = (isolated_cache / "packages").iterdir()
    assert sorted((e.kind, e.path) for e in package.locks.load(ledger, dist).entries) == sorted(
        (package.WRITTEN, str(p)) for p in (result.archive, result.sbom, result.provenance, result.sums))


def test_package_cli_json(tmp_path):
    rt = make_runtime(tmp_path)
    proc = assemble("package", str(rt), "--out-dir", str(tmp_path / "d"), "--json", "--format", "tar.zst")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert Path(out["archive"]).name.endswith(".tar.zst")
    assert out["sha256"] == hashlib.sha256(Path(out["archive"]).read_bytes()).hexdigest()


# --- SBOM --------------------------------------------------------------------------------

def test_sbom_lists_sources_packages_and_toolchains(tmp_path):
    rt = make_runtime(tmp_path)
    result = package.package(rt, tmp_path / "dist")
    bom = json.loads(result.sbom.read_text())
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.5"
    comps = {c["bom-ref"]: c for c in bom["components"]}
    llama = comps["llama.cpp"]
    assert llama["version"] == SHA and llama["purl"] == f"pkg:github/ggml-org/llama.cpp@{SHA}"
    patch = llama["pedigree"]["patches"][0]
    assert patch["resolves"][0]["name"] == "backend-loader-no-cwd"
    assert patch["diff"]["text"]["content"] == (data_dir("patches") / PATCH).read_text()

    data = read_raw(rt)
    files = {f["path"]: f for f in data["files"]}
    zlib = next(c for p, c in comps.items() if p.startswith("file:lib/libz.so"))
    assert zlib["hashes"] == [{"alg": "SHA-256", "content": files[zlib["bom-ref"][5:]]["sha256"]}]
    version = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "zlib1g"], capture_output=True,
                             text=True).stdout if shutil.which("dpkg-query") else None
    if version:   # a Debian host: the owning package is named, with its version
        assert zlib["purl"].startswith("pkg:deb/") and f"/zlib1g@{version}" in zlib["purl"]
        data_comp = next(c for c in bom["components"] if c["type"] == "data")
        assert data_comp["name"] == "zlib1g data files"
    import zstandard
    wheel = next(c for p, c in comps.items() if "backend_c" in p)
    assert wheel["purl"] == f"pkg:pypi/zstandard@{zstandard.__version__}"
    assert comps["file:bin/llama-server"]["type"] == "file"
    tools = {t["name"]: t for t in bom["metadata"]["tools"]["components"]}
    assert tools["cmake"]["version"] == "3.31.6" and tools["cc"]["version"] == "12.2.0" and "launcher" in tools
    assert bom["metadata"]["timestamp"] == "2025-10-31T08:40:00Z"


def test_sbom_is_valid_cyclonedx(tmp_path):
    validation = pytest.importorskip("cyclonedx.validation.json", reason="pip install "
                                     "'cyclonedx-python-lib[json-validation]' (test extra) to check the schema")
    from cyclonedx.schema import SchemaVersion
    result = package.package(make_runtime(tmp_path), tmp_path / "dist")
    error = validation.JsonStrictValidator(SchemaVersion.V1_5).validate_str(result.sbom.read_text())
    assert error is None, error


def test_package_refuses_a_library_with_no_licence_in_one_line(tmp_path):
    rt = make_runtime(tmp_path)
    data = read_raw(rt)
    data["licenses"] = [r for r in data["licenses"] if r["component"] != "zstandard"]   # its wheel's text, forgotten
    write_raw(rt, data)
    wheel_lib = next(f["path"] for f in data["files"] if "backend_c" in f["path"])
    proc = assemble("package", str(rt), "--out-dir", str(tmp_path / "d"))
    line = one_error_line(proc, 2, [f"no licence known for {wheel_lib}:", "[bundle.licenses]"])
    assert "lib/libz" not in line and not (tmp_path / "d").exists()      # only what lacks one; nothing written


def test_the_sbom_takes_its_licence_ids_from_the_licences_module(tmp_path, monkeypatch):
    """One home: the ids the SBOM writes as CycloneDX ids, and llama.cpp's licence when the manifest
    records none, are builder.runtime.licenses' own."""
    for spdx in licenses.SPDX_IDS:
        rec = LicenseRecord("c", spdx, ("licenses/c/LICENSE",), ())
        assert sbom._licensing(rec)[0] == [{"license": {"id": spdx, "url": "licenses/c/LICENSE"}}]
    rt = make_runtime(tmp_path)
    data = read_raw(rt)
    data["licenses"] = [r for r in data["licenses"] if r["component"] != licenses.LLAMA]
    write_raw(rt, data)
    monkeypatch.setattr(licenses, "KNOWN_SPDX", ((licenses.LLAMA, "Apache-2.0"), *licenses.KNOWN_SPDX))
    assert sbom._llama(Manifest.load(rt))["licenses"] == [{"license": {"id": "Apache-2.0"}}]


def test_sbom_gives_each_component_its_licence_and_text(tmp_path):
    result = package.package(make_runtime(tmp_path), tmp_path / "dist")
    comps = {c["bom-ref"]: c for c in json.loads(result.sbom.read_text())["components"]}
    assert comps["llama.cpp"]["licenses"] == [{"license": {"id": "MIT", "url": "licenses/llama.cpp/LICENSE"}}]
    assert comps["file:bin/llama-server"]["licenses"] == comps["llama.cpp"]["licenses"]
    wheel = next(c for p, c in comps.items() if "backend_c" in p)
    assert wheel["licenses"] == [{"license": {"id": "BSD-3-Clause", "url": "licenses/zstandard/LICENSE"}}]
    assert {"name": "assemble:license.texts", "value": "licenses/zstandard/LICENSE"} in wheel["properties"]
    assert comps["file:licenses/zstandard/LICENSE"]["type"] == "file"     # the text itself ships, hashed
    if shutil.which("dpkg-query"):
        zlib = next(c for p, c in comps.items() if p.startswith("file:lib/libz.so"))
        assert zlib["licenses"] == [{"license": {"id": "Zlib", "url": "licenses/zlib1g/copyright"}}]


def test_purls_are_encoded_as_the_purl_spec_says():
    owner = Owner("deb", "libstdc++6", "14.2.0-4+b1", "amd64")
    assert owner.purl("debian") == "pkg:deb/debian/libstdc%2B%2B6@14.2.0-4%2Bb1?arch=amd64"
    assert Owner("pypi", "Nvidia_Cublas", "13.10.0.20").purl("debian") == "pkg:pypi/nvidia-cublas@13.10.0.20"


def test_dpkg_owner_lookup_follows_merged_usr():
    if not shutil.which("dpkg-query"):
        pytest.skip("not a Debian host: package owners are recorded as unknown")
    real = str(Path("/lib/x86_64-linux-gnu/libz.so.1").resolve())
    owners = dpkg_owners([real, "/nonexistent/libnothing.so"])
    assert owners[real].name == "zlib1g" and owners[real].version
    assert "/nonexistent/libnothing.so" not in owners


# --- the CI matrix -----------------------------------------------------------------------

def test_matrix_covers_every_recipe_and_hip_target():
    entries = matrix.entries()
    recipes = all_recipes()
    for r in recipes:
        mine = [e for e in entries if e.recipe == r.name]
        units = len(r.units) - 1 if resolve(r).split() else 0   # one --only-unit job per unit after the first
        assert len(mine) == (len(r.hip.targets) if "hip" in r.backends else 1) + units, r.name
    by = {e.name: e for e in entries}
    assert by["cpu"].needs.summary == "C/C++ compiler only" and by["cpu"].gpu_arch == "none"
    assert by["cuda-vulkan"].needs.cuda_toolkit == ">=12.8,<13" and by["cuda-vulkan"].needs.vulkan_sdk  # sm_120
    r128 = by["rocm-cuda128-gfx1100"]
    assert r128.needs.rocm == ">=6.1" and r128.needs.cuda_toolkit is None   # CUDA is in the container
    assert r128.needs.container_engine and r128.needs.containers == ("cuda12.8-build",)
    assert r128.args == "--recipe rocm-cuda128 --hip-target gfx1100"


def test_matrix_hip_targets_and_github_format():
    proc = assemble("matrix", "--format", "github", "--hip-targets", "gfx1100,gfx942", "--recipe", "rocm",
                    "--recipe", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 1     # one line for $GITHUB_OUTPUT
    include = json.loads(proc.stdout)["include"]
    assert [e["name"] for e in include] == ["rocm-gfx1100", "rocm-gfx942", "cpu"]
    assert include[1]["artifact"] == f"runtime-rocm-gfx942-rocm*-{load_recipe('rocm').pin.sha[:12]}-linux-x86_64"


def test_matrix_splits_a_recipe_whose_units_need_different_toolkits():
    """rocm-cuda-units: the CUDA unit on a CUDA runner, once; per gfx target a ROCm runner merges it."""
    entries = matrix.entries([load_recipe("rocm-cuda-units")],
                             hip_targets=(GfxTarget.parse("gfx1100"), GfxTarget.parse("gfx942")))
    unit, *merges = entries
    assert unit.unit == "cuda" and unit.args == "--recipe rocm-cuda-units --only-unit cuda"
    assert unit.needs.cuda_toolkit and unit.needs.rocm is None and unit.artifact.startswith("unit-rocm-cuda-units-cuda-")
    assert [m.name for m in merges] == ["rocm-cuda-units-gfx1100", "rocm-cuda-units-gfx942"]
    for m, gfx in zip(merges, ("gfx1100", "gfx942"), strict=True):
        assert m.after == (unit.name,) and m.unit is None and m.gpu_arch == gfx
        assert m.args == f"--recipe rocm-cuda-units --hip-target {gfx} --unit-from cuda={unit.artifact}"
        assert m.needs.rocm == ">=6.1" and m.needs.cuda_toolkit is None and "cuBLAS" in m.needs.summary
    # a container unit keeps the recipe on one runner
    assert not resolve(load_recipe("rocm-cuda128")).split() and not resolve(load_recipe("rocm-cuda")).split()


def test_matrix_args_are_accepted_by_assemble(capsys):
    """Every entry's arguments plan cleanly (show parses exactly what build parses); unit and merge
    jobs' --only-unit / --unit-from are build options, parsed by build's own parser."""
    from builder.cli import main as cli
    for e in matrix.entries():
        args = e.args.split()
        if e.unit or e.after:
            parsed = cli.parser().parse_args(["build", *args])
            assert parsed.only_unit == e.unit and len(parsed.unit_from) == len(e.after), e.name
            args = [a for a in args if not a.startswith("--only-unit") and not a.startswith("--unit-from")
                    and a != e.unit and "=unit-" not in a]
        assert cli.main(["show", args[1], *args[2:], "--json", "--container", "none"]) == 0, e.name
        shown = json.loads(capsys.readouterr().out)
        if e.gpu_arch.startswith("gfx"):
            assert all(u["defines"].get("GPU_TARGETS") == e.gpu_arch for u in shown["units"] if "hip" in u["backends"])


# --- fast rebuilds -----------------------------------------------------------------------

TWO_UNITS = f'''
name = "two"
description = "two units"
backends = ["vulkan", "hip"]
[pin]
sha = "{SHA}"
[[pin.mirrors]]
kind = "git"
url = "https://example.invalid/llama.cpp.git"
[hip]
targets = ["gfx1100"]
[[units]]
name = "vk"
backends = ["vulkan"]
[[units]]
name = "amd"
backends = ["hip"]
'''


def _build_dirs(tmp_path: Path, text: str, *args: str) -> dict[str, str]:
    path = tmp_path / "two.toml"
    path.write_text(text)
    proc = assemble("show", str(path), "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return {u["name"]: u["build_dir"] for u in json.loads(proc.stdout)["units"]}


def test_a_changed_flag_changes_only_its_units_build_dir(tmp_path):
    base = _build_dirs(tmp_path, TWO_UNITS)
    assert base == _build_dirs(tmp_path, TWO_UNITS)     # same inputs, same folders: a rebuild reuses them
    unit_flag = _build_dirs(tmp_path, TWO_UNITS + '[units.defines]\nGGML_HIP_GRAPHS = "ON"\n')
    assert unit_flag["amd"] != base["amd"] and unit_flag["vk"] == base["vk"]
    cli_flag = _build_dirs(tmp_path, TWO_UNITS, "-D", "GGML_SCHED_MAX_COPIES=2")
    assert cli_flag["amd"] != base["amd"] and cli_flag["vk"] != base["vk"]
    launcher = _build_dirs(tmp_path, TWO_UNITS, "--launcher", "none")
    if shutil.which("ccache") or shutil.which("sccache"):
        assert launcher["vk"] != base["vk"]    # a different compiler launcher is a different build


TINY = """cmake_minimum_required(VERSION 3.14)
project(tiny C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(llama-server main.c)
target_compile_definitions(llama-server PRIVATE GREETING=\\"${GREETING}\\")
"""


def _tiny_plan(cache: Path, *defines: tuple[str, str], source: Path | None = None) -> UnitPlan:
    src = source or cache / "sources" / SHA
    src.mkdir(parents=True, exist_ok=True)
    (src / "CMakeLists.txt").write_text(TINY)
    (src / "main.c").write_text('#include <stdio.h>\nint main(void) { puts(GREETING); return 0; }\n')
    recipe = parse_recipe(Path("tiny.toml"), f'name = "tiny"\ndescription = "t"\nbackends = ["cpu"]\n'
                          f'targets = ["llama-server"]\n[pin]\nsha = "{SHA}"\n[[pin.mirrors]]\nkind = "git"\n'
                          f'url = "https://example.invalid/x.git"\n')
    config = resolve(recipe, CliOptions(defines=(("GREETING", "hello"), *defines), launcher="none", jobs=2))
    return plan_unit(config, config.units[0], survey.host(config, config.units), src, SHA)


def _runs(log: Path) -> int:
    return log.read_text().count("\n$ ") if log.exists() else 0


def test_unchanged_unit_skips_configure_and_build(isolated_cache, tmp_path):
    plan = _tiny_plan(isolated_cache)
    log = plan.build_dir / "assemble-build.log"
    run_unit(plan)
    assert _runs(log) == 2         # configure, build
    exe = plan.build_dir / "bin" / "llama-server"
    assert subprocess.run([exe], capture_output=True, text=True).stdout == "hello\n"
    run_unit(_tiny_plan(isolated_cache))
    assert _runs(log) == 2         # nothing ran: the stamp holds
    exe.unlink()                   # the build tree changed under us: the stamp no longer holds
    run_unit(_tiny_plan(isolated_cache))
    assert _runs(log) == 3 and exe.is_file()
    changed = _tiny_plan(isolated_cache, ("GREETING", "changed"))
    assert changed.build_dir != plan.build_dir
    run_unit(changed)
    assert subprocess.run([changed.build_dir / "bin" / "llama-server"], capture_output=True,
                          text=True).stdout == "changed\n"
    assert _runs(log) == 3         # the first folder was not touched


def test_a_source_folder_outside_the_cache_is_always_rebuilt(isolated_cache, tmp_path):
    plan = _tiny_plan(isolated_cache, source=tmp_path / "checkout")
    log = plan.build_dir / "assemble-build.log"
    run_unit(plan)
    run_unit(plan)
    assert _runs(log) == 3         # configure, build, build: ninja decides, the stamp is not trusted


# --- the real runtime --------------------------------------------------------------------


def test_matrix_stages_put_unit_jobs_first():
    units = json.loads(assemble("matrix", "--stage", "units", check=True).stdout)
    rest = json.loads(assemble("matrix", "--stage", "runtimes", check=True).stdout)
    assert units and all(e["unit"] for e in units) and not any(e["unit"] for e in rest)
    assert {n for e in rest for n in e["after"]} <= {e["name"] for e in units}
    assert len(units) + len(rest) == len(json.loads(assemble("matrix", check=True).stdout))


@pytest.mark.parametrize("build, rocm, cuda, middle", [
    ("b7416", None, "12.8", "b7416-cuda12.8"), (None, "6.4", None, "rocm6.4"),
    ("b7416+3", "6.4", "13.0", "b7416+3-rocm6.4-cuda13.0"), (None, None, None, None),
])
def test_names_carry_the_upstream_build_number_and_the_toolkit_line(tmp_path, build, rocm, cuda, middle):
    """What users and tools key on (upstream: llama-b7416-bin-ubuntu-cuda-12.8-x64), from the manifest."""
    rt = make_runtime(tmp_path, name="cuda-vulkan", build=build, rocm=rocm, cuda=cuda)
    result = package.package(rt, tmp_path / "d")
    want = "-".join(p for p in ("runtime-cuda-vulkan", middle, SHA[:12], "linux-x86_64") if p)
    assert result.archive.name == f"{want}.tar.zst" and result.sbom.name == f"{want}.cdx.json"
    assert result.provenance.name == f"{want}.intoto.json"
