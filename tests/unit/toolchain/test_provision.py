"""`assemble toolchain cuda`: NVIDIA's redist layout, served from a local HTTP server.

The test builds a redistrib_<version>.json and real .tar.xz archives with NVIDIA's
folder layout (<component>-linux-x86_64-<ver>-archive/{bin,include,lib,...}), whose
nvcc answers like a real 12.8 one, and serves them on 127.0.0.1 with HTTP Range
support. Faults are injected in the server: a truncated response, a corrupted
archive, a wrong sha256 in the manifest, a server that ignores Range, a tar that
escapes its folder.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from builder.toolchain import provision
from tests.support.toolkits import check_cuda_unit
from builder.errors import AssembleError, BuildFailed
from builder.toolchain.detect import cuda_toolkit
from tests.support.common import REPO

PLAT = "linux-x86_64"
VERSION = "12.8.1"
PREFIX = "/compute/cuda/redist"
BIG = 3 * 1024 * 1024  # libcublas: large enough to be cut in the middle

NVCC = r"""#!/bin/sh
top=$(cd "$(dirname "$0")/.." && pwd)
case "$1" in
  --version) printf 'nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release @REL@, V@REL@.93\n' ;;
  --list-gpu-arch) printf 'compute_75\ncompute_80\ncompute_86\ncompute_89\ncompute_90\ncompute_100\ncompute_120\n' ;;
  --dryrun) echo "#\$ TOP=$top" >&2 ;;
  *) exit 1 ;;
esac
"""


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", mode: int = 0o644, link: str | None = None) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 1700000000
    if link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, link
        tar.addfile(info)
    elif name.endswith("/"):
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    else:
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))


def make_archive(component: str, version: str, files: dict) -> bytes:
    """A .tar.xz laid out like NVIDIA's: one <component>-linux-x86_64-<version>-archive/ folder."""
    top = f"{component}-{PLAT}-{version}-archive"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=0) as tar:
        _add(tar, f"{top}/")
        for rel, spec in files.items():
            if isinstance(spec, tuple) and spec[0] == "link":
                _add(tar, f"{top}/{rel}", link=spec[1])
            elif isinstance(spec, tuple):
                _add(tar, f"{top}/{rel}", spec[1], mode=spec[0])
            else:
                _add(tar, f"{top}/{rel}", spec)
    return buf.getvalue()


