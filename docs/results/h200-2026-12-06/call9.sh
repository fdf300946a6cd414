# A detached chain whose results are copied to $OUT every 5 s (a call cut short still returns what was done).
# On an H200: the acceptance (STAGES_H200); on any other card: STAGES_OTHER. A later call on the same machine
# only waits for the chain and copies.
set -u; W=/tmp/dw9; mkdir -p $W $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt 2>&1
if grep -q H200 $OUT/gpu.txt; then STAGES=${STAGES_H200:-setup vulkanverify build ops}; else STAGES=${STAGES_OTHER:-}; fi
[ -n "$STAGES" ] || { echo "not an H200: $(cat $OUT/gpu.txt)"; exit 3; }
if [ ! -f $W/chain.started ]; then
  rm -rf $W/repo; cp -a . $W/repo; echo "$STAGES" > $W/chain.started
  mkdir -p $W/repo/.carry/wheels && cp $W/repo/.carry/wheels5/*.whl $W/repo/.carry/wheels/
  ( cd $W/repo && WORK=$W RESULTS=$W/results CARRY=$W/repo/.carry NO_MODEL=1 NO_SMOKE=1 setsid nohup bash -c "bash scripts/h200-acceptance.sh $STAGES; echo rc=\$? > $W/chain.done" > $W/chain.log 2>&1 < /dev/null & )
fi
cp $W/chain.started $OUT/stages.txt
t0=$SECONDS; lim=${LIM:-500}
sync_out() { cp $W/chain.log $OUT/ 2>/dev/null; [ -f $W/chain.done ] && cp $W/chain.done $OUT/; tar -C $W -czf $OUT/results.tgz.part results 2>/dev/null && mv $OUT/results.tgz.part $OUT/results.tgz; }
while [ ! -f $W/chain.done ] && [ $((SECONDS-t0)) -lt $lim ]; do sleep 5; sync_out; done
sync_out
cat $OUT/stages.txt; tail -3 $W/chain.log; cat $W/results/times.txt 2>/dev/null; grep -h "ops CUDA0\|ops Vulkan0" $W/chain.log | tail
for f in $W/results/probe/bench-ops-folders-*.txt; do [ -f "$f" ] && echo "$(basename $f): $(grep -E "^Vulkan0 .* cases" $f | tail -1)"; done
