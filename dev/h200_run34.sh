#!/usr/bin/env bash
# Sessions 18-19: four fusions against their unfused forms, same binary, same call.
#  1. MLXCEL_GPU_FUSED_NORM=1 (session 18; off by default until measured): the decode GEMV over
#     affine 4-bit weights normalizes its 1-2 input rows itself (rms_norm_act_kernel's order, x
#     into shared memory) instead of a separate rms_norm launch before it. Prediction: one launch fewer per fused norm (2 per dense
#     layer: before q/k/v and gate/up; 1 per MoE layer: before q/k/v), ~2-3 us each: 8B tg128
#     +4-6 %, 0.6B +10-15 %, 30B +2-4 %; prefill unchanged (> 2 rows: the separate norm).
#  2. MLXCEL_GPU_MOE_ROUTE=1 (session 17, default off): the router GEMV routes in its last block.
#     Prediction: 30B tg128 +4-7 %.
#  3. MLXCEL_GPU_MOE_FUSED_DOWN=1 (session 19, default off): a MoE decode step's gated
#     activation, expert down GEMV and combine as one launch (the down GEMV computes its x row
#     into shared memory; the last of a token's top_k blocks per column block combines).
#     Prediction: two launches fewer per MoE layer (~3 us each under ncu): 30B tg128 +5-8 %; with
#     2 and 3 together +10-15 % (~300 -> 335).
#  4. MLXCEL_GPU_FUSED_GATED=1 (session 19, default off): a dense layer's down GEMV computes its
#     own input (the gated activation of the gate_up product) into shared memory at 1-2 rows
#     (K * rows * 2 bytes <= 32 KiB: the 8B at batch 1 only). Prediction: one launch fewer per
#     dense layer: 8B tg128 +2-3 %, 0.6B +4-6 %.
# test_backend_ops with the defaults and under each switch; every case's output bits compared
# with the defaults' (ops reports), since each fusion claims the unfused launches' bits.
RUN=34
BUDGET_S=${BUDGET_S:-470}
source dev/h200_lib.sh
unxz_to .gpu/mlxcel.xz .gpu/mlxcel
unxz_to .gpu/test_backend_ops.xz .gpu/test_backend_ops
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$R/steps.log"
run_tests
run_tests MLXCEL_GPU_MOE_ROUTE=1
run_tests MLXCEL_GPU_FUSED_NORM=1
run_tests MLXCEL_GPU_MOE_FUSED_DOWN=1 MLXCEL_GPU_FUSED_GATED=1
same_bits "" MLXCEL_GPU_MOE_ROUTE=1
same_bits "" MLXCEL_GPU_FUSED_NORM=1
same_bits "" "MLXCEL_GPU_MOE_FUSED_DOWN=1 MLXCEL_GPU_FUSED_GATED=1"
synth_all
# The comparisons first (a short call still answers them), repeats after.
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
b 30b-both .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_MOE_ROUTE=1 MLXCEL_GPU_MOE_FUSED_DOWN=1
b 30b-all .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_MOE_ROUTE=1 MLXCEL_GPU_MOE_FUSED_DOWN=1 MLXCEL_GPU_FUSED_NORM=1
b 30b-down1 .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_MOE_FUSED_DOWN=1
b 30b-route1 .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_MOE_ROUTE=1
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 8b-gated1 .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_FUSED_GATED=1
b 8b-norm1 .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_FUSED_NORM=1
b 8b-all .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_FUSED_NORM=1 MLXCEL_GPU_FUSED_GATED=1
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
b 0.6b-gated1 .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_FUSED_GATED=1
b 0.6b-norm1 .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_FUSED_NORM=1
b 0.6b-all .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_FUSED_NORM=1 MLXCEL_GPU_FUSED_GATED=1
b 30b-norm1 .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_FUSED_NORM=1
b 30b-both-again .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_MOE_ROUTE=1 MLXCEL_GPU_MOE_FUSED_DOWN=1
b 30b-again .gpu/mlxcel qwen3-30b-a3b 1 3
b 8b-gated1-again .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_FUSED_GATED=1
b 8b-again .gpu/mlxcel llama-3.1-8b 1 3
b 0.6b-gated1-again .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_FUSED_GATED=1
b 0.6b-again .gpu/mlxcel qwen3-0.6b 1 3
b 8b-norm1-again .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_FUSED_NORM=1
b 30b-route1-again .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_MOE_ROUTE=1
ncu_step 8b llama-3.1-8b 1
ncu_step 30b-both qwen3-30b-a3b 1 MLXCEL_GPU_MOE_ROUTE=1 MLXCEL_GPU_MOE_FUSED_DOWN=1
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 2
# The K split's warp target on the dense shapes (run 32 tried only the 30B): does a longer
# loop per warp (fewer warps) or a fuller GPU (more) move the 8B / 0.6B? Predicted within +-3 %.
b 8b-tw1024 .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_TARGET_WARPS=1024
b 8b-tw4096 .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_TARGET_WARPS=4096
b 0.6b-tw1024 .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_QGEMV_TARGET_WARPS=1024
b 0.6b-tw4096 .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_QGEMV_TARGET_WARPS=4096
# Per launch: each 8B GEMV's time against its K split (the CSVs keep every launch).
ncu_step 8b-ks1 llama-3.1-8b 1 MLXCEL_GPU_QGEMV_MMA_KS=1
ncu_step 8b-ks8 llama-3.1-8b 1 MLXCEL_GPU_QGEMV_MMA_KS=8
late "selftest" || { env MLXCEL_GPU_MOE_ROUTE=1 MLXCEL_GPU_MOE_FUSED_DOWN=1 MLXCEL_GPU_FUSED_GATED=1 timeout 100 \
  .gpu/mlxcel selftest --device gpu > "$R/selftest-fused.log" 2>&1
  log "selftest MOE_ROUTE=1 MOE_FUSED_DOWN=1 FUSED_GATED=1 rc=$? $(tail -1 "$R/selftest-fused.log")"; }
pack
log "end"
