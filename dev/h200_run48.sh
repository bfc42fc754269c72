#!/usr/bin/env bash
# Session 24, after runs 46-47 (H100): paired scales on by default, and x a chunk ahead (XP) only
# where the decode GEMV's grid exceeds one wave of the kernel without it, never for expert rows
# (MLXCEL_GPU_QGEMV_XPF=-1). Run 46's ncu: the 8B's qkv (384 blocks) 14.1 us unpaired, 11.0
# paired (80 registers: 3 blocks per SM, one wave), 13.9 paired + XP (108: 2 per SM); gate_up
# (448 blocks) 38.8, 40.9, 36.9. Prediction: 8B tg128 +4-6 % over the old defaults
# (MLXCEL_GPU_PAIRED_SCALES=0, 343-349 in runs 46-47), 0.6B within +-1 %, 30B +5-7 %, batch 16
# +4-6 %; the same bits in every form. Then llama.cpp beside it (run 47's build failed: the
# repack had dropped a folder its CMakeLists names), as far as the device time lasts.
# Trimmed to ~150 s (the session's device time was nearly spent by refused starts): the new
# defaults' tests first, then the A/B benches, then the old layout's tests and bit comparison.
RUN=48
BUDGET_S=${BUDGET_S:-170}
source dev/h200_lib.sh
for f in mlxcel test_backend_ops; do unxz_to .gpu/$f.xz .gpu/$f; done
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader |
  tee -a "$R/steps.log"
O="MLXCEL_GPU_PAIRED_SCALES=0 MLXCEL_GPU_QGEMV_XPF=0"
run_tests
synth_all
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 8b-old .gpu/mlxcel llama-3.1-8b 1 3 $O
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
b 30b-old .gpu/mlxcel qwen3-30b-a3b 1 3 $O
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
b 0.6b-old .gpu/mlxcel qwen3-0.6b 1 3 $O
b 8b-again .gpu/mlxcel llama-3.1-8b 1 3
b 8b-old-again .gpu/mlxcel llama-3.1-8b 1 3 $O
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 2
late "tests old" || { run_tests $O; same_bits "" "$O"; }
pack
