#!/usr/bin/env bash
# The recorded ROCm validation (docs/lab/2026-11-29-rocm.md): the `rocm` recipe compiled for gfx1100 with
# Debian sid's ROCm 6.4 in a chroot, bundled, verified; the traps it must catch; and the
# rocm-cuda-units merge of that HIP unit with a CUDA unit built on another machine.
#
#   sudo scripts/rocm-validate.sh STAGE...      (stages run in the order given)
#     chroot    create or update the sid chroot (scripts/rocm-sid-chroot.sh)
#     fetch     assemble fetch rocm, inside the chroot (its download: the host's CA bundle and
#               proxies); then the host reads the same tree from the same cache
#     build     assemble build --recipe rocm --hip-target gfx1100, inside the chroot (timed)
#     verify    verify it inside the chroot (all checks) and here (--static); a flattened
#               copy of its rocBLAS data; --hip-target gfx1201 (code and data it lacks)
#     gfx1201   assemble build --recipe rocm --hip-target gfx1201: refused before CMake
#     merge     assemble build --recipe rocm-cuda-units --unit-from cuda=$CUDA_UNIT, inside
#               the chroot, cuBLAS from $CUDA_LIBS; verify inside and here (--static)
#   CHROOT          default /var/tmp/sid-rocm
#   WORK            runtimes, copies and results (default /var/tmp/rocm-validate)
#   ASSEMBLE_CACHE  the one cache, here and in the chroot (default ${XDG_CACHE_HOME:-$HOME/.cache}/assemble,
#                   the same as a plain `assemble` and scripts/assemble-in-chroot.sh use)
#   PYTHON          the interpreter assemble is installed into, for the steps run here (default
#                   python3; under sudo from a venv: sudo PYTHON="$(command -v python3)" ...);
#                   it runs this checkout (PYTHONPATH), and is checked before any stage runs
#   CUDA_UNIT       a folder made by `assemble build --recipe rocm-cuda-units --only-unit cuda`
#                   (scripts/h200-acceptance.sh setup cudaunit makes one on an NVIDIA host)
#   CUDA_LIBS       a folder with libcudart.so.13, libcublas.so.13, libcublasLt.so.13 (NVIDIA's wheels)
#   JOBS            compile jobs (default: all cores)
# Every result (logs, JSON reports, times) lands in $WORK/results. Exit status: 0 every stage
# passed, 1 a stage failed, 2 a bad invocation (unknown stage, not root, unusable PYTHON).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
stages=(chroot fetch build verify gfx1201 merge)
usage() { sed -n '2,28p' "$0"; }
die() { echo "rocm-validate: $*" >&2; exit 2; }

[ $# -gt 0 ] || { usage >&2; exit 2; }
case "$1" in -h|--help) usage; exit 0 ;; esac
for stage in "$@"; do
  case " ${stages[*]} " in
    *" $stage "*) ;;
    *) die "unknown stage '$stage' -- fix: use one or more of: ${stages[*]} (see --help)" ;;
  esac
done
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, bind mounts) -- fix: run it with sudo"
case " $* " in *" merge "*)   # checked now, not after the hours the stages before it take
  [ -f "${CUDA_UNIT:-}/assemble-unit.json" ] \
    || die "merge needs CUDA_UNIT=<a folder from --only-unit cuda> (no assemble-unit.json at '${CUDA_UNIT:-}')"
  [ -d "${CUDA_LIBS:-}" ] || die "merge needs CUDA_LIBS=<folder with libcudart/libcublas .so.13> (no folder '${CUDA_LIBS:-}')" ;;
esac

CHROOT=${CHROOT:-/var/tmp/sid-rocm}
WORK=${WORK:-/var/tmp/rocm-validate}
RESULTS=$WORK/results
JOBS=${JOBS:-$(nproc)}
PYTHON=${PYTHON:-python3}
export ASSEMBLE_CACHE=${ASSEMBLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/assemble}
RT=$WORK/runtime-rocm
MERGED=$WORK/runtime-rocm-cuda-units

