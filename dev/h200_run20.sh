#!/usr/bin/env bash
# Third H200 call of session 8 (issue 12). A/B by switch: MLXCEL_GPU_QGEMV_MMA_PIPE 1 (default:
# qgemv_mma with weights and scales streamed by cp.async into per-lane shared-memory rings,
# 64 registers, 4 blocks per SM) vs 0 (run 18's register-staged kernel, now 98 registers).
# Prediction: 8B gate_up 48 -> <= 30 us, down 28 -> <= 17 us; 8B tg128 190 -> >= 230 tok/s.
RUN=20
source dev/h200_lib.sh
run_tests
synth_all
b reg-8b .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_MMA_PIPE=0
b pipe-8b .gpu/mlxcel llama-3.1-8b 1 3
b pipe-0.6b .gpu/mlxcel qwen3-0.6b 1 3
b pipe-30b .gpu/mlxcel qwen3-30b-a3b 1 2
b pipe-8b-b16 .gpu/mlxcel llama-3.1-8b 16 1
pack
prof pipe-8b .gpu/mlxcel llama-3.1-8b 1
pack
ncu_k gate_up qgemv_mma 1501 64 32
ncu_k down qgemv_mma 1502 64 32
pack
log "end"
