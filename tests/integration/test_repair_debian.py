"""assemble repair on Debian sid's real llama.cpp packages: libggml0 (ggml 0.27.0, 14 CPU variants
in /usr/lib/x86_64-linux-gnu/ggml/backends0), libggml0-backend-vulkan, libllama0 and llama.cpp-tools
(thin executables over -impl.so libraries) become a relocatable runtime; then
libggml0-backend-hip with Debian's ROCm 6.4 packages, a rocm runtime made of prebuilt parts only.
They need glibc 2.43: `verify --static` runs here (Debian 12), the dynamic checks and a real
completion in the sid chroot. Debian's loader cannot be patched: it searches its compiled-in
folder first and the working directory last, and verify must say so."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.runtime.manifest import Manifest
from tests.support.common import REPO, TEST_CACHE, assemble
from tests.support.debianllama import FACTS, HIP, debian_llama_debs
from tests.support.tiers import downloads
from scripts.support.vendorlibs import ROCM_PACKAGES, SID, fetch_deb

ACCEPT = "a service image with no ggml packages, started in an empty folder"


def debs_with_hip() -> dict[str, Path]:
    return debian_llama_debs(with_hip=True)


# cold: Debian's llama.cpp/ggml .debs with the HIP module (126 MB, under a minute, estimated), prefetched;
# warm 0 s. The tests also need sid_chroot (tests/conftest.py).
@pytest.fixture(scope="module")
@downloads(warm=debs_with_hip)
def debs() -> dict[str, Path]:
    return debs_with_hip()


def _base_debs(debs: dict[str, Path]) -> list[str]:
    return [str(p) for name, p in debs.items() if name != HIP]


def in_sid(chroot: Path, rt: Path, *args: str, wrap: list[str] | None = None, timeout: float = 900):
    """assemble inside the sid chroot, the runtime's parent bound at the same path."""
    argv = [*(wrap or []), str(REPO / "scripts" / "assemble-in-chroot.sh"), "--chroot", str(chroot), "--bind",
            str(rt.parent), "--", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def _checks(proc) -> dict:
    return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}


def test_debians_packages_become_a_runtime_that_serves_in_sid(debs, sid_chroot, tmp_path):
    rt = tmp_path / "rt" / "runtime-debian"
    # read from the files: libggml imports std::filesystem::current_path, so --verify-static refuses too
    refused = assemble("repair", *_base_debs(debs), "--name", "debian", "--out", str(rt), "--verify-static")
    assert refused.returncode == 1 and not rt.exists()
    assert "working-directory modules  FAIL  libggml.so.0.27.0 imports std::filesystem::current_path" in refused.stderr
    proc = assemble("repair", *_base_debs(debs), "--name", "debian", "--out", str(rt), "--verify-static",
                    "--accept-loader-risk", ACCEPT)
    assert proc.returncode == 0, proc.stderr
    m = json.loads((rt / "manifest.json").read_text())
    (inp,) = m["inputs"]
    assert inp["kind"] == "debs" and inp["build"] == FACTS.build_tag and inp["version"] == FACTS.ggml_version
    assert m["loader"] == {"backend_dirs": [FACTS.backend_dir], "accepted_risk": ACCEPT}
    m["loader"]["accepted_risk"] = None         # the same files, the risk not accepted: for the run in sid below
    (rt / "manifest.json").write_text(json.dumps(m, indent=2))
    assert m["glibc_min"] == FACTS.glibc_floor and m["recipe"]["backends"] == ["cpu", "vulkan"]
    assert {f"libggml-cpu-{v}.so" for v in FACTS.cpu_variants} <= {p.name for p in (rt / "bin").iterdir()}
    assert (rt / "lib" / "libllama-server-impl.so").is_file()        # the thin executables' real code
    assert "compiled-in module folder" in proc.stderr and FACTS.backend_dir in proc.stderr
    # licences: each package's copyright file from its .deb (read by the .deb's md5sums), and the host's
    # packages' for the vendor libraries carried from here: every file covered, package would take it
    lic = Manifest.load(rt)
    assert lic.unlicensed() == []
    by = {r.component: r for r in lic.licenses}
    assert {"libggml0", "libllama0"} <= set(by)
    assert by["libggml0"].texts == ("licenses/libggml0/copyright",)
    assert (rt / "licenses" / "libggml0" / "copyright").read_text().strip()
    # in sid: Debian's loader runs a module planted in the working directory -> verify FAILS, saying why
    told = in_sid(sid_chroot, rt, "verify", str(rt), "--json")
    checks = _checks(told)
    assert told.returncode == 1 and checks["working-directory modules"]["status"] == "fail", told.stdout[-2000:]
    assert checks["compiled-in module folder"]["status"] == "warn"   # nothing installed there in the chroot
    assert checks["cpu variant"]["status"] == "pass" and checks["CPU levels"]["status"] == "pass"
    # the risk accepted, explicitly: recorded, and the runtime serves a real completion in sid
    accepted = tmp_path / "rt" / "runtime-debian-accepted"
    proc = assemble("repair", *_base_debs(debs), "--name", "debian", "--out", str(accepted), "--verify-static",
                    "--accept-loader-risk", ACCEPT)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((accepted / "manifest.json").read_text())["loader"]["accepted_risk"] == ACCEPT
    smoke = in_sid(sid_chroot, accepted, "verify", str(accepted), "--smoke", "--json")
    checks = _checks(smoke)
    assert smoke.returncode == 0, smoke.stdout[-3000:]
    assert checks["smoke CPU"]["status"] == "pass" and checks["working-directory modules"]["status"] == "warn"


