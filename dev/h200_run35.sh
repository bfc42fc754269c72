#!/usr/bin/env bash
# Session 20: two changes against their old forms, same binary, same call.
#  1. MLXCEL_GPU_QGEMV_L2PF=D (default 0 until measured): the decode GEMV (one group per lane)
#     asks L2 for each warp's weight lines D chunks ahead (prefetch.global.L2, no registers held),
#     its first D chunks before the PDL wait. Run 34's ncu step put the 8B's GEMVs at 1.0 (qkv),
#     0.9 (o), 1.8 (gate_up) and 1.7 (down) TB/s against ~3.0 of copy bandwidth: latency-bound,
#     too few bytes in flight per SM (one register-prefetched chunk, 2 KiB per warp). Prediction:
#     D = 8: 8B tg128 +5-12 % (334 -> 350-375), 0.6B +3-8 %, 30B +3-8 %; D = 4 less, D = 16-32
#     no better than 8 (L2 holds the lines either way). The same bits (hints only).
#  2. Greedy sampling over many SMs (default on; MLXCEL_GPU_SAMPLE_PARTS=0 is the old one-block
#     pass): sample_parts_kernel scans 4,096-logit slices, sample_kernel combines them. Run 34:
#     sample_kernel 54-60 us per step under ncu. Prediction: ~5 us; 8B +1.5 %, 0.6B +4-5 %, 30B
#     +1.5 %. Same tokens.
RUN=35
BUDGET_S=${BUDGET_S:-470}
source dev/h200_lib.sh
unxz_to .gpu/mlxcel.xz .gpu/mlxcel
unxz_to .gpu/test_backend_ops.xz .gpu/test_backend_ops
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$R/steps.log"
run_tests
run_tests MLXCEL_GPU_QGEMV_L2PF=8
run_tests MLXCEL_GPU_SAMPLE_PARTS=0
same_bits "" MLXCEL_GPU_QGEMV_L2PF=8
same_bits "" MLXCEL_GPU_SAMPLE_PARTS=0
synth_all
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 8b-parts0 .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_SAMPLE_PARTS=0
b 8b-l2pf8 .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_L2PF=8
b 8b-l2pf4 .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_L2PF=4
b 8b-l2pf16 .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_L2PF=16
b 8b-l2pf32 .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_L2PF=32
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
b 0.6b-parts0 .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_SAMPLE_PARTS=0
b 0.6b-l2pf8 .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_QGEMV_L2PF=8
b 0.6b-l2pf4 .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_QGEMV_L2PF=4
b 0.6b-l2pf16 .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_QGEMV_L2PF=16
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
b 30b-parts0 .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_SAMPLE_PARTS=0
b 30b-l2pf8 .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_QGEMV_L2PF=8
b 30b-l2pf16 .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_QGEMV_L2PF=16
ncu_step 8b-l2pf8 llama-3.1-8b 1 MLXCEL_GPU_QGEMV_L2PF=8
ncu_step 8b llama-3.1-8b 1
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 2
b 8b-b16-l2pf8 .gpu/mlxcel llama-3.1-8b 16 2 MLXCEL_GPU_QGEMV_L2PF=8
# Repeats (noise), after the comparisons.
b 8b-again .gpu/mlxcel llama-3.1-8b 1 3
b 8b-l2pf8-again .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_L2PF=8
b 8b-parts0-again .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_SAMPLE_PARTS=0
b 0.6b-again .gpu/mlxcel qwen3-0.6b 1 3
b 0.6b-parts0-again .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_SAMPLE_PARTS=0
b 30b-again .gpu/mlxcel qwen3-30b-a3b 1 3
b 30b-l2pf8-again .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_QGEMV_L2PF=8
ncu_step 30b-l2pf8 qwen3-30b-a3b 1 MLXCEL_GPU_QGEMV_L2PF=8
late "selftest" || { env MLXCEL_GPU_QGEMV_L2PF=8 timeout 100 .gpu/mlxcel selftest --device gpu \
  > "$R/selftest-l2pf8.log" 2>&1
  log "selftest QGEMV_L2PF=8 rc=$? $(tail -1 "$R/selftest-l2pf8.log")"; }
pack
log "end"
