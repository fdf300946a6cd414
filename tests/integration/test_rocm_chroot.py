"""The rocm recipe against a real ROCm: Debian sid's 6.4, in a chroot (this host's Debian 12
ships only ROCm 5.2 packages, and sid's compiler does not run on its glibc).

The CI-sized part of the ROCm validation: the chroot is made by scripts/rocm-sid-chroot.sh
(about 4 min and 6 GB the first time), then scripts/rocm-configure-check.sh runs the
project's own policy and plan in it, configures the HIP unit from a clean CMake cache and
compiles one HIP translation unit. The whole compile, bundle and verify is a recorded run
(scripts/rocm-validate.sh, docs/lab/2026-11-29-rocm.md): about an hour on two cores.

The documented path (docs/guide/rocm.md) is also walked from an EMPTY cache, as a new user would:
`assemble fetch rocm` inside the chroot through scripts/assemble-in-chroot.sh (a real TLS
download, with the host's CA bundle and proxies), `assemble show` reading that cache, and
scripts/rocm-validate.sh using the same cache and the host's interpreter. The `assemble fetch`
command itself, and the validation script's refusals, are checked here too (no chroot).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


from tests.support.common import REPO, SHA, TEST_CACHE, assemble

CHROOT = TEST_CACHE / "sid-rocm"
SCRIPTS = REPO / "scripts"
CA_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO")
PROXY_VARS = ("http_proxy", "https_proxy", "no_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
              "ALL_PROXY")


def in_chroot(chroot: Path, cache: Path, *args: str, env: dict | None = None, timeout: float = 900):
    """`scripts/assemble-in-chroot.sh --chroot CHROOT -- ARGS` with ASSEMBLE_CACHE=cache, as docs/guide/rocm.md says."""
    full_env = dict(os.environ, ASSEMBLE_CACHE=str(cache))
    full_env.update(env or {})
    return subprocess.run([str(SCRIPTS / "assemble-in-chroot.sh"), "--chroot", str(chroot), "--", *args],
                          env=full_env, capture_output=True, text=True, timeout=timeout)


def mounts_under(chroot: Path) -> list[str]:
    prefix = str(chroot.resolve()) + "/"
    return [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
            if line.split()[1].startswith(prefix)]


def test_configure_and_one_hip_object_for_gfx1100_with_sids_rocm(sid_chroot, tmp_path):
    report_file = tmp_path / "report.json"
    env = dict(os.environ, ASSEMBLE_CACHE=str(TEST_CACHE / "cache"), ROCM_CHECK_TARGETS="gfx1100 gfx1201",
               ROCM_CHECK_CONFIGURE="gfx1100")
    proc = subprocess.run([str(SCRIPTS / "rocm-configure-check.sh"), str(sid_chroot), "--json",
                           str(report_file)], env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(report_file.read_text())
    install = report["rocm_install"]
    assert install and tuple(int(x) for x in install["version"].split(".")[:2]) >= (6, 1), install

    unit = report["units"]["gfx1100"]
    policy = unit["policy"]
    assert policy["targets"] == ["gfx1100"] and "gfx1100" in policy["rocblas_archs"]
    command = unit["configure_command"]
    for piece in ("-DGGML_HIP=ON", "-DGPU_TARGETS=gfx1100", "-DAMDGPU_TARGETS=gfx1100", "-DGGML_HIP_RCCL=OFF",
                  f"-DCMAKE_HIP_COMPILER={policy['hip_compiler']}", "-DGGML_BACKEND_DL=ON"):
        assert piece in command, piece
    for flag in policy["hip_flags"]:
        assert flag in command
    configured = unit["configure"]
    assert configured["returncode"] == 0, configured
    assert "Clang" in (configured["found"]["hip_compiler_id"] or "")
    assert configured["found"]["GGML_HIP_RCCL"] == "OFF"
    assert configured["found"]["hip_version"].startswith(install["version"].split(".")[0])
    assert configured["objects"]["hip"] > 100            # ggml-cuda's sources compiled as HIP
    obj = unit["object"]
    assert obj["returncode"] == 0, obj
    assert obj["offload_archs"] == ["gfx1100"] and not obj["compressed"]   # exactly the one target

    # gfx1201 (RX 9070): refused before CMake unless this sid's rocBLAS has grown kernels for it
    other = report["units"]["gfx1201"]
    if "refused" in other:
        assert "has no kernels for gfx1201" in other["refused"] and "--rocm-path" in other["refused"]
        assert "configure" not in other
    else:
        assert "gfx1201" in other["policy"]["rocblas_archs"]


def test_documented_path_from_an_empty_cache(sid_chroot, tmp_path):
    """docs/guide/rocm.md as a new user walks it: nothing cached, the source downloaded inside the chroot
    (GitHub, else the ~70 MB PyPI sdist: a real TLS download with the host's trust and proxies),
    then a plan that reads that cache, then the validation script on the same cache. No compile."""
    cache = tmp_path / "cache"
    cache.mkdir()
    proc = in_chroot(sid_chroot, cache, "fetch", "rocm", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    fetched = json.loads(proc.stdout)
    tree = cache.resolve() / "sources" / SHA
    assert fetched["sha"] == SHA and fetched["path"] == str(tree) and fetched["cached"] is False, fetched
    provenance = fetched["provenance"]
    assert provenance["kind"] in ("git", "sdist") and provenance["verified_by"].startswith("git:"), provenance
    assert (tree / "CMakeLists.txt").is_file() and (tree / "ggml" / "src" / "ggml-cuda").is_dir()
    assert json.loads((tree.parent / f"{SHA}.json").read_text()) == provenance
    if provenance["kind"] == "sdist":   # GitHub unreachable: the download was PyPI's archive, kept in the cache
        assert (cache / "downloads" / f"{provenance['package']}-{provenance['version']}.tar.gz").is_file()
    assert mounts_under(sid_chroot) == [], "assemble-in-chroot.sh left mounts behind"

    proc = in_chroot(sid_chroot, cache, "show", "rocm", "--hip-target", "gfx1100", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    unit = json.loads(proc.stdout)["units"][0]
    assert unit["build_dir"].startswith(str(cache.resolve() / "trees" / SHA)), unit["build_dir"]  # read the cache
    assert "-DGPU_TARGETS=gfx1100" in unit["configure"] and "-DGGML_HIP=ON" in unit["configure"]

    # the validation script: the same cache (nothing fetched again), the host's interpreter for the
    # steps run here, and an expected refusal logged with its real exit status
    work = tmp_path / "work"
    rocblas = list(sid_chroot.glob("usr/lib/*/rocblas/*/library/TensileLibrary_lazy_gfx1201.dat"))
    stages = ["fetch"] + ([] if rocblas else ["gfx1201"])   # refused only while sid's rocBLAS lacks gfx1201
    env = dict(os.environ, ASSEMBLE_CACHE=str(cache), CHROOT=str(sid_chroot), WORK=str(work), PYTHON=sys.executable)
    proc = subprocess.run([str(SCRIPTS / "rocm-validate.sh"), *stages], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    log = (work / "results" / "validate.log").read_text()
    assert f"tree {tree} (the same for the host and the chroot)" in log, log
    if "gfx1201" in stages:
        assert "build-gfx1201 failed as it must (exit 2): error:" in log and "no kernels for gfx1201" in log, log
        assert not (work / "runtime-rocm-gfx1201").exists()
    assert sorted(p.name for p in (cache / "sources").iterdir() if not p.name.startswith(".")) == [SHA, f"{SHA}.json"]
    assert mounts_under(sid_chroot) == []
    shutil.rmtree(cache)   # about 300 MB; kept only when the test fails


def test_the_chroot_trusts_the_hosts_ca_bundle_and_proxies(sid_chroot, tmp_path):
    """With the host's trust replaced by one unrelated CA, the chroot's download must fail on the
    certificate (so the chroot uses the host's bundle, not one of its own); with a dead proxy set on
    the host, it must fail on the proxy. Seconds each: nothing is downloaded."""
    assert shutil.which("openssl"), "openssl missing"
    ca = tmp_path / "unrelated-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=assemble test CA trusted by nothing", "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(ca)], check=True, capture_output=True)
    no_proxies = dict.fromkeys(PROXY_VARS, "")
    cache = tmp_path / "cache"

    proc = in_chroot(sid_chroot, cache, "fetch", "rocm", env={**no_proxies, **{v: str(ca) for v in CA_VARS}},
                     timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "certificate verify failed" in proc.stderr and "no mirror could provide" in proc.stderr, proc.stderr
    assert not (cache / "sources" / SHA).exists()

    dead = "http://127.0.0.1:9"
    proc = in_chroot(sid_chroot, cache, "fetch", "rocm", env={**no_proxies, "https_proxy": dead, "HTTPS_PROXY": dead},
                     timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "ProxyError" in proc.stderr, proc.stderr
    assert not (cache / "sources" / SHA).exists()
    assert mounts_under(sid_chroot) == []


def test_fetch_puts_the_pinned_tree_into_an_empty_cache_from_a_local_mirror(llama_tree, isolated_cache):
    """`assemble fetch` (the documented path's first step) without a network: a tree carried from
    another cache serves as --mirror; the result is verified by git and reused afterwards."""
    proc = assemble("fetch", "cpu", "--mirror", str(llama_tree), "--json")
    assert proc.returncode == 0, proc.stderr
    fetched = json.loads(proc.stdout)
    tree = isolated_cache.resolve() / "sources" / SHA
    assert fetched["path"] == str(tree) and fetched["cached"] is False and fetched["cache"] == str(isolated_cache.resolve())
    assert fetched["provenance"]["kind"] == "git" and fetched["provenance"]["url"] == str(llama_tree.resolve())
    assert fetched["provenance"]["verified_by"].startswith("git:")
    again = assemble("fetch", "rocm")   # another recipe at the same sha: the cached tree, its path alone on stdout
    assert again.returncode == 0 and again.stdout == f"{tree}\n", again.stderr
    assert "already in the cache" in again.stderr