def test_two_repairs_of_debians_packages_give_the_same_manifest_and_archive(debs, tmp_path):
    """Reproducible: each file is named by the .deb that held it and its path inside, never the folder
    it was unpacked into, so the manifest, and the package made of it, are the same bytes."""
    import hashlib
    made = []
    for run in ("one", "two"):
        rt = tmp_path / run / "runtime-debian"
        proc = assemble("repair", *_base_debs(debs), "--name", "debian", "--out", str(rt), "--verify-static",
                        "--accept-loader-risk", "test: a reproducibility check")   # Debian's loader reads the cwd
        assert proc.returncode == 0, proc.stderr
        done = assemble("package", str(rt), "--out-dir", str(tmp_path / run / "dist"),
                        env={"SOURCE_DATE_EPOCH": "1764547200"})
        assert done.returncode == 0, done.stderr
        made.append({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / run / "dist").iterdir()})
    text = (tmp_path / "one/runtime-debian/manifest.json").read_text()
    assert text == (tmp_path / "two/runtime-debian/manifest.json").read_text()
    assert made[0] == made[1] and any(n.endswith(".tar.zst") for n in made[0])
    # nothing of where the repair worked: its scratch folder lives in the cache (wherever that is: the
    # inputs' own paths, as the user named them, may well be under /tmp) or, failing that, the system's
    # temporary folder, named repair-...; nor the runs' own folders
    from builder.paths import SCRATCH
    scratch = str(Path(os.environ.get("ASSEMBLE_CACHE", TEST_CACHE / "cache")) / SCRATCH)
    assert not [m for m in (scratch, str(tmp_path), "input-0", ".unpack-", "repair-") if m in text]
    origins = {f["path"]: f["origin"] for f in json.loads(text)["files"]}
    tools = debs["llama.cpp-tools"].name
    assert origins["bin/llama-server"] == f"{tools}:usr/bin/llama-server"
    assert origins["lib/libllama-server-impl.so"] == f"{tools}:usr/lib/x86_64-linux-gnu/llama/libllama-server-impl.so"
    assert origins["bin/libggml-cpu-x64.so"] == \
        f"{debs['libggml0'].name}:usr/lib/x86_64-linux-gnu/ggml/backends0/libggml-cpu-x64.so"
    assert origins["licenses/libllama0/copyright"] == f"{debs['libllama0'].name}:usr/share/doc/libllama0/copyright"


