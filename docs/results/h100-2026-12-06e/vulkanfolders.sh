# Vulkan0 of the vulkan runtime: one NVIDIA shader cache folder shared by all of a run's processes (as verify
# ran it to 2026-12-06: --env names the folder) against a folder per process (verify's own), a first run to
# warm the machine, then A B B A A B.
stage_vulkanfolders() {
  local t0=$SECONDS tag
  log "Vulkan0 of the vulkan runtime: warm-up run (a folder per process)"
  whole_list folders-warmup "$REPO/scripts/bench-ops.py"
  for tag in shared-1 own-1 own-2 shared-2 shared-3 own-3; do
    log "Vulkan0 of the vulkan runtime: $tag"
    if [[ $tag == shared-* ]]; then
      mkdir -p "$WORK/glcache-$tag"
      whole_list "folders-$tag" "$REPO/scripts/bench-ops.py" --env __GL_SHADER_DISK_CACHE=1 \
        --env "__GL_SHADER_DISK_CACHE_PATH=$WORK/glcache-$tag" --env __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1
    else
      whole_list "folders-$tag" "$REPO/scripts/bench-ops.py"
    fi
  done
  echo "vulkanfolders_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
}
