#!/usr/bin/env bash
# Session 20, third call: the 30B's 8-bit router GEMV (SIMT qgemv, 16 blocks of 4 warps for 128
# columns; 7.1 us per layer under ncu in run 34) with 4 warps per column group instead of 2
# (MLXCEL_GPU_QGEMV_KSPLIT=4, an existing knob: 32 blocks, half the lanes of each warp idle at
# K = 2,048). Prediction: router 7.1 -> ~5 us, 30B tg128 +1-2 %. Same binary as run 36's default.
RUN=37
BUDGET_S=${BUDGET_S:-200}
source dev/h200_lib.sh
unxz_to .gpu/mlxcel.xz .gpu/mlxcel
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$R/steps.log"
timeout 120 .gpu/mlxcel synth --like qwen3-30b-a3b --quant affine4 --group-size 64 --no-tokenizer \
  --force "$S/qwen3-30b-a3b" > "$R/synth-qwen3-30b-a3b.log" 2>&1
log "synth rc=$?"
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
b 30b-ks4 .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_QGEMV_KSPLIT=4
b 30b-ks4-route .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_QGEMV_KSPLIT=4 MLXCEL_GPU_MOE_ROUTE=1
b 30b-again .gpu/mlxcel qwen3-30b-a3b 1 3
b 30b-ks4-again .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_QGEMV_KSPLIT=4
ncu_step 30b-ks4 qwen3-30b-a3b 1 MLXCEL_GPU_QGEMV_KSPLIT=4
pack
log "end"