# The host side runs this checkout with the interpreter assemble was installed into: checked
# now, in one line, rather than an ImportError in the middle of a stage.
command -v "$PYTHON" >/dev/null || die "no interpreter '$PYTHON' -- fix: PYTHON=/path/to/the/python/assemble/is/installed/into"
floor=$(grep -oP '^requires-python\s*=\s*">=\s*\K[0-9.]+' "$repo/pyproject.toml")   # the one home of the floor
"$PYTHON" -c "import sys; sys.exit(sys.version_info < tuple(map(int, '$floor'.split('.'))))" 2>/dev/null \
  || die "$PYTHON is older than Python $floor -- fix: PYTHON=/path/to/the/python/assemble/is/installed/into"
problem=$(cd "$repo" && PYTHONPATH="$repo" "$PYTHON" - "$repo" <<'PY'
import re, sys, tomllib
from importlib import metadata
from pathlib import Path
repo = Path(sys.argv[1]).resolve()
import builder
where = Path(builder.__file__).resolve().parent
if where != repo / "builder":
    sys.exit(print(f"imports builder from {where}, not this checkout's {repo / 'builder'} (an install of "
                   f"another checkout) -- fix: PYTHON=<an interpreter without it>, or pip install -e {repo} into it"))
def nums(v):
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])
bad = []
for req in tomllib.loads((repo / "pyproject.toml").read_text())["project"]["dependencies"]:
    name, floor = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:>=\s*([0-9.]+))?", req).groups()
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        bad.append(f"{name} (missing)")
        continue
    if floor and nums(have) < nums(floor):
        bad.append(f"{name} {have} (needs >= {floor})")
if bad:
    print(f"lacks {', '.join(bad)}, which assemble needs -- fix: PYTHON=<the interpreter assemble is "
          f"installed into>, or: {sys.executable} -m pip install -e {repo}")
PY
) || problem=${problem:-"cannot import this checkout's builder -- fix: PYTHON=<the interpreter assemble is installed into>"}
[ -z "$problem" ] || die "$PYTHON $problem"
mkdir -p "$RESULTS" "$ASSEMBLE_CACHE"

inside() { "$repo/scripts/assemble-in-chroot.sh" --chroot "$CHROOT" --bind "$WORK" "$@"; }
here() { PYTHONPATH="$repo" "$PYTHON" -m builder "$@"; }
log() { echo "== $*" | tee -a "$RESULTS/validate.log"; }
expect_fail() {  # expect_fail NAME CMD...: the command must exit non-zero; its exit status and output are kept
  local name=$1 rc=0; shift
  "$@" > "$RESULTS/$name.out" 2> "$RESULTS/$name.err" || rc=$?
  if [ "$rc" -eq 0 ]; then log "UNEXPECTED: $name passed"; return 1; fi
  log "$name failed as it must (exit $rc): $(grep -m1 -E 'FAIL|error:' "$RESULTS/$name.err" || true)"
}

stage_chroot() {
  log "sid chroot at $CHROOT"
  local t0=$SECONDS
  "$repo/scripts/rocm-sid-chroot.sh" "$CHROOT" 2>&1 | tail -3 | tee -a "$RESULTS/validate.log"
  echo "chroot_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
}

stage_fetch() {
  log "fetch the rocm recipe's llama.cpp tree into $ASSEMBLE_CACHE, in the chroot"
  local t0=$SECONDS inner outer
  inner=$(inside -- fetch rocm 2> >(tee "$RESULTS/fetch-rocm.err" >&2))
  echo "fetch_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
  outer=$(here fetch rocm -q)
  [ "$inner" = "$outer" ] || { log "UNEXPECTED: the chroot fetched $inner, the host reads $outer"; return 1; }
  log "tree $inner (the same for the host and the chroot), $(du -sh "$inner" | cut -f1)"
}

