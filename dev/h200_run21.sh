#!/usr/bin/env bash
# Fourth H200 call of session 8 (issue 12). Two binaries:
#   A = .gpu/mlxcel-a: run 20's + the cp.async qgemv_mma loading x one group ahead in registers
#       (run 20's SASS: x loaded at the group that used it stalled every group);
#   B = .gpu/mlxcel:   A + attention with 8 warps of 8 keys per 64-key span (was 4 warps of 16
#       keys: 1 warp per scheduler, long dependent chains) + qgemv_mma_gpl (one group per lane,
#       the mma's N separating groups: 128 contiguous bytes per quad and row, 4x fewer scale
#       loads), on by default.
# Switches: MLXCEL_GPU_QGEMV_MMA_GPL=0 (the per-k-slice kernels), MLXCEL_GPU_QGEMV_MMA_PIPE=0
# (run 18's register-staged kernel instead of the cp.async one), MLXCEL_GPU_QGEMV_MMA_KS.
# Predictions: B attention 29 -> <= 18 us; gpl gate_up 48 -> <= 30 us, 8B >= 230 tok/s; pipe with
# x ahead >= reg.
RUN=21
source dev/h200_lib.sh
run_tests
run_tests MLXCEL_GPU_QGEMV_MMA_GPL=0
synth_all
b a-reg-8b .gpu/mlxcel-a llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_MMA_PIPE=0
b b-reg-8b .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_MMA_GPL=0 MLXCEL_GPU_QGEMV_MMA_PIPE=0
b b-pipe-8b .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_MMA_GPL=0
b b-gpl-8b .gpu/mlxcel llama-3.1-8b 1 3
b b-gpl-ks4-8b .gpu/mlxcel llama-3.1-8b 1 2 MLXCEL_GPU_QGEMV_MMA_KS=4
b a-reg-0.6b .gpu/mlxcel-a qwen3-0.6b 1 3 MLXCEL_GPU_QGEMV_MMA_PIPE=0
b b-reg-0.6b .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_QGEMV_MMA_GPL=0 MLXCEL_GPU_QGEMV_MMA_PIPE=0
b b-gpl-0.6b .gpu/mlxcel qwen3-0.6b 1 3
b b-gpl-30b .gpu/mlxcel qwen3-30b-a3b 1 2
b b-gpl-8b-b16 .gpu/mlxcel llama-3.1-8b 16 1
b b-reg-8b-b16 .gpu/mlxcel llama-3.1-8b 16 1 MLXCEL_GPU_QGEMV_MMA_GPL=0 MLXCEL_GPU_QGEMV_MMA_PIPE=0
pack
prof b-gpl-8b .gpu/mlxcel llama-3.1-8b 1
pack
ncu_k gpl-gate_up qgemv_mma 1501 64 32
ncu_k pipe-gate_up qgemv_mma 1501 64 32 MLXCEL_GPU_QGEMV_MMA_GPL=0
ncu_k attn-b attention_split 100 512 8
pack
log "end"
