#!/usr/bin/env bash
# Session 11, first H200 call (issue 12). Against run 25's binary (.gpu/mlxcel-base.xz, the code
# of 6287af8), the new one has:
#  - qgemv_bulk (1-2 rows, sm_90): the gpl GEMV's arithmetic with weights and scales streamed by
#    cp.async.bulk into per-warp 3-stage shared-memory rings, one resident block per SM walking
#    the column blocks, e per group computed once per block, weight copies marked evict-first
#    in L2. Run 25: the GEMV was 70 % of the 8B step at ~1.6 TB/s, 22 % occupancy.
#    Prediction: 8B GEMV time -35 % (gate_up 37.7 us -> <= 24 us), 8B 286 -> >= 360 tok/s;
#    0.6B 719 -> >= 780 (its GEMVs are small and latency-bound); 30B 244 -> >= 270 (its
#    attention/dense GEMVs only; experts keep the gpl kernel).
#    Same binary with MLXCEL_GPU_QGEMV_BULK=0 isolates it.
#  - rms_norm / add_rms_norm load their fp32 weight with the row instead of after the reduction
#    (one DRAM round trip fewer). Prediction: add_rms_norm 7.0 -> <= 5.5 us under ncu.
#  - the sampler's one-pass greedy path (no logprobs, processors or NaN hook): 75 -> <= 10 us.
RUN=26
source dev/h200_lib.sh
unxz_to() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2" && chmod +x "$2"; }
unxz_to .gpu/mlxcel-base.xz /tmp/mlxcel-base
unxz_to .gpu/test_backend_ops.xz .gpu/test_backend_ops
run_tests
run_tests MLXCEL_GPU_QGEMV_BULK=0
timeout 120 .gpu/mlxcel selftest --device gpu > "$R/selftest.log" 2>&1
log "selftest rc=$? $(tail -1 "$R/selftest.log")"
synth_all
for m in llama-3.1-8b:8b qwen3-0.6b:0.6b qwen3-30b-a3b:30b; do
  b ${m#*:} .gpu/mlxcel ${m%:*} 1 3
  b ${m#*:}-bulk0 .gpu/mlxcel ${m%:*} 1 3 MLXCEL_GPU_QGEMV_BULK=0
  b ${m#*:}-base /tmp/mlxcel-base ${m%:*} 1 3
done
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 1
ncu_step() {
  local tag=$1 model=$2 batch=$3
  shift 3
  env "$@" timeout 200 ncu --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv .gpu/mlxcel bench -m "$S/$model" -p 64 -g 2 -r 1 \
    --batch "$batch" --device gpu > "$R/ncu-step-$tag.csv" 2> "$R/ncu-step-$tag.err"
  log "ncu step $tag rc=$?"
  python3 dev/ncu_step_times.py < "$R/ncu-step-$tag.csv" 2>&1 | tee "$R/step-times-$tag.txt" | head -16
}
ncu_step 8b llama-3.1-8b 1
ncu_step 0.6b qwen3-0.6b 1
ncu_step 30b qwen3-30b-a3b 1
# One decode step's gate_up and down (129 bulk launches per 8B step: skip the first step).
ncu_k bulk-gate_up qgemv_bulk 131 64 4
ncu_k bulk-down qgemv_bulk 132 64 4
pack
log "end"