def release(nvcc_release: str = "12.8", extra: dict | None = None) -> dict[str, tuple[str, bytes]]:
    """component -> (its version, archive bytes)."""
    rnd = hashlib.sha256(b"seed").digest()
    blob = b"".join(hashlib.sha256(rnd + i.to_bytes(4, "little")).digest() for i in range(BIG // 32))
    comps = {
        "cuda_nvcc": ("12.8.93", {"bin/nvcc": (0o755, NVCC.replace("@REL@", nvcc_release).encode()),
                                   "bin/nvcc.profile": b"TOP = $(_HERE_)/..\n",
                                   "nvvm/libdevice/libdevice.10.bc": b"BC",
                                   "include/crt/host_config.h": b"/* crt */\n",
                                   "LICENSE": b"nvcc licence\n"}),
        "cuda_cudart": ("12.8.90", {"include/cuda_runtime.h": b"/* rt */\n",
                                     "lib/libcudart.so.12.8.90": b"\x7fELF cudart",
                                     "lib/libcudart.so.12": ("link", "libcudart.so.12.8.90"),
                                     "lib/libcudart.so": ("link", "libcudart.so.12"),
                                     "lib/libcudart_static.a": b"!<arch>\n",
                                     "LICENSE": b"cudart licence\n"}),
        "cuda_cccl": ("12.8.90", {"include/cub/cub.cuh": b"/* cub */\n", "include/thrust/version.h": b"/* t */\n",
                                   "LICENSE": b"cccl licence\n"}),
        "libcublas": ("12.8.4.1", {"include/cublas_v2.h": b"/* cublas */\n",
                                    "lib/libcublas.so.12.8.4.1": blob,
                                    "lib/libcublas.so.12": ("link", "libcublas.so.12.8.4.1"),
                                    "lib/libcublas.so": ("link", "libcublas.so.12"),
                                    "LICENSE": b"cublas licence\n"}),
        "cuda_nvrtc": ("12.8.93", {"include/nvrtc.h": b"/* nvrtc */\n", "lib/libnvrtc.so.12": b"\x7fELF nvrtc",
                                    "LICENSE": b"nvrtc licence\n"}),
    }
    comps.update(extra or {})
    return {name: (ver, make_archive(name, ver, files)) for name, (ver, files) in comps.items()}


def manifest_for(archives: dict[str, tuple[str, bytes]], version: str = VERSION) -> dict:
    m = {"release_date": "2025-03-05", "release_label": version, "release_product": "cuda"}
    for name, (ver, data) in archives.items():
        m[name] = {"name": name, "license": "CUDA Toolkit", "version": ver,
                   PLAT: {"relative_path": f"{name}/{PLAT}/{name}-{PLAT}-{ver}-archive.tar.xz",
                          "sha256": hashlib.sha256(data).hexdigest(), "md5": hashlib.md5(data, usedforsecurity=False).hexdigest(),
                          "size": str(len(data))}}
    return m


class Redist:
    """What the server serves, what it saw, and the faults it injects."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []   # (path, Range header)
        self.cut: dict[str, list[int]] = {}                # path -> bytes to send on each next response
        self.ignore_range = False

    def publish(self, archives, version: str = VERSION, manifest: dict | None = None):
        manifest = manifest or manifest_for(archives, version)
        self.files[f"{PREFIX}/redistrib_{version}.json"] = json.dumps(manifest).encode()
        for name, (_, data) in archives.items():
            self.files[self.path_of(manifest, name)] = data
        return manifest

    def path_of(self, manifest: dict, comp: str) -> str:
        return f"{PREFIX}/{manifest[comp][PLAT]['relative_path']}"


def _handler(state: Redist):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            rng = self.headers.get("Range")
            state.requests.append((self.path, rng))
            data = state.files.get(self.path)
            if data is None:
                self.send_error(404)
                return
            start = 0
            if rng and not state.ignore_range:
                start = int(rng.split("=", 1)[1].split("-", 1)[0])
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            cuts = state.cut.get(self.path)
            if cuts:  # send part of the body, then drop the connection
                self.wfile.write(body[: cuts.pop(0)])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


@pytest.fixture(scope="module")
def good_release():
    return release()


@pytest.fixture
def redist():
    state = Redist()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    # a folder below the root, and no trailing slash: as a user would paste it
    state.url = f"http://127.0.0.1:{server.server_address[1]}{PREFIX}"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def cache(isolated_cache, monkeypatch):
    monkeypatch.delenv(provision.BASE_URL_ENV, raising=False)
    return isolated_cache


def _url(redist) -> str:
    return redist.url


def _leftovers(cache: Path) -> list[str]:
    tk = cache / "toolkits"
    return sorted(p.name for p in tk.iterdir() if ".tmp-" in p.name or ".old-" in p.name) if tk.is_dir() else []


def test_provision_lays_out_a_usable_cuda_root(redist, good_release, cache):
    manifest = redist.publish(good_release)
    tk = provision.ensure_cuda(VERSION, url=_url(redist))
    root = tk.root
    assert root == cache / "toolkits" / f"cuda-{VERSION}-{PLAT}"
    assert dict(tk.components) == {"cuda_nvcc": "12.8.93", "cuda_cudart": "12.8.90", "cuda_cccl": "12.8.90",
                                   "libcublas": "12.8.4.1"}
    # the runfile installer's layout, which nvcc.profile expects
    assert os.access(root / "bin" / "nvcc", os.X_OK)
    assert (root / "nvvm" / "libdevice" / "libdevice.10.bc").is_file()
    assert os.readlink(root / "include") == "targets/x86_64-linux/include"
    assert os.readlink(root / "lib64") == "targets/x86_64-linux/lib"
    for header in ("cuda_runtime.h", "cub/cub.cuh", "cublas_v2.h", "crt/host_config.h"):
        assert (root / "include" / header).is_file(), header
    lib = root / "lib64"
    assert os.readlink(lib / "libcublas.so") == "libcublas.so.12"  # SONAME chains kept
    assert (lib / "libcublas.so").resolve().stat().st_size == BIG
    assert (root / "licenses" / "libcublas" / "LICENSE").read_bytes() == b"cublas licence\n"
    assert json.loads((root / "version.json").read_text())["cuda"]["version"] == VERSION
    marker = json.loads((root / provision.MARKER).read_text())
    assert marker["components"]["libcublas"]["sha256"] == manifest["libcublas"][PLAT]["sha256"]
    # toolchain detection and the CUDA policy accept it as any installed toolkit
    found = cuda_toolkit(str(root))
    assert found.version == "12.8" and found.has_cublas and "120" in map(str, found.archs)
    assert check_cuda_unit(found, ["89", "120"], accept_regression=False, patched_fattn=False,
                           where="w").blackwell_regression == "not-applicable"
    # nothing half-done left behind; archives are not kept once laid out
    downloads = cache / "downloads" / "cuda-redist" / VERSION
    assert sorted(p.name for p in downloads.iterdir()) == [f"redistrib_{VERSION}.json"]
    assert _leftovers(cache) == []
    assert len(redist.requests) == 5 and all(r is None for _, r in redist.requests)


def test_second_call_is_a_no_op_without_network(redist, good_release):
    redist.publish(good_release)
    first = provision.ensure_cuda(VERSION, url=_url(redist))
    stamp = (first.root / provision.MARKER).stat().st_mtime_ns
    seen = len(redist.requests)
    again = provision.ensure_cuda(VERSION, url="http://127.0.0.1:9/unreachable/")
    assert again == first and len(redist.requests) == seen
    assert (first.root / provision.MARKER).stat().st_mtime_ns == stamp
    explicit = provision.ensure_cuda(VERSION, ("libcublas", "cuda_nvcc"), url="http://127.0.0.1:9/")
    assert explicit.root == first.root


def test_truncated_download_resumes_with_range(redist, good_release, cache):
    manifest = redist.publish(good_release)
    path = redist.path_of(manifest, "libcublas")
    size = len(good_release["libcublas"][1])
    redist.cut[path] = [size // 3]  # the first response stops a third of the way
    tk = provision.ensure_cuda(VERSION, url=_url(redist))
    hits = [r for p, r in redist.requests if p == path]
    assert len(hits) == 2 and hits[0] is None
    # it resumes from what reached the disk (whole reads only), never past the cut
    assert 0 < int(hits[1].removeprefix("bytes=").rstrip("-")) <= size // 3
    assert cuda_toolkit(str(tk.root)).has_cublas


def test_interrupted_download_is_refused_then_resumed_next_run(redist, good_release, cache):
    manifest = redist.publish(good_release)
    path = redist.path_of(manifest, "libcublas")
    size = len(good_release["libcublas"][1])
    step = size // 10
    redist.cut[path] = [step] * provision.ATTEMPTS  # every attempt of this run is cut short
    with pytest.raises(BuildFailed) as err:
        provision.ensure_cuda(VERSION, url=_url(redist))
    part = cache / "downloads" / "cuda-redist" / VERSION / (Path(path).name + ".part")
    have = part.stat().st_size
    assert 0 < have <= provision.ATTEMPTS * step
    assert [r is None for p, r in redist.requests if p == path] == [True] + [False] * (provision.ATTEMPTS - 1)
    assert err.value.code == 1
    assert f"{have} of {size} bytes" in err.value.what and f"resumes from byte {have}" in err.value.fix
    assert not (cache / "toolkits" / f"cuda-{VERSION}-{PLAT}").exists()  # never used
    assert _leftovers(cache) == []
    redist.requests.clear()
    tk = provision.ensure_cuda(VERSION, url=_url(redist))
    # the finished archives were kept from the failed run; only the rest of libcublas moves
    assert [(p, r) for p, r in redist.requests if p.endswith(".tar.xz")] == [(path, f"bytes={have}-")]
    assert (tk.root / "lib64" / "libcublas.so").resolve().stat().st_size == BIG


def test_wrong_sha256_in_manifest_is_refused_and_nothing_unpacked(redist, good_release, cache):
    manifest = manifest_for(good_release)
    manifest["cuda_cccl"][PLAT]["sha256"] = "0" * 64
    redist.publish(good_release, manifest=manifest)
    with pytest.raises(BuildFailed) as err:
        provision.ensure_cuda(VERSION, url=_url(redist))
    assert "sha256 mismatch" in err.value.what and "nothing was unpacked" in err.value.what
    assert err.value.code == 1
    downloads = cache / "downloads" / "cuda-redist" / VERSION
    assert not any(p.name.startswith("cuda_cccl") for p in downloads.iterdir())  # deleted, .part too
    assert not (cache / "toolkits" / f"cuda-{VERSION}-{PLAT}").exists()
    assert _leftovers(cache) == []


def test_corrupted_archive_is_refused_then_a_good_copy_is_used(redist, good_release, cache):
    manifest = redist.publish(good_release)
    path = redist.path_of(manifest, "cuda_cudart")
    good = redist.files[path]
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    redist.files[path] = bytes(bad)
    with pytest.raises(BuildFailed, match="sha256 mismatch"):
        provision.ensure_cuda(VERSION, url=_url(redist))
    assert not (cache / "toolkits" / f"cuda-{VERSION}-{PLAT}").exists()
    redist.files[path] = good
    tk = provision.ensure_cuda(VERSION, url=_url(redist))
    assert (tk.root / "include" / "cuda_runtime.h").is_file()


def test_bad_bytes_in_a_leftover_part_trigger_one_clean_download(redist, good_release, cache):
    manifest = redist.publish(good_release)
    path = redist.path_of(manifest, "libcublas")
    downloads = cache / "downloads" / "cuda-redist" / VERSION
    downloads.mkdir(parents=True)
    (downloads / (Path(path).name + ".part")).write_bytes(b"\0" * 4096)  # not the archive's first bytes
    tk = provision.ensure_cuda(VERSION, url=_url(redist))
    assert [r for p, r in redist.requests if p == path] == ["bytes=4096-", None]
    assert cuda_toolkit(str(tk.root)).has_cublas


def test_server_ignoring_range_restarts_the_file(redist, good_release, cache):
    manifest = redist.publish(good_release)
    path = redist.path_of(manifest, "libcublas")
    data = redist.files[path]
    downloads = cache / "downloads" / "cuda-redist" / VERSION
    downloads.mkdir(parents=True)
    (downloads / (Path(path).name + ".part")).write_bytes(data[:1000])
    redist.ignore_range = True  # answers 200 with the whole file
    tk = provision.ensure_cuda(VERSION, url=_url(redist))
    assert (tk.root / "lib64" / "libcublas.so").resolve().stat().st_size == BIG


def test_a_cached_archive_that_rotted_is_fetched_again(redist, good_release, cache):
    manifest = redist.publish(good_release)
    path = redist.path_of(manifest, "cuda_cccl")
    downloads = cache / "downloads" / "cuda-redist" / VERSION
    downloads.mkdir(parents=True)
    (downloads / Path(path).name).write_bytes(b"rotten")
    provision.ensure_cuda(VERSION, url=_url(redist))
    assert [r for p, r in redist.requests if p == path] == [None]


def test_adding_a_component_keeps_the_rest(redist, good_release, cache):
    manifest = redist.publish(good_release)
    first = provision.ensure_cuda(VERSION, url=_url(redist))
    inode = (first.root / "bin" / "nvcc").stat().st_ino
    redist.requests.clear()
    more = provision.ensure_cuda(VERSION, ("cuda_nvrtc",), url=_url(redist))
    assert [p for p, _ in redist.requests if p.endswith(".tar.xz")] == [redist.path_of(manifest, "cuda_nvrtc")]
    assert set(dict(more.components)) == {"cuda_nvcc", "cuda_cudart", "cuda_cccl", "libcublas", "cuda_nvrtc"}
    assert (more.root / "include" / "nvrtc.h").is_file() and (more.root / "include" / "cublas_v2.h").is_file()
    assert (more.root / "bin" / "nvcc").stat().st_ino == inode  # hard-linked, not copied again
    assert _leftovers(cache) == []


def test_cuda13_style_release_takes_crt_and_nvvm(redist, cache):
    extra = {"cuda_crt": ("13.0.88", {"include/crt/math_functions.h": b"/* m */\n", "LICENSE": b"crt\n"}),
             "cuda_nvvm": ("13.0.88", {"nvvm/bin/cicc": (0o755, b"#!/bin/sh\n"), "LICENSE": b"nvvm\n"})}
    archives = release(nvcc_release="13.0", extra=extra)
    redist.publish(archives, version="13.0.2")
    tk = provision.ensure_cuda("13.0.2", url=_url(redist))
    assert {"cuda_crt", "cuda_nvvm"} <= set(dict(tk.components)) and "cuda_nvrtc" not in dict(tk.components)
    assert (tk.root / "include" / "crt" / "math_functions.h").is_file()
    assert (tk.root / "include" / "crt" / "host_config.h").is_file()  # merged from two archives
    assert os.access(tk.root / "nvvm" / "bin" / "cicc", os.X_OK)


def test_nvcc_of_another_release_is_refused(redist, cache):
    redist.publish(release(nvcc_release="12.6"))
    with pytest.raises(BuildFailed, match=r"reports CUDA 12\.6, not 12\.8\.1"):
        provision.ensure_cuda(VERSION, url=_url(redist))
    assert not (cache / "toolkits" / f"cuda-{VERSION}-{PLAT}").exists()
    assert _leftovers(cache) == []


def test_archive_escaping_its_folder_is_refused(redist, good_release, cache):
    evil = io.BytesIO()
    top = f"cuda_cccl-{PLAT}-12.8.90-archive"
    with tarfile.open(fileobj=evil, mode="w:xz", preset=0) as tar:
        _add(tar, f"{top}/")
        _add(tar, f"{top}/include/cub/cub.cuh", b"x")
        _add(tar, f"{top}/include/evil", link="/etc/passwd")
    archives = dict(good_release)
    archives["cuda_cccl"] = ("12.8.90", evil.getvalue())
    redist.publish(archives)
    with pytest.raises(BuildFailed, match="cannot unpack"):
        provision.ensure_cuda(VERSION, url=_url(redist))
    assert not (cache / "toolkits" / f"cuda-{VERSION}-{PLAT}").exists()
    assert _leftovers(cache) == []


def test_a_root_without_marker_is_not_trusted(redist, good_release, cache):
    redist.publish(good_release)
    half = cache / "toolkits" / f"cuda-{VERSION}-{PLAT}"
    (half / "bin").mkdir(parents=True)
    (half / "bin" / "junk").write_text("from a crash")
    assert provision.installed(VERSION) is None
    tk = provision.ensure_cuda(VERSION, url=_url(redist))
    assert not (tk.root / "bin" / "junk").exists() and (tk.root / provision.MARKER).is_file()


def test_bad_inputs_are_exit_2(redist, good_release):
    redist.publish(good_release)
    with pytest.raises(AssembleError) as err:
        provision.ensure_cuda("12.8", url=_url(redist))
    assert err.value.code == 2 and "12.8.1" in err.value.fix
    with pytest.raises(AssembleError) as err:
        provision.ensure_cuda("12.9.9", url=_url(redist))
    assert err.value.code == 2 and "no CUDA release 12.9.9" in err.value.what
    with pytest.raises(AssembleError) as err:
        provision.ensure_cuda(VERSION, ("cuda_nvcc", "libcudnn"), url=_url(redist))
    assert err.value.code == 2 and "libcudnn" in err.value.what and "cuda_nvrtc" in err.value.fix


def test_unsafe_manifest_paths_are_refused(redist, good_release, cache):
    manifest = manifest_for(good_release)
    manifest["cuda_cccl"][PLAT]["relative_path"] = "../../etc/cccl.tar.xz"
    redist.publish(good_release, manifest=manifest)
    with pytest.raises(BuildFailed, match="unusable relative_path"):
        provision.ensure_cuda(VERSION, url=_url(redist))


def test_base_url_comes_from_option_env_or_default(monkeypatch):
    assert provision.base_url() == provision.DEFAULT_BASE_URL
    monkeypatch.setenv(provision.BASE_URL_ENV, "http://mirror.example/cuda")
    assert provision.base_url() == "http://mirror.example/cuda/"
    assert provision.base_url("http://other/x/") == "http://other/x/"


def test_cli_prints_the_root(redist, good_release, cache):
    redist.publish(good_release)
    env = dict(os.environ, ASSEMBLE_CACHE=str(cache), **{provision.BASE_URL_ENV: _url(redist)})
    cmd = [sys.executable, "-m", "builder", "toolchain", "cuda", VERSION, "--components",
           "cuda_nvcc,cuda_cudart", "cuda_cccl", "libcublas", "-q"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    root = Path(proc.stdout.strip())
    assert root == cache / "toolkits" / f"cuda-{VERSION}-{PLAT}" and (root / "bin" / "nvcc").is_file()
    proc = subprocess.run([sys.executable, "-m", "builder", "toolchain", "cuda", VERSION, "--json"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["root"] == str(root)
    proc = subprocess.run([sys.executable, "-m", "builder", "toolchain", "cuda", "12.8"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "12.8.1" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
