#!/usr/bin/env bash
# First H200 call of session 9 (issue 12): the decode step recorded as a CUDA graph and replayed
# (ops/step_graphs.h), against the same binary with MLXCEL_GPU_GRAPHS=0, plus the kernels' own
# device time of one 8B / 0.6B decode step (ncu gpu__time_duration, no launch gaps).
# Prediction: 0.6B 479 -> >= 750 tok/s, 8B 236 -> >= 255, 30B 175 -> >= 200; b16 1,108 -> >= 1,150.
RUN=24
source dev/h200_lib.sh
run_tests
synth_all
for m in llama-3.1-8b:8b qwen3-0.6b:0.6b qwen3-30b-a3b:30b; do
  b ${m#*:} .gpu/mlxcel ${m%:*} 1 3
  b ${m#*:}-nograph .gpu/mlxcel ${m%:*} 1 3 MLXCEL_GPU_GRAPHS=0
  grep -h "decode graphs" "$R/bench-${m#*:}.log" "$R/bench-${m#*:}-nograph.log"
done
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 1
b 8b-b16-nograph .gpu/mlxcel llama-3.1-8b 16 1 MLXCEL_GPU_GRAPHS=0
for m in llama-3.1-8b qwen3-0.6b; do
  timeout 200 ncu --metrics gpu__time_duration.sum --csv .gpu/mlxcel bench -m "$S/$m" -p 64 \
    -g 2 -r 1 --device gpu > "$R/ncu-step-$m.csv" 2> "$R/ncu-step-$m.err"
  log "ncu step $m rc=$?"
  python3 dev/ncu_step_times.py < "$R/ncu-step-$m.csv" 2>&1 | tee "$R/step-times-$m.txt" | head -16
done
pack
log "end"
