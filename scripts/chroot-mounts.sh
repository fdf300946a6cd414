# shellcheck shell=bash
# shellcheck disable=SC2154  # $dir is set by the script that sources this file
# Sourced by the chroot scripts (assemble-in-chroot.sh, rocm-configure-check.sh, rocm-sid-chroot.sh);
# needs $dir, the chroot. Paths are bound at the *same* path inside, and every mount is undone on
# exit: a leftover read-write bind of the cache would make `rm -rf CHROOT` delete the cache.
mounted=()
chroot_cleanup() { for ((i=${#mounted[@]}-1; i>=0; i--)); do umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}"; done; }
trap chroot_cleanup EXIT
chroot_bind() {  # chroot_bind PATH [ro]
  mkdir -p "$dir$1"
  mountpoint -q "$dir$1" && return 0
  mount --bind "$1" "$dir$1"; mounted+=("$dir$1")
  [ "${2:-}" = ro ] && mount -o remount,bind,ro "$dir$1"
  return 0
}
chroot_system_mounts() {  # /proc: hipconfig reads /proc/self/exe; /dev: /dev/null, and /dev/kfd where there is one
  if ! mountpoint -q "$dir/proc"; then mount -t proc proc "$dir/proc"; mounted+=("$dir/proc"); fi
  if ! mountpoint -q "$dir/dev"; then mount --bind /dev "$dir/dev"; mounted+=("$dir/dev"); fi
}

# The host's network settings for a command run in the chroot under `env -i`, which drops them:
# chroot_host_network fills the array chroot_host_env with NAME=VALUE words for `env`.
#  - trust: the host's CA bundle (the first of SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE,
#    GIT_SSL_CAINFO that is set, else the distribution's bundle) is bound read-only, alone in
#    $chroot_ca, and every TLS client is pointed at it and only it (OpenSSL/Python, requests,
#    curl, git, pip): the chroot trusts exactly what the host trusts, a TLS-inspecting proxy's CA
#    included, even one added to the host after the chroot was made;
#  - proxies: http_proxy, https_proxy, no_proxy, all_proxy, in both cases, as the host has them.
chroot_ca=/run/assemble-host-ca
chroot_host_env=()
chroot_host_network() {
  local name bundle="" from="" f
  for name in SSL_CERT_FILE REQUESTS_CA_BUNDLE CURL_CA_BUNDLE GIT_SSL_CAINFO; do
    if [ -n "${!name:-}" ]; then bundle=${!name}; from=$name; break; fi
  done
  if [ -z "$bundle" ]; then
    for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
      if [ -f "$f" ]; then bundle=$f; from="the distribution's bundle"; break; fi
    done
  fi
  if [ -z "$bundle" ]; then
    echo "chroot: warning: no CA bundle on this host (SSL_CERT_FILE, /etc/ssl/certs/ca-certificates.crt): the chroot's own trust store is used" >&2
  elif [ ! -f "$bundle" ] || [ ! -r "$bundle" ]; then
    echo "chroot: $from names $bundle, which is not a readable file -- fix: point $from at the host's CA bundle, or unset it" >&2
    exit 2
  else
    mkdir -p "$dir$chroot_ca"
    [ -e "$dir$chroot_ca/ca-certificates.crt" ] || : > "$dir$chroot_ca/ca-certificates.crt"
    # always a new bind (never reuse one found there): each run removes exactly its own
    mount --bind "$bundle" "$dir$chroot_ca/ca-certificates.crt"; mounted+=("$dir$chroot_ca/ca-certificates.crt")
    mount -o remount,bind,ro "$dir$chroot_ca/ca-certificates.crt"
    local ca=$chroot_ca/ca-certificates.crt
    chroot_host_env+=("SSL_CERT_FILE=$ca" "SSL_CERT_DIR=$chroot_ca" "REQUESTS_CA_BUNDLE=$ca" "CURL_CA_BUNDLE=$ca"
                      "GIT_SSL_CAINFO=$ca" "GIT_SSL_CAPATH=$chroot_ca" "PIP_CERT=$ca")
  fi
  for name in http_proxy https_proxy no_proxy all_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY ALL_PROXY; do
    if [ -n "${!name:-}" ]; then chroot_host_env+=("$name=${!name}"); fi
  done
  return 0
}
