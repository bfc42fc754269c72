#!/usr/bin/env bash
# Session 22: (1) the decode GEMV's weight stream apart from its arithmetic (bench_gemv_access);
# (2) the fill grid (qgemv_mma_fill_kernel: exactly the resident blocks, equal per-warp ranges of
# (tile, chunk) units cut across tile boundaries, cut tiles added through the workspace) against
# the tile grid (MLXCEL_GPU_QGEMV_FILL=0), same binary.
# Reading of runs 35-41: the big 8B GEMVs read ~1.8 TB/s of ~2.95 with ~2 us memory round trips,
# and more requests in flight (L2 prefetch, 256-byte fetches, a cp.async ring) never helped.
# Predictions: (1) row-quad tiled with mma reproduces the GEMV (gate_up 0.60-0.70 of plain); if
# the access pattern is the limit, the tile layout reaches >= 0.85 of plain at the same grid and
# the row layouts stay <= 0.75 at every occupancy; the fill grid gains ~10-15 % on gate_up and
# qkv (1.7 / 1.45 waves at 2 blocks per SM) in any layout. (2) 8B tg128 +5-9 % (gate_up 36 ->
# ~31 us, qkv 10.6 -> ~8.5), 0.6B and 30B +0-2 % (their GEMVs fit one wave; only lm_head and
# the 30B's qkv fill), batch 16 +3-6 %. Tests pass under FILL=1, 0 and 2 (2: every matrix
# the kernel can take, so the small test shapes are cut across tiles too).
RUN=42
BUDGET_S=${BUDGET_S:-300}
source dev/h200_lib.sh
for f in mlxcel test_backend_ops bench_gemv_access; do unxz_to .gpu/$f.xz .gpu/$f; done
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$R/steps.log"
timeout 150 .gpu/bench_gemv_access > "$R/gemv-access.txt" 2>&1
log "bench_gemv_access rc=$?"
run_tests
run_tests MLXCEL_GPU_QGEMV_FILL=2
run_tests MLXCEL_GPU_QGEMV_FILL=0
synth_all
for m in 8b:llama-3.1-8b 0.6b:qwen3-0.6b 30b:qwen3-30b-a3b; do
  b ${m%%:*}-tilegrid .gpu/mlxcel ${m#*:} 1 3 MLXCEL_GPU_QGEMV_FILL=0
  b ${m%%:*} .gpu/mlxcel ${m#*:} 1 3
done
b 8b-b16-tilegrid .gpu/mlxcel llama-3.1-8b 16 2 MLXCEL_GPU_QGEMV_FILL=0
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 2
ncu_counters fill "qgemv_mma_(gpl|fill)_kernel" 4
ncu_counters tilegrid "qgemv_mma_gpl_kernel" 4 MLXCEL_GPU_QGEMV_FILL=0
b 8b-tilegrid-again .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_FILL=0
b 8b-again .gpu/mlxcel llama-3.1-8b 1 3
pack
