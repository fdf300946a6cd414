#!/usr/bin/env bash
# Run this checkout's `assemble` inside a chroot -- the Debian sid one from
# scripts/rocm-sid-chroot.sh -- as a ROCm 6.4 build host would run it.
#
#   scripts/assemble-in-chroot.sh [--chroot DIR] [--bind PATH]... -- ASSEMBLE-ARGS...
#     --chroot DIR   default /var/tmp/sid-rocm (needs root: bind mounts, chroot)
#     --bind PATH    also bind PATH read-write at the same path inside (e.g. the --out parent)
#     ASSEMBLE_CACHE the assemble cache, bound read-write at the same path (default
#                    ${XDG_CACHE_HOME:-$HOME/.cache}/assemble: the one `assemble` uses here)
#
# The checkout is bound read-only and run from there (PYTHONPATH) with the chroot's venv
# (/opt/assemble-venv: pyproject's dependencies), under `env -i` and `nice`. Of the host's
# environment only its network settings go in: its CA bundle (bound read-only, the only one
# trusted inside) and its proxy variables (scripts/chroot-mounts.sh). Every path is the same
# inside and out, so build folders, manifests and logs name real host paths. Everything
# mounted is unmounted on every exit path. Exit status: assemble's; 2 for a bad invocation.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dir=/var/tmp/sid-rocm
binds=()
while [ $# -gt 0 ]; do
  case "$1" in
    --chroot) dir=${2:?--chroot needs a folder}; shift 2 ;;
    --bind) binds+=("${2:?--bind needs a path}"); shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "assemble-in-chroot: unknown option $1 -- fix: see --help" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "assemble-in-chroot: no assemble arguments -- fix: add them after --" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "assemble-in-chroot: needs root (bind mounts, chroot) -- fix: run it with sudo" >&2; exit 2; }
[ -x "$dir/opt/assemble-venv/bin/python3" ] || { echo "assemble-in-chroot: $dir has no /opt/assemble-venv -- fix: scripts/rocm-sid-chroot.sh $dir" >&2; exit 2; }
dir=$(cd "$dir" && pwd -P)
cache=${ASSEMBLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/assemble}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd -P)

# mounts at the same paths inside, undone on every exit path
# shellcheck source=scripts/chroot-mounts.sh
. "$repo/scripts/chroot-mounts.sh"
chroot_system_mounts
chroot_bind "$repo" ro
chroot_bind "$cache"
for b in "${binds[@]}"; do mkdir -p "$b"; chroot_bind "$(cd "$b" && pwd -P)"; done
chroot_host_network   # fills chroot_host_env: the host's CA bundle and proxies

set +e
chroot "$dir" env -i PATH=/opt/assemble-venv/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
  TERM="${TERM:-dumb}" PYTHONPATH="$repo" PYTHONDONTWRITEBYTECODE=1 ASSEMBLE_CACHE="$cache" \
  "${chroot_host_env[@]}" nice -n 19 python3 -m builder "$@"
rc=$?
exit $rc
