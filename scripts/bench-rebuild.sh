#!/usr/bin/env bash
# Rebuild benchmark: what an unchanged `assemble build` costs against a cold one, and what a
# warm compiler cache saves when the build folder is gone.
#
#   scripts/bench-rebuild.sh [--recipe cpu] [--no-cold] [--keep]
#
# Rows (each a real `assemble build` of RECIPE into a scratch output):
#   cold          empty build folder, empty ccache (a scratch CCACHE_DIR)
#   no-op         same inputs again: the stamp skips configure + build; bundle + verify only
#   ninja no-op   the stamp removed: CMake/Ninja decide there is nothing to do
#   warm ccache   build folder deleted, ccache kept: configure + every compile is a cache hit
# Builds run in a scratch ASSEMBLE_CACHE (sources are copied from yours when present, so no
# network is needed). --no-cold skips the cold row and uses your own CCACHE_DIR, which must
# already hold this recipe's objects (a previous build); the first build is then the warm row.
# Not a test: numbers depend on the machine; docs/lab/2026-11-29-release.md records some.
set -euo pipefail

RECIPE=cpu
COLD=1
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --recipe) RECIPE="$2"; shift 2 ;;
    --no-cold) COLD=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1 -- fix: see $0 --help" >&2; exit 2 ;;
  esac
done

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
command -v ccache >/dev/null || { echo "error: ccache not found -- fix: install ccache (the warm row needs it)" >&2; exit 2; }
SRC_CACHE="${ASSEMBLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/assemble}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/bench-rebuild.XXXXXX")"
[ "$KEEP" = 1 ] || trap 'rm -rf "$WORK"' EXIT
export ASSEMBLE_CACHE="$WORK/cache"
[ "$COLD" = 1 ] && export CCACHE_DIR="$WORK/ccache"
mkdir -p "$ASSEMBLE_CACHE"
# Sources and downloads only: no build folder and no patched tree come along.
for d in sources downloads; do
  [ -d "$SRC_CACHE/$d" ] && cp -a "$SRC_CACHE/$d" "$ASSEMBLE_CACHE/"
done

build() { (cd "$REPO" && "$PY" -m builder build --recipe "$RECIPE" --out "$WORK/out/runtime-$RECIPE" -q --keep 0 >/dev/null); }
timed() {  # timed LABEL: run one build, print and remember its wall time
  local t0 t1
  t0=$(date +%s.%N); build; t1=$(date +%s.%N)
  printf '%-12s %8.1f s\n' "$1" "$(echo "$t1 - $t0" | bc)"
}
build_dir() { (cd "$REPO" && "$PY" -m builder show "$RECIPE" --json) | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["units"][0]["build_dir"])'; }

echo "recipe $RECIPE on $(nproc) cores, $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
counts() { ccache --print-stats 2>/dev/null | awk -F'\t' '$1=="direct_cache_hit"||$1=="preprocessed_cache_hit"{h+=$2} $1=="cache_miss"{m+=$2} END{print h+0, m+0}'; }
since() { local h0 m0 h1 m1; read -r h0 m0 <<<"$1"; read -r h1 m1 <<<"$(counts)"; echo "$((h1 - h0)) ccache hits, $((m1 - m0)) misses"; }
if [ "$COLD" = 1 ]; then
  timed "cold"
else
  c0="$(counts)"
  timed "warm ccache"
  echo "             ($(since "$c0"))"
fi
timed "no-op"
BD="$(build_dir)"
rm -f "$BD/assemble-built.json"
timed "ninja no-op"
if [ "$COLD" = 1 ]; then
  rm -rf "$BD"
  c0="$(counts)"
  timed "warm ccache"
  echo "             ($(since "$c0"))"
fi
