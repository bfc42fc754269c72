#!/usr/bin/env bash
# Session 24, after runs 46-47 (H100), for the next session's first call (this session's device
# time was spent by refused starts before it could run): paired scales on by default, and x a
# chunk ahead (XP) only where the decode GEMV's grid exceeds one wave of the kernel without it,
# never for expert rows (MLXCEL_GPU_QGEMV_XPF=-1). Run 46's ncu: the 8B's qkv (384 blocks) 14.1
# us unpaired, 11.0 paired (80 registers: 3 blocks per SM, one wave), 13.9 paired + XP (108: 2
# per SM); gate_up (448 blocks) 38.8, 40.9, 36.9.
# Prediction against the old defaults ("old": unpaired, no XP; 343-349 tok/s on the 8B in runs
# 46-47): 8B tg128 +3-6 % (~356 from the bench rows: paired + XP's 347.6 less ~70 us per step
# for qkv, o and down without XP; ~365 from ncu's per-launch times), 0.6B within +-1 %, 30B
# +5-7 %, batch 16 +4-6 %, 8B prefill +4 %; the same bits in every case (every form computes
# the same arithmetic).
# Then the peers: dev/h200_run49.sh in the next call, back to back (the machine stays warm 30 s).
RUN=48
BUDGET_S=${BUDGET_S:-420}
source dev/h200_lib.sh
for f in mlxcel test_backend_ops; do unxz_to .gpu/$f.xz .gpu/$f; done
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader |
  tee -a "$R/steps.log"
O="MLXCEL_GPU_PAIRED_SCALES=0 MLXCEL_GPU_QGEMV_XPF=0"
run_tests
run_tests $O
run_tests MLXCEL_GPU_QGEMV_XPF=1
run_tests MLXCEL_GPU_QGEMV_MMA=0
same_bits "" "$O"
same_bits "" "MLXCEL_GPU_QGEMV_XPF=1"
# The MoE routing from registers (MLXCEL_GPU_MOE_ROUTE_HELD=1, written in session 24 after run
# 47: one warp max of a 32-bit key per choice instead of a shared-memory scan and a two-shuffle
# butterfly). Prediction: the same bits; moe_route 6.2 -> <= 4 us under ncu, 30B +2-4 %.
H=MLXCEL_GPU_MOE_ROUTE_HELD=1
run_tests $H
same_bits "" "$H"
late "selftest" || { timeout 100 .gpu/mlxcel selftest --device gpu > "$R/selftest.log" 2>&1;
  log "selftest rc=$? $(tail -1 "$R/selftest.log")"; }
synth_all
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 8b-old .gpu/mlxcel llama-3.1-8b 1 3 $O
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
b 30b-old .gpu/mlxcel qwen3-30b-a3b 1 3 $O
b 30b-held .gpu/mlxcel qwen3-30b-a3b 1 3 $H
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
b 0.6b-old .gpu/mlxcel qwen3-0.6b 1 3 $O
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 2
b 8b-b16-old .gpu/mlxcel llama-3.1-8b 16 2 $O
b 8b-again .gpu/mlxcel llama-3.1-8b 1 3
b 8b-old-again .gpu/mlxcel llama-3.1-8b 1 3 $O
b 0.6b-again .gpu/mlxcel qwen3-0.6b 1 3
b 0.6b-old-again .gpu/mlxcel qwen3-0.6b 1 3 $O
ncu_counters default "qgemv_mma_gpl_kernel" 5
ncu_step 8b llama-3.1-8b 1
b 30b-again .gpu/mlxcel qwen3-30b-a3b 1 3
b 30b-held-again .gpu/mlxcel qwen3-30b-a3b 1 3 $H
ncu_step 30b-held qwen3-30b-a3b 1 $H
pack
