#!/usr/bin/env bash
# Second H200 call of session 8 (issue 12). One binary; A/Bs by switch:
#  - MLXCEL_GPU_ATTN_CHUNK 4 / 8 / 16: keys whose K (then V) loads are in flight together in
#    decode attention (prediction: 16 takes 8B attention 29 -> <= 15 us; 8B tg128 195 -> >= 215).
#  - MLXCEL_GPU_QGEMV_MMA_UNROLL 2 / 24 (2 groups ahead, registers capped for 4 blocks per SM;
#    prediction: 24 spills 48 B of stack and loses).
#  - ncu of the decode qgemv_mma (gate_up, down) and attention_split: where the stalls are.
RUN=19
source dev/h200_lib.sh
run_tests MLXCEL_GPU_ATTN_CHUNK=16
synth_all
b c4-8b .gpu/mlxcel llama-3.1-8b 1 3
b c8-8b .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_ATTN_CHUNK=8
b c16-8b .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_ATTN_CHUNK=16
b u24-8b .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_MMA_UNROLL=24
b c4-0.6b .gpu/mlxcel qwen3-0.6b 1 3
b c16-0.6b .gpu/mlxcel qwen3-0.6b 1 3 MLXCEL_GPU_ATTN_CHUNK=16
pack
prof c16-8b .gpu/mlxcel llama-3.1-8b 1 MLXCEL_GPU_ATTN_CHUNK=16
pack
ncu_k gate_up qgemv_mma 1501 64 32
ncu_k down qgemv_mma 1502 64 32
ncu_k attn4 attention_split 100 512 8
ncu_k attn16 attention_split 100 512 8 MLXCEL_GPU_ATTN_CHUNK=16
pack
log "end"
