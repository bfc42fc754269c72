#!/usr/bin/env bash
# Written in session 14 (no device was lent: nothing of it has run on a GPU). Measures the MoE
# prefill on the matrix units: with MLXCEL_GPU_MOE_GEMM=1, steps of more than 64 tokens group
# their (token, expert) rows by expert on the device (moe.cu's moe_group_kernel) and gemm_mma.cu
# runs each expert's rows as 128-row tiles against that expert's matrix, instead of one GEMV per
# row (which reads every chosen expert matrix once per row: ~10 GB per 30B layer at pp512).
# Predictions (H100, against MOE_GEMM=0 in the same call): 30B pp512 1,254 -> >= 3,500 tok/s
# (expected 4,000-5,000: ~100 ms of grouped GEMMs per 512 tokens at the dense GEMM's measured
# rate, with tiles ~1/4 full at 32 rows per expert); 30B decode unchanged (steps of <= 64 tokens
# never group); 8B / 0.6B prefill and decode unchanged within noise (the dense GEMM's SASS differs
# only in prologue register names). Batch 16 (8,192-token prefill) gains more: fuller tiles.
# Also (session 16) MLXCEL_GPU_MOE_PAIR=1: a decode step's expert gate and up GEMVs as one launch
# (qgemv_mma_gpl_kernel's Pair form). Prediction: 30B tg128 289 -> >= 305 tok/s (expected
# +8-10 %: ~7 us of one launch's fixed costs per layer of ~72 us); prefill unchanged (the pair
# splits for grouped or long steps' GEMMs); identical bits (test_backend_ops with it on).
# Build here first: cmake --build --preset cuda --target mlxcel test_backend_ops; strip both into
# .gpu/ and xz them (mlxcel.xz, test_backend_ops.xz); carry [".gpu"].
RUN=30
BUDGET_S=${BUDGET_S:-420}
source dev/h200_lib.sh
unxz_to .gpu/mlxcel.xz .gpu/mlxcel
unxz_to .gpu/test_backend_ops.xz .gpu/test_backend_ops
MG=MLXCEL_GPU_MOE_GEMM=1
MP=MLXCEL_GPU_MOE_PAIR=1
run_tests
run_tests $MG $MP
synth_all
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
b 30b-moegemm .gpu/mlxcel qwen3-30b-a3b 1 3 $MG
b 30b-pair .gpu/mlxcel qwen3-30b-a3b 1 3 $MP
b 30b-both .gpu/mlxcel qwen3-30b-a3b 1 3 $MG $MP
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
prof 30b-both .gpu/mlxcel qwen3-30b-a3b 1 $MG $MP
b 30b-b16 .gpu/mlxcel qwen3-30b-a3b 16 1
b 30b-b16-both .gpu/mlxcel qwen3-30b-a3b 16 1 $MG $MP
late "selftest" || { env $MG $MP timeout 120 .gpu/mlxcel selftest --device gpu > "$R/selftest-both.log" 2>&1
  log "selftest $MG $MP rc=$? $(tail -1 "$R/selftest-both.log")"; }
ncu_step 30b-pair qwen3-30b-a3b 1 $MP
ncu_step 30b qwen3-30b-a3b 1
pack
log "end"
