# Vulkan0 of the vulkan runtime, the whole default list as verify splits it (bench-ops --together), three runs:
# A as shipped (one shader cache folder for all processes of the run), then B1/B2 with a wrapper giving each
# run (each distinct argv) its own NVIDIA cache folder kept between runs: cold, then warm.
set -u; W=/tmp/dw9; mkdir -p $W $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt 2>&1
REPO=$PWD; mkdir -p .carry/wheels && cp .carry/wheels5/*.whl .carry/wheels/
NO_MODEL=1 WORK=$W RESULTS=$OUT CARRY=$REPO/.carry bash scripts/h200-acceptance.sh setup > $OUT/setup.out 2>&1
export PYTHONPATH=$W/py:$REPO PATH=$W/py/bin:$PATH
ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; EGL=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
mkdir -p $W/rtA $W/rtB; tar -C $W/rtA -xJf .carry/runtime-vulkan.tar.xz; tar -C $W/rtB -xJf .carry/runtime-vulkan.tar.xz
T=$W/rtB/runtime-vulkan/tests; mv $T/test-backend-ops $T/test-backend-ops.real
cat > $T/test-backend-ops <<'WRAP'
#!/bin/sh
key=$(printf '%s\n' "$@" | md5sum | cut -c1-12)
__GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH=/tmp/dw9/kept/$key __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1
export __GL_SHADER_DISK_CACHE __GL_SHADER_DISK_CACHE_PATH __GL_SHADER_DISK_CACHE_SKIP_CLEANUP
mkdir -p "$__GL_SHADER_DISK_CACHE_PATH"
exec "$(dirname "$0")/test-backend-ops.real" "$@"
WRAP
chmod +x $T/test-backend-ops
one() { # tag runtime
  echo "== $1 $(date -u +%T) $(uptime)" | tee -a $OUT/diag2.txt
  python3 scripts/bench-ops.py $2 --device Vulkan0 --together --cap 150 --env VK_DRIVER_FILES=$ICD \
    --env __EGL_VENDOR_LIBRARY_FILENAMES=$EGL --keep $W/keep/$1 --out $OUT/bench-$1.json > $OUT/bench-$1.txt 2>&1
  tail -4 $OUT/bench-$1.txt | tee -a $OUT/diag2.txt
  echo "   kept: $(ls $W/kept 2>/dev/null | wc -l) folders, $(du -sk $W/kept 2>/dev/null | cut -f1) KB" | tee -a $OUT/diag2.txt
  tar -C $W/keep --exclude=nvidia-shader-cache -czf $OUT/$1-raw.tgz $1
}
one A $W/rtA/runtime-vulkan
one B1 $W/rtB/runtime-vulkan
one B2 $W/rtB/runtime-vulkan
