#!/usr/bin/env bash
# Session 21, second call: the consolidated decode GEMV (the lean kernel of run 41 is now the
# only one-group-per-lane kernel, qgemv_mma_gpl_kernel; the old form, x staging and the knobs
# are deleted). Its loop SASS and registers are run 41's lean kernel's. Check: test_backend_ops
# passes and its ops report has run 41's bits (compared here afterwards); tg128 as run 41's lean.
RUN=42
BUDGET_S=${BUDGET_S:-120}
source dev/h200_lib.sh
for f in mlxcel test_backend_ops; do unxz_to .gpu/$f.xz .gpu/$f; done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$R/steps.log"
run_tests
synth_all
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 2
pack
log "end"
