#!/usr/bin/env bash
# First H200 call of session 8 (issue 12). One binary (.gpu/mlxcel); the A/B is the switch
# MLXCEL_GPU_QGEMV_MMA (1: affine 4-bit decode GEMVs on the tensor cores, qgemv_mma.cu; 0: the
# SIMT qgemv of run 17).
# Prediction: 8B gate_up 59 -> <= 25 us, down 35 -> <= 15 us; 8B tg128 168 -> >= 260 tok/s;
# 0.6B 395 -> >= 450; 30B 155 -> >= 200 (expert GEMVs too).
RUN=18
source dev/h200_lib.sh
run_tests
run_tests MLXCEL_GPU_QGEMV_MMA=0
synth_all
b simt-8b .gpu/mlxcel llama-3.1-8b 1 2 MLXCEL_GPU_QGEMV_MMA=0
b mma-8b .gpu/mlxcel llama-3.1-8b 1 3
b mma-8b-u1 .gpu/mlxcel llama-3.1-8b 1 2 MLXCEL_GPU_QGEMV_MMA_UNROLL=1
b mma-8b-u4 .gpu/mlxcel llama-3.1-8b 1 2 MLXCEL_GPU_QGEMV_MMA_UNROLL=4
b mma-0.6b .gpu/mlxcel qwen3-0.6b 1 3
b mma-30b .gpu/mlxcel qwen3-30b-a3b 1 2
b mma-8b-b16 .gpu/mlxcel llama-3.1-8b 16 1
pack
prof mma-8b .gpu/mlxcel llama-3.1-8b 1
prof mma-30b .gpu/mlxcel qwen3-30b-a3b 1
pack
if command -v ncu > /dev/null; then
  timeout 200 ncu --set full -k regex:qgemv_mma_kernel -c 4 -o "$R/ncu-mma" \
    .gpu/mlxcel bench -m "$S/llama-3.1-8b" -p 16 -g 2 -r 1 --device gpu > "$R/ncu.log" 2>&1
  log "ncu rc=$?"
  ncu -i "$R/ncu-mma.ncu-rep" --page details --csv 2>/dev/null | grep -E "Duration|Registers|Achieved Occupancy|DRAM Throughput|Memory Throughput|Issue Slots|Grid Size" | head -40 > "$R/ncu-summary.txt"
  cat "$R/ncu-summary.txt" | head -40
fi
pack
log "end"
