#!/usr/bin/env bash
# Session 18: two fusions against their unfused forms, same binary, same call.
#  1. MLXCEL_GPU_FUSED_NORM (default on): the decode GEMV over affine 4-bit weights normalizes its
#     1-2 input rows itself (rms_norm_act_kernel's order, x into shared memory) instead of a
#     separate rms_norm launch before it. Prediction: one launch fewer per fused norm (2 per dense
#     layer: before q/k/v and gate/up; 1 per MoE layer: before q/k/v), ~2-3 us each: 8B tg128
#     +4-6 %, 0.6B +10-15 %, 30B +2-4 %; prefill unchanged (> 2 rows: the separate norm).
#  2. MLXCEL_GPU_MOE_ROUTE=1 (session 17, default off): the router GEMV routes in its last block.
#     Prediction: 30B tg128 +4-7 %.
# test_backend_ops: 24/24 with the defaults, with FUSED_NORM=0 and with MOE_ROUTE=1 (LinearFusions
# and MoeRouteWithRouter check the fused forms against the unfused bit for bit).
RUN=34
BUDGET_S=${BUDGET_S:-430}
source dev/h200_lib.sh
unxz_to .gpu/mlxcel.xz .gpu/mlxcel
unxz_to .gpu/test_backend_ops.xz .gpu/test_backend_ops
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$R/steps.log"
run_tests
run_tests MLXCEL_GPU_MOE_ROUTE=1
run_tests MLXCEL_GPU_FUSED_NORM=0
synth_all
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 8b-norm0 .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_FUSED_NORM=0
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
b 0.6b-norm0 .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_FUSED_NORM=0
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
b 30b-norm0 .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_FUSED_NORM=0
b 30b-route1 .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_MOE_ROUTE=1
b 8b-again .gpu/mlxcel llama-3.1-8b 1 3
b 8b-norm0-again .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_FUSED_NORM=0
b 30b-route1-again .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_MOE_ROUTE=1
b 30b-again .gpu/mlxcel qwen3-30b-a3b 1 3
ncu_step 8b llama-3.1-8b 1
ncu_step 30b-route1 qwen3-30b-a3b 1 MLXCEL_GPU_MOE_ROUTE=1
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 2
pack
log "end"
