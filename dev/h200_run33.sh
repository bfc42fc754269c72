#!/usr/bin/env bash
# Session 17: the MoE router GEMV routes its tokens in its last block (kernels::linear_route,
# MLXCEL_GPU_MOE_ROUTE=1; off by default until measured) against the two launches (=0), same
# binary, same call. Needs a binary built with the route default at 0 (main after 0a75982).
# Prediction: 30B tg128 +4-7 % (one launch of the 12 per MoE layer gone, ~6 us under ncu, plus
# the router weights loaded before the PDL wait); ncu step 581 -> 533 launches; prefill and the
# dense models unchanged; test_backend_ops 24/24 (MoeRouteWithRouter: fused == apart, bit for bit).
RUN=33
BUDGET_S=${BUDGET_S:-420}
source dev/h200_lib.sh
unxz_to .gpu/mlxcel.xz .gpu/mlxcel
unxz_to .gpu/test_backend_ops.xz .gpu/test_backend_ops
run_tests
run_tests MLXCEL_GPU_MOE_ROUTE=1
export MLXCEL_GPU_MOE_ROUTE=1
synth_all
b 30b .gpu/mlxcel qwen3-30b-a3b 1 5
b 30b-route0 .gpu/mlxcel qwen3-30b-a3b 1 5 MLXCEL_GPU_MOE_ROUTE=0
b 30b-again .gpu/mlxcel qwen3-30b-a3b 1 5
b 30b-route0-again .gpu/mlxcel qwen3-30b-a3b 1 5 MLXCEL_GPU_MOE_ROUTE=0
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
ncu_step 30b qwen3-30b-a3b 1
ncu_step 30b-route0 qwen3-30b-a3b 1 MLXCEL_GPU_MOE_ROUTE=0
b 30b-b16 .gpu/mlxcel qwen3-30b-a3b 16 2
b 30b-b16-route0 .gpu/mlxcel qwen3-30b-a3b 16 2 MLXCEL_GPU_MOE_ROUTE=0
pack
log "end"
