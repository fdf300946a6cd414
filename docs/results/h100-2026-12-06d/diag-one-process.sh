# On an H200: the acceptance chain (setup build ops). Otherwise: where a bf16 mul_mat_vec case's seconds go on
# NVIDIA's Vulkan driver (one process alone; cold/warm/no disk cache; under a 15-core load).
set -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt 2>&1
if grep -q H200 $OUT/gpu.txt; then STAGES="setup build ops" LIM=${LIM:-540} exec bash .carry/call8.sh; fi
for f in .carry/debs/*.deb; do dpkg -x "$f" /; done; ldconfig
T=/tmp/dg; rm -rf $T; mkdir -p $T; tar -C $T -xJf .carry/runtime-vulkan.tar.xz
P=$T/runtime-vulkan/tests/test-backend-ops
ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; EGL=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
BASE='type_a=bf16,type_b=f32,m=16,n=NN,k=256,bs=\[1,1\],nr=\[1,1\],per=\[0,1,2,3\],k_v=0,o=1,'
TIMEFORMAT='%R %U %S'
run() { # name, n-regex, cache (dir or "off")
  local name=$1 n=$2 c=$3 dc=1; [ "$c" = off ] && dc=0 && c=$T/none; mkdir -p $c
  local t; t=$( { time env -i PATH=/usr/bin:/bin VK_DRIVER_FILES=$ICD __EGL_VENDOR_LIBRARY_FILENAMES=$EGL \
    __GL_SHADER_DISK_CACHE=$dc __GL_SHADER_DISK_CACHE_PATH=$c __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \
    $P test -b Vulkan0 -o MUL_MAT -p "${BASE/NN/$n}" --output sql > $T/$name.out 2> $T/$name.err; } 2>&1 )
  echo "$name n=$n cache=$3 wall/user/sys=$t passed=$(grep -c "'test', '1', '1'" $T/$name.out) cachedir=$(du -sk $c | cut -f1)KB" | tee -a $OUT/diag.txt
}
echo "$(cat $OUT/gpu.txt) $(nproc) cores $(uptime)" | tee $OUT/diag.txt
run empty 99 $T/cA                         # start-up only: no case matches
run alone-cold '[1-8]' $T/cA
run alone-warm '[1-8]' $T/cA
run alone-nocache '[1-8]' off
for n in 1 2 4 8; do run one-n$n $n $T/c$n; done
for i in $(seq 15); do ( while :; do :; done ) & done; sleep 1
run load-cold '[1-8]' $T/cL
run load-warm '[1-8]' $T/cA
kill $(jobs -p) 2>/dev/null
tar -C $T -czf $OUT/diag-raw.tgz --exclude='runtime-vulkan' --exclude='c*' .
