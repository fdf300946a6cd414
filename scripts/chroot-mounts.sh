# Sourced by the chroot scripts (assemble-in-chroot.sh, rocm-configure-check.sh); needs $dir,
# the chroot. Paths are bound at the *same* path inside, and every mount is undone on exit:
# a leftover read-write bind of the cache would make `rm -rf CHROOT` delete the cache.
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
