"""Options shared by the commands that plan a build (build, show)."""

from __future__ import annotations

import re

from builder.toolchain import container
from builder.build.cmake import Overrides
from builder.errors import AssembleError

EXAMPLES = """examples:
  assemble build --recipe cpu
  assemble build --recipe cuda-vulkan --cuda-arch 90 --out /opt/llm/runtime-cuda-vulkan
  assemble build --recipe rocm --rocm-path /opt/rocm-6.4 --hip-target gfx1100
  assemble build --recipe vulkan --check-env GGML_VK_VISIBLE_DEVICES=0   (CPU Vulkan driver)"""


def add_plan_options(p) -> None:
    p.add_argument("--source", metavar="DIR", help="build this local llama.cpp checkout instead of the pinned mirrors")
    p.add_argument("--mirror", action="append", default=[], metavar="URL|DIR",
                   help="a git mirror tried before the recipe's own (a URL, or a local repository); repeatable")
    p.add_argument("--cuda-arch", metavar="LIST", help="CUDA architectures, replacing the recipe's (e.g. 90 or 90,120)")
    p.add_argument("--cuda-root", metavar="DIR", help="CUDA toolkit to use (else CUDAToolkit_ROOT, nvcc on PATH)")
    p.add_argument("--hip-target", metavar="GFX", help="the one gfx arch to build HIP for, replacing the recipe's")
    p.add_argument("--rocm-path", metavar="DIR", help="ROCm tree to use (else ROCM_PATH, HIP_PATH, /opt/rocm)")
    p.add_argument("-D", "--define", action="append", default=[], metavar="KEY=VALUE",
                   help="extra CMake definition (wins over the recipe); repeatable")
    p.add_argument("--target", action="append", default=[], metavar="NAME",
                   help="build target instead of the recipe's list; repeatable")
    p.add_argument("-j", "--jobs", type=int, metavar="N", help="parallel compile jobs (default: all cores)")
    p.add_argument("--launcher", choices=("auto", "ccache", "sccache", "none"), default="auto",
                   help="compiler launcher (default auto: ccache or sccache when installed)")
    container.add_build_options(p)
    p.add_argument("--patch", action="append", default=[], metavar="NAME",
                   help="apply this opt-in patch from patches/ (e.g. cuda-fa-blackwell-exempt); repeatable")
    p.add_argument("--accept-blackwell-regression", action="store_true",
                   help="build CUDA >= 13 for sm_120/121 anyway; the 50-80%% long-context slowdown is recorded")


def overrides(args) -> Overrides:
    defines = []
    for item in args.define:
        if "=" not in item or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", item):
            raise AssembleError(f"--define {item!r} is not KEY=VALUE", fix="write e.g. -D GGML_CUDA_NCCL=OFF")
        k, v = item.split("=", 1)
        defines.append((k, v))
    archs = tuple(a.strip() for a in args.cuda_arch.split(",") if a.strip()) if args.cuda_arch else ()
    for a in archs:
        if not re.match(r"^[0-9]{2,3}[af]?(-real|-virtual)?$", a):
            raise AssembleError(f"--cuda-arch {a!r} is not a CUDA architecture", fix="write e.g. --cuda-arch 90,120")
    if args.hip_target and not re.match(r"^gfx[0-9a-f]{3,5}$", args.hip_target):
        raise AssembleError(f"--hip-target {args.hip_target!r} is not a gfx arch", fix="write e.g. --hip-target gfx1100")
    if args.jobs is not None and args.jobs < 1:
        raise AssembleError("--jobs must be at least 1", fix="write e.g. -j 8")
    return Overrides(mirrors=tuple(args.mirror), cuda_archs=archs, hip_target=args.hip_target, rocm_path=args.rocm_path,
                     cuda_root=args.cuda_root, defines=tuple(defines), jobs=args.jobs, launcher=args.launcher,
                     targets=tuple(args.target), container=args.container, engine=args.engine,
                     accept_blackwell_regression=args.accept_blackwell_regression, patches=tuple(args.patch))
