#!/usr/bin/env bash
# Session 16: main's new defaults (d114727: MoE prefill GEMM and the gate + up decode pair on for
# CUDA) with no switches set, against run 30's rows with the switches set. Prediction: the same
# numbers within noise (30B ~300 / ~5,750, 8B ~330 / ~5,950), test_backend_ops 23/23, and the
# switches at 0 giving back run 30's "off" row.
RUN=31
BUDGET_S=${BUDGET_S:-300}
source dev/h200_lib.sh
unxz_to .gpu/mlxcel.xz .gpu/mlxcel
unxz_to .gpu/test_backend_ops.xz .gpu/test_backend_ops
run_tests
synth_all
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
b 30b-off .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_MOE_GEMM=0 MLXCEL_GPU_MOE_PAIR=0
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
pack
log "end"
