#!/usr/bin/env bash
# Fifth H200 call of session 8 (issue 12): the session's binary. Defaults: qgemv_mma_gpl for
# affine 4-bit g32/g64 (2 activation rows per mma column set at 1-2 rows, NP = 2 sets per block
# above), the k-slice qgemv_mma for g128, attention with 8 warps per 64-key span; the cp.async
# kernel is gone (runs 20-21: 2x slower). Knobs measured: MLXCEL_GPU_QGEMV_MMA_NP = 1 / 2 / 4 at
# batch 16 (run 21: NP = 4, 184 registers, gave 905 tok/s against the k-slice kernel's 1,473);
# MLXCEL_GPU_QGEMV_MMA_OCC=1 (registers capped for 4 blocks per SM: 96 B of stack).
# Predictions: 8B tg128 >= 230 tok/s (run 21: 235); batch 16 with NP = 1 or 2 >= 1,473.
RUN=22
source dev/h200_lib.sh
run_tests
run_tests MLXCEL_GPU_QGEMV_MMA_NP=1
run_tests MLXCEL_GPU_QGEMV_MMA_NP=4
synth_all
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 8b-occ .gpu/mlxcel llama-3.1-8b 1 2 MLXCEL_GPU_QGEMV_MMA_OCC=1
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
b 30b .gpu/mlxcel qwen3-30b-a3b 1 2
b 8b-b16-np2 .gpu/mlxcel llama-3.1-8b 16 1
b 8b-b16-np1 .gpu/mlxcel llama-3.1-8b 16 1 MLXCEL_GPU_QGEMV_MMA_NP=1
b 8b-b16-np4 .gpu/mlxcel llama-3.1-8b 16 1 MLXCEL_GPU_QGEMV_MMA_NP=4
pack
prof 8b .gpu/mlxcel llama-3.1-8b 1
prof 30b .gpu/mlxcel qwen3-30b-a3b 1
prof 8b-b16 .gpu/mlxcel llama-3.1-8b 16
pack
log "end"
