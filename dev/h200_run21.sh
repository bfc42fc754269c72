#!/usr/bin/env bash
# Fourth H200 call of session 8 (issue 12). Two binaries:
#   A = .gpu/mlxcel-a: run 20's + the cp.async qgemv_mma loading x one group ahead in registers
#       (run 20's SASS: x loaded at the group that used it stalled every group);
#   B = .gpu/mlxcel:   A + decode/prefill attention with 8 warps of 8 keys per 64-key span
#       (was 4 warps of 16 keys: 1 warp per scheduler, long dependent chains).
# Switch: MLXCEL_GPU_QGEMV_MMA_PIPE=0 is run 18's register-staged kernel.
# Predictions: pipe with x ahead >= reg (8B 190 tok/s); B: attention 29 -> <= 18 us, 8B +5 %.
RUN=21
source dev/h200_lib.sh
run_tests
synth_all
b a-reg-8b .gpu/mlxcel-a llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_MMA_PIPE=0
b a-pipe-8b .gpu/mlxcel-a llama-3.1-8b 1 3
b b-reg-8b .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_MMA_PIPE=0
b b-pipe-8b .gpu/mlxcel llama-3.1-8b 1 3
b a-reg-0.6b .gpu/mlxcel-a qwen3-0.6b 1 3 MLXCEL_GPU_QGEMV_MMA_PIPE=0
b b-reg-0.6b .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_QGEMV_MMA_PIPE=0
pack
prof b-reg-8b .gpu/mlxcel llama-3.1-8b 1 MLXCEL_GPU_QGEMV_MMA_PIPE=0
prof b-pipe-8b .gpu/mlxcel llama-3.1-8b 1
pack
ncu_k pipe-gate_up qgemv_mma 1501 64 32
ncu_k reg-gate_up qgemv_mma 1501 64 32 MLXCEL_GPU_QGEMV_MMA_PIPE=0
ncu_k attn-b attention_split 100 512 8
pack
log "end"