stage_build() {
  log "build rocm for gfx1100 in the chroot, $JOBS jobs"
  local t0=$SECONDS
  inside -- build --recipe rocm --rocm-path /usr --hip-target gfx1100 --launcher ccache -j "$JOBS" \
    --out "$RT" 2>&1 | tee "$RESULTS/build-rocm.log"
  echo "rocm_build_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
  du -sh "$RT" "$RT/lib" "$RT/bin" | tee -a "$RESULTS/times.txt"
}

stage_verify() {
  [ -f "$RT/manifest.json" ] || { log "no runtime at $RT -- fix: run the build stage first"; return 1; }
  log "verify in the chroot (sid: the runtime's own glibc), every check"
  inside -- verify "$RT" --json > "$RESULTS/verify-rocm-chroot.json" || true
  inside -- verify "$RT" 2>&1 | tee "$RESULTS/verify-rocm-chroot.txt"
  log "verify here, files only"
  here verify "$RT" --static 2>&1 | tee "$RESULTS/verify-rocm-host-static.txt"
  log "a copy whose rocBLAS data was flattened by cp -r into a missing folder"
  local flat=$WORK/flattened
  rm -rf "$flat"; mkdir -p "$flat"
  (cd "$RT" && tar --exclude=./lib/rocblas -cf - .) | tar -C "$flat" -xf -
  cp -r "$(find "$RT/lib/rocblas" -name library -type d | head -1)" "$flat/lib/rocblas"
  expect_fail verify-flattened here verify "$flat" --static
  cat "$RESULTS/verify-flattened.err"
  log "the same runtime checked for a gfx1201 card"
  expect_fail verify-gfx1201 here verify "$RT" --static --hip-target gfx1201
  cat "$RESULTS/verify-gfx1201.err"
}

stage_gfx1201() {
  log "a gfx1201 build with sid's ROCm: refused before CMake"
  expect_fail build-gfx1201 inside -- build --recipe rocm --rocm-path /usr --hip-target gfx1201 \
    --out "$WORK/runtime-rocm-gfx1201"
  cat "$RESULTS/build-gfx1201.err"
  [ ! -e "$WORK/runtime-rocm-gfx1201" ] || { log "UNEXPECTED: an output folder was written"; return 1; }
}

stage_merge() {   # CUDA_UNIT and CUDA_LIBS: checked before any stage ran
  log "merge: HIP unit built here in the chroot + CUDA unit from $CUDA_UNIT"
  local t0=$SECONDS
  inside --bind "$CUDA_UNIT" --bind "$CUDA_LIBS" -- build --recipe rocm-cuda-units --rocm-path /usr \
    --hip-target gfx1100 --launcher ccache -j "$JOBS" --unit-from "cuda=$CUDA_UNIT" --lib-path "$CUDA_LIBS" \
    --out "$MERGED" 2>&1 | tee "$RESULTS/build-merged.log"
  echo "merged_build_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
  inside --bind "$CUDA_UNIT" -- verify "$MERGED" 2>&1 | tee "$RESULTS/verify-merged-chroot.txt"
  here verify "$MERGED" --static 2>&1 | tee "$RESULTS/verify-merged-host-static.txt"
  du -sh "$MERGED" "$MERGED/lib" | tee -a "$RESULTS/times.txt"
}

log "rocm-validate $* ($(date -u +%FT%TZ)): cache $ASSEMBLE_CACHE, chroot $CHROOT, host python $("$PYTHON" -c 'import sys; print(sys.executable)')"
# Each stage runs with `set -e` in force (a `stage || ...` would switch it off inside the stage, and
# only its last command would count): the first failing command ends the run, and this says which stage.
current=""
trap 'rc=$?; if [ "$rc" -ne 0 ] && [ -n "$current" ]; then log "stage $current failed (exit $rc)"; exit 1; fi' EXIT
for stage in "$@"; do current=$stage; "stage_$stage"; done
current=""
