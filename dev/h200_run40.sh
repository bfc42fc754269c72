#!/usr/bin/env bash
# Session 20: a speed-of-light measurement, not a candidate. .gpu/mlxcel-noe is the default
# build with the decode GEMV's second mma (against ones: each group's sum of x, for the bias
# term) compiled out (qgemv_mma.cu with `mma<T>(e[q], ones, ...)` under #if !MLXCEL_QGEMV_NO_E,
# built with MLXCEL_QGEMV_NO_E=1; the source change is not committed). Its outputs are wrong
# (the bias term is lost); tok/s is still meaningful because bench decodes exactly 128 tokens.
# Question: how much would computing those sums once (as data) buy at most? Run 38 put ~half
# the GEMV's stalls in the mma pipeline. Prediction: 8B +8-15 %, 0.6B +3-6 %, 30B +4-8 %, batch
# 16 more (its 2-set form drops from 128 to 100 registers).
RUN=40
BUDGET_S=${BUDGET_S:-200}
source dev/h200_lib.sh
for f in mlxcel mlxcel-noe; do unxz_to .gpu/$f.xz .gpu/$f; done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$R/steps.log"
synth_all
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 8b-noe .gpu/mlxcel-noe llama-3.1-8b 1 3
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
b 0.6b-noe .gpu/mlxcel-noe qwen3-0.6b 1 3
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
b 30b-noe .gpu/mlxcel-noe qwen3-30b-a3b 1 3
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 2
b 8b-b16-noe .gpu/mlxcel-noe llama-3.1-8b 16 2
pack
log "end"
