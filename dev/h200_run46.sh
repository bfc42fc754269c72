#!/usr/bin/env bash
# Session 23 (written without a GPU: none was lent; the first call of the next session with one):
# (1) run 45's step (dev/h200_run45.sh, never run): bench_gemv_access uncapped (no shared-memory
# cap, so the real GEMV's ~200 KB of L1); (2) paired scales (MLXCEL_GPU_PAIRED_SCALES=1):
# affine weights uploaded as one (scale, bias) array (backend::Matrix::scale_step 2), the
# decode GEMV loading a row's pair of two groups in one instruction instead of four, the SIMT
# qgemv and the GEMM's unit decode one load instead of two; (3) x loaded a chunk ahead in the
# one-set decode GEMV (MLXCEL_GPU_QGEMV_XPF=1). Same binary; both switches are off by default
# until this runs.
# ptxas (sm_90, the 8B's kernel bf16 W2 NP1 NS): 92 registers; paired 80 (3 blocks/SM fit);
# paired + XPF 108; XPF alone 108. Batch 16's (NP2) 104 -> 102 paired.
# Predictions: (1) uncapped, mma+s+x within 10 % of ncu's 38.8 us on gate_up and s-il 8-12 %
# below mma+s+x. (2) tests 24/24 under every switch set, with the default's bits; 8B tg128
# +5-8 % paired (gate_up ~39 -> ~35 us, down ~20 -> ~18.5, lm_head -10 %), 0.6B and 30B +3-5 %,
# batch 16 +2-4 %, prefill within +-2 %; (3) paired + XPF another +3-6 % on the 8B, 0.6B / 30B
# +0-3 % (their GEMVs are short).
# Session 24 adds MLXCEL_GPU_NORM_EARLY_W=1 (same bits; predicted 0.6B +1-3 %, 8B +0-1 %).
RUN=46
BUDGET_S=${BUDGET_S:-440}
source dev/h200_lib.sh
for f in mlxcel test_backend_ops; do unxz_to .gpu/$f.xz .gpu/$f; done
gemv_access
P=MLXCEL_GPU_PAIRED_SCALES=1
X=MLXCEL_GPU_QGEMV_XPF=1
run_tests
run_tests $P
run_tests $P $X
same_bits "" "$P"
same_bits "" "$P $X"
# Session 24: the norm kernels' fp32 weight loaded before the grid wait (a constant).
E=MLXCEL_GPU_NORM_EARLY_W=1
run_tests $E
same_bits "" "$E"
# The op layer's upload under pairing (LinearWeight::upload), end to end against the CPU.
late "selftest" || { env $P $X timeout 100 .gpu/mlxcel selftest --device gpu \
  > "$R/selftest.log" 2>&1; log "selftest paired+xpf rc=$? $(tail -1 "$R/selftest.log")"; }
synth_all
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 8b-paired .gpu/mlxcel llama-3.1-8b 1 3 $P
b 8b-paired-xpf .gpu/mlxcel llama-3.1-8b 1 3 $P $X
b 8b-xpf .gpu/mlxcel llama-3.1-8b 1 3 $X
for m in 0.6b:qwen3-0.6b 30b:qwen3-30b-a3b; do
  b ${m%%:*} .gpu/mlxcel ${m#*:} 1 3
  b ${m%%:*}-paired .gpu/mlxcel ${m#*:} 1 3 $P
  b ${m%%:*}-paired-xpf .gpu/mlxcel ${m#*:} 1 3 $P $X
done
b 0.6b-early .gpu/mlxcel qwen3-0.6b 1 3 $E
b 0.6b-paired-xpf-early .gpu/mlxcel qwen3-0.6b 1 3 $P $X $E
b 8b-early .gpu/mlxcel llama-3.1-8b 1 3 $E
b 0.6b-again .gpu/mlxcel qwen3-0.6b 1 3
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 2
b 8b-b16-paired .gpu/mlxcel llama-3.1-8b 16 2 $P
ncu_counters default "qgemv_mma_gpl_kernel" 4
ncu_counters paired "qgemv_mma_gpl_kernel" 4 $P
ncu_counters paired-xpf "qgemv_mma_gpl_kernel" 4 $P $X
b 8b-again .gpu/mlxcel llama-3.1-8b 1 3
b 8b-paired-again .gpu/mlxcel llama-3.1-8b 1 3 $P
# Session 24 (as above, and): the SIMT qgemv's per-unit layout branch (session 23's review), and where the
# 0.6B's step goes now (its last ncu step table is run 25's).
b 8b-simt .gpu/mlxcel llama-3.1-8b 1 2 MLXCEL_GPU_QGEMV_MMA=0
b 8b-simt-paired .gpu/mlxcel llama-3.1-8b 1 2 MLXCEL_GPU_QGEMV_MMA=0 $P
ncu_step 0.6b qwen3-0.6b 1
ncu_step 0.6b-paired qwen3-0.6b 1 $P
ncu_step 30b-paired qwen3-30b-a3b 1 $P
pack
