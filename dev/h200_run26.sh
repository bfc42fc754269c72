#!/usr/bin/env bash
# Session 11's H200 call, written without a device (issue 12); run it first next session. Against
# run 25's binary (.gpu/mlxcel-base.xz, the code of 6287af8) the new one has:
#  - decoder fusions on by default (CPU-checked: conformance and refactor parity): o / down /
#    the MoE combine add into the residual stream in their epilogue (accumulate) and every input
#    norm is part of the projection that reads it (norm_linear: with the bulk kernel off, a plain
#    rms_norm launch before the GEMV). Prediction, default switches: 8B 286 -> 286-295 (the
#    delta reads go; the launch count is unchanged), 0.6B 719 -> 720-740, 30B 244 -> 244-255.
#  - MLXCEL_GPU_QGEMV_BULK=1: qgemv_bulk (1-2 rows, sm_90), the gpl GEMV's arithmetic with the
#    weights and scales streamed by cp.async.bulk into per-warp 3-stage rings, one resident block
#    per SM, L2 evict-first weights; with it the input norm runs in the GEMV's prologue
#    (MLXCEL_GPU_FUSED_NORM=0 keeps the separate norm, to split the two effects). Run 25: GEMV
#    70 % of the 8B step at ~1.6 TB/s, add_rms_norm 12 %. Prediction (all on): 8B -> >= 380
#    tok/s (GEMV -35 %, no norm launches), 0.6B -> >= 850, 30B -> >= 280 (its experts keep gpl).
#    It also takes 3-64 rows (8 per block, each stage reused by 4 row pairs; K = 14,336 keeps
#    gpl): 8B batch 16 1,242 -> >= 2,000 tok/s. With it the FFN's gate_up runs norm + SwiGLU in
#    its epilogue (MLXCEL_GPU_FUSED_GATED=0 splits that off); MLXCEL_GPU_QGEMV_BULK_STAGES=2|4
#    against the default 3.
#  - MLXCEL_GPU_SAMPLE_FAST=1: the sampler's one-pass greedy path, 75 -> <= 10 us.
#  - rms_norm kernels load their weight with the row (on by default; -1 DRAM round trip).
#  - MLXCEL_GPU_ATTN_GROUP=1 (added in session 12): decode's split attention one block per span
#    and group of query heads of one KV head (K and V read once per group, not once per head),
#    bit-identical per head. Prediction: attention 11.5 -> <= 8 us per 8B layer, 8B +2-4 %.
# New tests: LinearFusions (fused == unfused bit for bit, close to the CPU), the MoE combine's
# accumulate, plain-greedy sampler rows; selftest "linear fusions".
RUN=26
source dev/h200_lib.sh
unxz_to() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2" && chmod +x "$2"; }
unxz_to .gpu/mlxcel-base.xz /tmp/mlxcel-base
unxz_to .gpu/test_backend_ops.xz .gpu/test_backend_ops
ALL="MLXCEL_GPU_QGEMV_BULK=1 MLXCEL_GPU_SAMPLE_FAST=1"
run_tests
run_tests $ALL
run_tests $ALL MLXCEL_GPU_FUSED_GATED=0 MLXCEL_GPU_QGEMV_BULK_STAGES=2
run_tests MLXCEL_GPU_ATTN_GROUP=1
timeout 120 .gpu/mlxcel selftest --device gpu > "$R/selftest.log" 2>&1
log "selftest rc=$? $(tail -1 "$R/selftest.log")"
env $ALL timeout 120 .gpu/mlxcel selftest --device gpu > "$R/selftest-all.log" 2>&1
log "selftest (all on) rc=$? $(tail -1 "$R/selftest-all.log")"
synth_all
for m in llama-3.1-8b:8b qwen3-0.6b:0.6b qwen3-30b-a3b:30b; do
  b ${m#*:} .gpu/mlxcel ${m%:*} 1 3
  b ${m#*:}-all .gpu/mlxcel ${m%:*} 1 3 $ALL
  b ${m#*:}-bulk-nofuse .gpu/mlxcel ${m%:*} 1 3 $ALL MLXCEL_GPU_FUSED_NORM=0 MLXCEL_GPU_FUSED_GATED=0
  b ${m#*:}-base /tmp/mlxcel-base ${m%:*} 1 3
done
G=MLXCEL_GPU_ATTN_GROUP=1
b 8b-allg .gpu/mlxcel llama-3.1-8b 1 3 $ALL $G
b 0.6b-allg .gpu/mlxcel qwen3-0.6b 1 3 $ALL $G
b 30b-allg .gpu/mlxcel qwen3-30b-a3b 1 3 $ALL $G
b 8b-all-s2 .gpu/mlxcel llama-3.1-8b 1 3 $ALL MLXCEL_GPU_QGEMV_BULK_STAGES=2
b 8b-all-s4 .gpu/mlxcel llama-3.1-8b 1 3 $ALL MLXCEL_GPU_QGEMV_BULK_STAGES=4
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 1
b 8b-b16-all .gpu/mlxcel llama-3.1-8b 16 1 $ALL
ncu_step 8b-all llama-3.1-8b 1 $ALL
ncu_step 8b-allg llama-3.1-8b 1 $ALL $G
ncu_step 0.6b-allg qwen3-0.6b 1 $ALL $G
ncu_step 30b-allg qwen3-30b-a3b 1 $ALL $G
# One decode step's gate_up and down (129 bulk launches per 8B step: skip the first step).
ncu_k bulk-gate_up qgemv_bulk 131 64 4 $ALL
ncu_k bulk-down qgemv_bulk 132 64 4 $ALL
# Decode attention at the bench's context (~520 positions, 9 spans): 11 us per launch in run 25
# even at 65 positions; where its time goes (latency chain or bandwidth) decides the next change.
ncu_k attn-split attention_split 40 512 4
pack
log "end"
