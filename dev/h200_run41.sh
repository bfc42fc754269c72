#!/usr/bin/env bash
# Session 21, first call: the lean decode GEMV (qgemv_mma_lean_kernel) against
# qgemv_mma_gpl_kernel, same binary: MLXCEL_GPU_QGEMV_LEAN=1 (the default in this build), 0 (the
# old kernel), 2 (lean with x staged in shared memory). The SASS of the old loop has 462
# instructions per chunk for 32 mma (run 38's counters: 13.1 M instructions for gate_up's 66 MB,
# issue active 45 %: issue-bound, not memory-bound); lean has 255 (one LOP3 per code pair,
# 32-bit indices off fixed row bases, inline scale decode, two alternating register sets) and 92
# registers instead of 128; lean 2 has 212 (x in the mma's B order in shared memory: no PRMT,
# predicate or zeroing per word; a copy after the wait). Same products in the same order: the
# ops reports must show identical bits. Lean 3: lean 2 whose copy also sums x per group (fp32),
# read in place of the second mma against ones (195 instructions and 16 mma per chunk; other
# bits, so the tests judge it against the CPU, and run 40 bounds its gain at ~5 % on the 8B).
# .gpu/mlxcel-minb3: lean's forms built for 3 blocks per
# SM (80 registers; its 2-set form spills, so no batch 16 on it).
# Prediction: lean 8B tg128 +12-25 % (336 -> 380-420), 0.6B +3-8 %, 30B +5-12 %, batch 16
# +5-10 %; lean 2 a further +3-8 % on the 8B, lean 3 +3-5 % over lean 2; minb3 +0-8 % unless its small spill costs more.
RUN=41
BUDGET_S=${BUDGET_S:-200}
source dev/h200_lib.sh
for f in mlxcel mlxcel-minb3 test_backend_ops; do unxz_to .gpu/$f.xz .gpu/$f; done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$R/steps.log"
run_tests
run_tests MLXCEL_GPU_QGEMV_LEAN=0
run_tests MLXCEL_GPU_QGEMV_LEAN=3
same_bits "" MLXCEL_GPU_QGEMV_LEAN=0
synth_all
for m in 8b:llama-3.1-8b 0.6b:qwen3-0.6b 30b:qwen3-30b-a3b; do
  b ${m%%:*}-lean0 .gpu/mlxcel ${m#*:} 1 3 MLXCEL_GPU_QGEMV_LEAN=0
  b ${m%%:*} .gpu/mlxcel ${m#*:} 1 3
  b ${m%%:*}-lean3 .gpu/mlxcel ${m#*:} 1 3 MLXCEL_GPU_QGEMV_LEAN=3
done
b 8b-b16-lean0 .gpu/mlxcel llama-3.1-8b 16 2 MLXCEL_GPU_QGEMV_LEAN=0
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 2
b 8b-lean2 .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_LEAN=2
b 8b-minb3-lean3 .gpu/mlxcel-minb3 llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_LEAN=3
b 8b-lean0-again .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_LEAN=0
b 8b-lean3-again .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_LEAN=3
ncu_counters lean3 "qgemv_mma_lean_kernel" 4 MLXCEL_GPU_QGEMV_LEAN=3
ncu_counters old "qgemv_mma_gpl_kernel" 4 MLXCEL_GPU_QGEMV_LEAN=0
ncu_step 8b llama-3.1-8b 1
late "selftest" || { MLXCEL_GPU_QGEMV_LEAN=3 timeout 100 .gpu/mlxcel selftest --device gpu \
  > "$R/selftest.log" 2>&1; log "selftest LEAN=3 rc=$? $(tail -1 "$R/selftest.log")"; }
pack
log "end"
