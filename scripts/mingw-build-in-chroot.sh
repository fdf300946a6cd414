#!/usr/bin/env bash
# Cross-build llama.cpp for 64-bit Windows with mingw-w64, inside the Debian sid chroot of
# scripts/rocm-sid-chroot.sh (sid's mingw-w64 12+ headers: Debian 12's are too old for this
# llama.cpp -- THREAD_POWER_THROTTLING_STATE, cpp-httplib's CreateFile2).
#
#   scripts/mingw-build-in-chroot.sh --chroot DIR SRC BUILD TARGET... [-- CMAKE-DEFINE...]
#
# SRC is bound read-only and BUILD (and $CCACHE_DIR, when set) read-write at the same paths
# inside; the toolchain is scripts/mingw-w64-x86_64.cmake. Shared libraries and backend modules
# (BUILD_SHARED_LIBS=ON: mingw defaults it off and GGML_BACKEND_DL needs it). Prints BUILD/bin
# last. Everything mounted is unmounted on every exit path.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=""
[ "${1:-}" = --chroot ] && { dir=$2; shift 2; }
[ -n "$dir" ] && [ $# -ge 3 ] || { echo "mingw-build-in-chroot: usage: --chroot DIR SRC BUILD TARGET... [-- -DNAME=VALUE...]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "mingw-build-in-chroot: needs root (bind mounts, chroot)" >&2; exit 2; }
src=$(cd "$1" && pwd -P); mkdir -p "$2"; build=$(cd "$2" && pwd -P); shift 2
targets=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do targets+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
dir=$(cd "$dir" && pwd -P)
[ -x "$dir/usr/bin/x86_64-w64-mingw32-g++-posix" ] || { echo "mingw-build-in-chroot: $dir has no mingw-w64 -- fix: scripts/rocm-sid-chroot.sh $dir" >&2; exit 2; }
# shellcheck source=scripts/chroot-mounts.sh
. "$repo/scripts/chroot-mounts.sh"
chroot_system_mounts
chroot_bind "$src" ro
chroot_bind "$build"
chroot_bind "$repo/scripts" ro
launcher=()
if [ -n "${CCACHE_DIR:-}" ]; then
  mkdir -p "$CCACHE_DIR"; chroot_bind "$CCACHE_DIR"
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp ${CCACHE_DIR:+CCACHE_DIR=$CCACHE_DIR} \
  ${CCACHE_DIR:+CCACHE_BASEDIR=$(dirname "$src")} \
  chroot "$dir" cmake -S "$src" -B "$build" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$repo/scripts/mingw-w64-x86_64.cmake" \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF "${launcher[@]}" "$@" >&2
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp ${CCACHE_DIR:+CCACHE_DIR=$CCACHE_DIR} \
  ${CCACHE_DIR:+CCACHE_BASEDIR=$(dirname "$src")} \
  chroot "$dir" cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >&2
echo "$build/bin"
