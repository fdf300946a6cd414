#!/usr/bin/env bash
# The recorded ROCm validation (docs/rocm.md): the `rocm` recipe compiled for gfx1100 with
# Debian sid's ROCm 6.4 in a chroot, bundled, verified; the traps it must catch; and the
# rocm-cuda-units merge of that HIP unit with a CUDA unit built on another machine.
#
#   sudo scripts/rocm-validate.sh STAGE...      (stages run in the order given)
#     chroot    create or update the sid chroot (scripts/rocm-sid-chroot.sh)
#     build     assemble build --recipe rocm --hip-target gfx1100, inside the chroot (timed)
#     verify    verify it inside the chroot (all checks) and here (--static); a flattened
#               copy of its rocBLAS data; --hip-target gfx1201 (code and data it lacks)
#     gfx1201   assemble build --recipe rocm --hip-target gfx1201: refused before CMake
#     merge     assemble build --recipe rocm-cuda-units --unit-from cuda=$CUDA_UNIT, inside
#               the chroot, cuBLAS from $CUDA_LIBS; verify inside and here (--static)
#   CHROOT      default /var/tmp/sid-rocm
#   WORK        runtimes, copies and results (default /var/tmp/rocm-validate)
#   CUDA_UNIT   a folder made by `assemble build --recipe rocm-cuda-units --only-unit cuda`
#               (scripts/h200-acceptance.sh setup cudaunit makes one on an NVIDIA host)
#   CUDA_LIBS   a folder with libcudart.so.13, libcublas.so.13, libcublasLt.so.13 (NVIDIA's wheels)
#   JOBS        compile jobs (default: all cores)
# Every result (logs, JSON reports, times) lands in $WORK/results.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
CHROOT=${CHROOT:-/var/tmp/sid-rocm}
WORK=${WORK:-/var/tmp/rocm-validate}
RESULTS=$WORK/results
JOBS=${JOBS:-$(nproc)}
export ASSEMBLE_CACHE=${ASSEMBLE_CACHE:-$WORK/cache}
mkdir -p "$RESULTS" "$ASSEMBLE_CACHE"
RT=$WORK/runtime-rocm
MERGED=$WORK/runtime-rocm-cuda-units

inside() { "$repo/scripts/assemble-in-chroot.sh" --chroot "$CHROOT" --bind "$WORK" "$@"; }
here() { python3 -m builder "$@"; }
log() { echo "== $*" | tee -a "$RESULTS/validate.log"; }
expect_fail() {  # expect_fail NAME CMD...: the command must exit non-zero; its output is kept
  local name=$1 rc=0; shift
  "$@" > "$RESULTS/$name.out" 2> "$RESULTS/$name.err" || rc=$?
  if [ "$rc" = 0 ]; then log "UNEXPECTED: $name passed"; return 1; fi
  log "$name failed as it must (exit $rc): $(grep -m1 -E 'FAIL|error:' "$RESULTS/$name.err" || true)"
}

stage_chroot() {
  log "sid chroot at $CHROOT"
  local t0=$SECONDS
  "$repo/scripts/rocm-sid-chroot.sh" "$CHROOT" 2>&1 | tail -3 | tee -a "$RESULTS/validate.log"
  echo "chroot_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
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

stage_merge() {
  [ -f "${CUDA_UNIT:?set CUDA_UNIT}/assemble-unit.json" ] || { echo "no unit folder at $CUDA_UNIT" >&2; return 2; }
  [ -d "${CUDA_LIBS:?set CUDA_LIBS}" ] || { echo "no folder $CUDA_LIBS" >&2; return 2; }
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

[ $# -gt 0 ] || { sed -n '2,22p' "$0"; exit 2; }
for stage in "$@"; do "stage_$stage"; done
