#!/usr/bin/env bash
# Session 20, second call: the decode GEMV's code-word loads with L2 fetch-size hints, as
# build-time variants of the same commit (qgemv_mma.cu's MLXCEL_QGEMV_LDHINT; docs/development.md
# says how they are built): .gpu/mlxcel-h2 `ld.global.nc.L2::256B` (a miss fetches 256 bytes, so
# a row's next chunk arrives with this one), .gpu/mlxcel-h3 that with L1::no_allocate. Run 35:
# software L2 prefetch (prefetch.global.L2) lost 14 % on the 8B, so more requests are not the
# answer; this asks for the same lines in fewer, larger DRAM requests with no extra instruction.
# Registers: 128 for the batch-1 forms in all three builds (held there by launch bounds in the
# hinted ones). Prediction: h2 8B tg128 +3-8 %, 0.6B +1-3 %, 30B +2-5 %; h3 within 1 % of h2.
# Also the defaults once more (run 35's greedy sampling in parts is now on by default).
RUN=36
BUDGET_S=${BUDGET_S:-330}
source dev/h200_lib.sh
for f in mlxcel mlxcel-h2 mlxcel-h3 test_backend_ops; do unxz_to .gpu/$f.xz .gpu/$f; done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$R/steps.log"
run_tests
synth_all
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 8b-h2 .gpu/mlxcel-h2 llama-3.1-8b 1 3
b 8b-h3 .gpu/mlxcel-h3 llama-3.1-8b 1 3
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
b 0.6b-h2 .gpu/mlxcel-h2 qwen3-0.6b 1 3
b 0.6b-h3 .gpu/mlxcel-h3 qwen3-0.6b 1 3
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
b 30b-h2 .gpu/mlxcel-h2 qwen3-30b-a3b 1 3
b 30b-h3 .gpu/mlxcel-h3 qwen3-30b-a3b 1 3
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 2
b 8b-b16-h2 .gpu/mlxcel-h2 llama-3.1-8b 16 2
b 8b-again .gpu/mlxcel llama-3.1-8b 1 3
b 8b-h2-again .gpu/mlxcel-h2 llama-3.1-8b 1 3
b 0.6b-again .gpu/mlxcel qwen3-0.6b 1 3
b 0.6b-h2-again .gpu/mlxcel-h2 qwen3-0.6b 1 3
late "selftest h2" || { timeout 60 .gpu/mlxcel-h2 selftest --device gpu > "$R/selftest-h2.log" 2>&1
  log "selftest mlxcel-h2 rc=$? $(tail -1 "$R/selftest-h2.log")"; }
late "selftest" || { timeout 60 .gpu/mlxcel selftest --device gpu > "$R/selftest.log" 2>&1
  log "selftest rc=$? $(tail -1 "$R/selftest.log")"; }
pack
log "end"
