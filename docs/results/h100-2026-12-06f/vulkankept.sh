# Vulkan0 of the vulkan runtime: one NVIDIA shader cache folder shared by all of a run's processes (as verify
# ran it to 2026-12-06: --env names a fresh folder) against verify's folder per slot kept in the tool's cache
# ($ASSEMBLE_CACHE/nvidia-shader-cache/Vulkan0), emptied before its first run: A S S A S.
stage_vulkankept() {
  local t0=$SECONDS tag
  rm -rf "$ASSEMBLE_CACHE/nvidia-shader-cache"
  for tag in shared-1 slots-1 slots-2 shared-2 slots-3; do
    log "Vulkan0 of the vulkan runtime: $tag"
    if [[ $tag == shared-* ]]; then
      mkdir -p "$WORK/glcache-$tag"
      whole_list "kept-$tag" "$REPO/scripts/bench-ops.py" --env __GL_SHADER_DISK_CACHE=1 \
        --env "__GL_SHADER_DISK_CACHE_PATH=$WORK/glcache-$tag" --env __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1
    else
      whole_list "kept-$tag" "$REPO/scripts/bench-ops.py"
      du -sk "$ASSEMBLE_CACHE/nvidia-shader-cache" | tee -a "$RESULTS/times.txt"
    fi
  done
  echo "vulkankept_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
}
