#!/usr/bin/env bash
# Session 20, last call: the decode GEMV's mma chains split in two (qgemv_mma.cu's
# MLXCEL_QGEMV_SPLIT=1, a build-time variant .gpu/mlxcel-split of a61377d + the knob; the batch-1
# prefetching form keeps 128 registers, no spills). Run 38: "wait" (fixed-latency dependency)
# and math-pipe stalls were about half the GEMV's stall time; each chunk ran two dependent
# chains of 16 mma.sync. With two accumulators per product the chains are 8 long and four are
# independent. Prediction: GEMV launches 10-15 % faster; 8B tg128 +5-10 %, 0.6B +2-4 %, 30B
# +3-6 %. Other bits (the halves are summed after the chunk): selftest against the CPU checks it.
RUN=39
BUDGET_S=${BUDGET_S:-200}
source dev/h200_lib.sh
for f in mlxcel mlxcel-split; do unxz_to .gpu/$f.xz .gpu/$f; done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$R/steps.log"
synth_all
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 8b-split .gpu/mlxcel-split llama-3.1-8b 1 3
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
b 0.6b-split .gpu/mlxcel-split qwen3-0.6b 1 3
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
b 30b-split .gpu/mlxcel-split qwen3-30b-a3b 1 3
b 8b-again .gpu/mlxcel llama-3.1-8b 1 3
b 8b-split-again .gpu/mlxcel-split llama-3.1-8b 1 3
late "selftest split" || { timeout 60 .gpu/mlxcel-split selftest --device gpu > "$R/selftest-split.log" 2>&1
  log "selftest mlxcel-split rc=$? $(tail -1 "$R/selftest-split.log")"; }
pack
log "end"
