#!/usr/bin/env bash
# Sixth H200 call of session 8 (issue 12), short (the session's last device time). One switch:
# MLXCEL_GPU_QGEMV_MMA_OCC3=1 caps qgemv_mma_gpl's one-row kernel at 80 registers (3 blocks of 8
# warps per SM instead of 2 at 84 -> 88 allocated; 16 B of stack).
# Prediction: gate_up 38 -> <= 32 us, 8B tg128 236 -> >= 250 tok/s.
RUN=23
source dev/h200_lib.sh
run_tests MLXCEL_GPU_QGEMV_MMA_OCC3=1
synth_all
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 8b-occ3 .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_MMA_OCC3=1
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
b 0.6b-occ3 .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_QGEMV_MMA_OCC3=1
b 30b-occ3 .gpu/mlxcel qwen3-30b-a3b 1 2 MLXCEL_GPU_QGEMV_MMA_OCC3=1
pack
log "end"