def test_a_host_with_debians_backend_folder_populated_fails(debs, sid_chroot, tmp_path):
    """The host has libggml0's modules in the compiled-in folder (an overlay over the chroot's /usr in a
    private mount namespace: the cached chroot itself is never changed): the runtime would load them,
    and verify fails even though the risk was accepted when repairing (here it is no longer a risk)."""
    rt = tmp_path / "rt" / "runtime-debian"
    assert assemble("repair", *_base_debs(debs), "--name", "debian", "--out", str(rt), "--verify-static",
                    "--accept-loader-risk", ACCEPT).returncode == 0
    assert shutil.which("unshare"), "unshare (util-linux) is missing"
    upper, work = tmp_path / "upper", tmp_path / "work"
    upper.mkdir()
    work.mkdir()
    usr = sid_chroot / "usr"
    folder = f"{usr}{FACTS.backend_dir.removeprefix('/usr')}"
    script = (f"mount -t overlay overlay -o lowerdir={usr},upperdir={upper},workdir={work} {usr} && "
              f"mkdir -p {folder} && cp {rt}/bin/libggml-cpu-x64.so {folder}/ && exec \"$@\"")
    proc = in_sid(sid_chroot, rt, "verify", str(rt), "--json",
                  wrap=["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"])
    c = _checks(proc)["compiled-in module folder"]
    assert proc.returncode == 1 and c["status"] == "fail", proc.stdout[-2000:]
    assert "libggml-cpu-x64.so" in c["reason"] and FACTS.backend_dir in c["reason"]
    assert not (usr / "lib" / "x86_64-linux-gnu" / "ggml").exists()      # the chroot is as it was


def test_debians_hip_module_with_debians_rocm_is_a_rocm_runtime(debs, sid_chroot, tmp_path):
    rocm = [str(fetch_deb(SID[p])) for p in ROCM_PACKAGES]
    rt = tmp_path / "rt" / "runtime-debian-rocm"
    proc = assemble("repair", *[str(p) for p in debs.values()], *rocm, "--name", "debian-rocm", "--out", str(rt),
                    "--hip-target", "gfx1100", "--verify-static", "--accept-loader-risk", ACCEPT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((rt / "manifest.json").read_text())
    assert m["recipe"]["backends"] == ["cpu", "hip", "vulkan"]
    assert m["gpu_runtimes"]["rocm"]["version"] == "6.4"
    roles = {f["path"]: f["role"] for f in m["files"]}
    assert roles["bin/libggml-hip.so"] == "own" and roles.get("lib/librocblas.so.4.4.1", "vendor") == "vendor"
    data = [p for p, r in roles.items() if r == "data" and "rocblas" in p]
    assert data and all("gfx1100" in p or "gfx" not in Path(p).name for p in data)   # pruned to the card
    smoke = in_sid(sid_chroot, rt, "verify", str(rt), "--smoke", "--hip-target", "gfx1100", "--json")
    checks = _checks(smoke)
    assert smoke.returncode == 0, smoke.stdout[-3000:]
    assert checks["load libggml-hip.so"]["status"] == "skip" and checks["smoke CPU"]["status"] == "pass"
    # no AMD GPU here, so verify skips the HIP load; ld.so still proves the module maps, links and runs
    # its initialisers in sid (it was edited at its end, not rewritten: runtime.elfappend), moved elsewhere
    script = ('mount -t tmpfs none "$1/mnt" && mkdir "$1/mnt/rt" && mount --bind "$2" "$1/mnt/rt" && '
              'mount --bind /proc "$1/proc" && cd / && exec chroot "$1" /usr/bin/env -i LD_DEBUG=files,libs '
              '/mnt/rt/bin/llama-server --list-devices')
    ld = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", str(sid_chroot),
                         str(rt)], capture_output=True, text=True, timeout=300)
    trace = ld.stdout + ld.stderr
    assert ld.returncode == 0, trace[-3000:]
    assert "calling init: /mnt/rt/bin/libggml-hip.so" in trace, trace[-3000:]
    for lib in ("libz3.so.4", "libhipblas.so.2", "libamdhip64.so.6"):          # pinned and direct NEEDED
        tries = re.findall(rf"trying file=(\S+/{re.escape(lib)})$", trace, re.M)
        assert tries == ["/mnt/rt/bin/../lib/" + lib], (lib, tries)     # the first place searched, found
