# Where a bf16 mul_mat_vec case's seconds go on NVIDIA's Vulkan driver, from the repository root on a GPU host
# with the carried .debs (.carry/debs) and vulkan runtime (.carry/runtime-vulkan.tar.xz); output in $OUT.
#   bash docs/results/h100-2026-12-06d/diag.sh one-process     # one process alone: cold, warm, no disk cache, one n each, under a 15-core load
#   bash docs/results/h100-2026-12-06d/diag.sh shared-folder   # several processes at once on one cache folder, then one process on it
# As run on 2026-12-06 (diag-one-process.txt, diag-shared-folder.txt), each part was its own copy of this script,
# which first handed an H200 to the acceptance chain instead (none came).
set -u
part=${1:-}
case $part in one-process|shared-folder) ;; *) echo "diag.sh: name a part: one-process or shared-folder" >&2; exit 2 ;; esac
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt 2>&1
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
case $part in
one-process)
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
  ;;
shared-folder)
  par() { # tag, cache, n-regex per process...: all at once, then wait
    local tag=$1 c=$2 i=0; shift 2; local t0=$SECONDS
    for n in "$@"; do i=$((i+1)); run "$tag-p$i" "$n" "$c" > /dev/null & done; wait
    echo "  $tag: $# at once on $(basename $c): $((SECONDS-t0)) s; walls $(grep -h "^$tag-p" $OUT/diag.txt | awk '{print $4}' | cut -d= -f2 | tr '\n' ' ')" | tee -a $OUT/diag.txt
  }
  ls_cache() { echo "  $(basename $1): $(find $1 -type f | wc -l) files, $(du -sk $1 | cut -f1) KB" | tee -a $OUT/diag.txt; }
  par A8 $T/sA 1 2 3 4 5 6 7 8; ls_cache $T/sA          # 8 distinct pipelines compiled at once into one folder
  run A-after '[1-8]' $T/sA; ls_cache $T/sA           # one process then: served from the folder?
  par B8 $T/sB '[1-8]' '[1-8]' '[1-8]' '[1-8]' '[1-8]' '[1-8]' '[1-8]' '[1-8]'; ls_cache $T/sB   # the same 9 cases x 8
  run B-after '[1-8]' $T/sB; ls_cache $T/sB
  par C8 $T/sA '[1-8]' '[1-8]' '[1-8]' '[1-8]' '[1-8]' '[1-8]' '[1-8]' '[1-8]'; ls_cache $T/sA   # 8 readers of a warm one
  find $T/sA $T/sB -type f | head -20 | tee -a $OUT/diag.txt
  tar -C $T -czf $OUT/diag-raw.tgz --exclude='runtime-vulkan' --exclude='s[AB]' .
  ;;
esac
