#!/usr/bin/env bash
# Written in session 12 after run 26 (an H100; see dev/NOTES.md); session 12 had no device time
# left to run it, so run it first next session. Against run 25's binary (.gpu/mlxcel-base.xz)
# the default build has: the decoder fusions for steps of up to 64 tokens (o / down / MoE
# combine add into the residual in their epilogue; run 26: 0.6B +5 %, 30B +5 %, 8B +0.5 %) and
# the unfused form above 64 (run 26's prefill lost 5-9 % to the GEMM epilogue's residual read;
# prediction: prefill back to base), the one-pass greedy sampler on by default (run 26: 75 -> 35
# us), qgemv_bulk and the grouped attention removed (run 26: 0.6x and 0.9x).
# MLXCEL_GPU_QGEMV_MMA_PREFETCH=1: the group-per-lane GEMV loads each lane's next chunk (codes and
# scale words) before computing the current one: twice the bytes in flight per warp, 84 -> 128
# registers (3 -> 2 blocks per SM) at one row. Prediction: 8B +8 % (gate_up -15 %), 0.6B +3 %.
# MLXCEL_GPU_ATTN_PREFETCH=1: decode attention's warps load their 8 K and 8 V slices at once (one
# round trip instead of four; bits unchanged). Prediction: attention 11.7 -> <= 9 us per 8B
# layer, 0.6B +3 %.
# Then data for the next GEMV design: the warp target 8192 instead of 2048 and one warp per tile
# on the 8B, and ncu --set full of the group-per-lane GEMV on gate_up and down with their SASS.
# Steps run in priority order until BUDGET_S seconds (SKIP_BASE=1 drops the base binary's rows).
RUN=27
BUDGET_S=${BUDGET_S:-300}
source dev/h200_lib.sh
unxz_to() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2" && chmod +x "$2"; }
unxz_to .gpu/mlxcel-base.xz /tmp/mlxcel-base
unxz_to .gpu/test_backend_ops.xz .gpu/test_backend_ops
PF=MLXCEL_GPU_QGEMV_MMA_PREFETCH=1
APF=MLXCEL_GPU_ATTN_PREFETCH=1
run_tests
run_tests $PF
run_tests $APF
synth_all
# In priority order: whatever passes BUDGET_S seconds is skipped (the call's limit).
for m in llama-3.1-8b:8b qwen3-0.6b:0.6b qwen3-30b-a3b:30b; do
  b ${m#*:} .gpu/mlxcel ${m%:*} 1 3
  [ -z "${SKIP_BASE:-}" ] && b ${m#*:}-base /tmp/mlxcel-base ${m%:*} 1 3
  b ${m#*:}-pf .gpu/mlxcel ${m%:*} 1 3 $PF
  [ ${m#*:} != 30b ] && b ${m#*:}-apf .gpu/mlxcel ${m%:*} 1 3 $APF
done
ncu_step 8b llama-3.1-8b 1
ncu_step 8b-pf-apf llama-3.1-8b 1 $PF $APF
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 1
b 8b-b16-pf .gpu/mlxcel llama-3.1-8b 16 1 $PF
b 8b-tw8192 .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_TARGET_WARPS=8192
b 8b-ks1 .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_QGEMV_MMA_KS=1
if ! late selftest; then
  timeout 120 .gpu/mlxcel selftest --device gpu > "$R/selftest.log" 2>&1
  log "selftest rc=$? $(tail -1 "$R/selftest.log")"
fi
# One decode step's gate_up and down (a 64-token prefill also runs the GEMV: 129 launches).
ncu_k gpl-gate_up qgemv_mma_gpl 131 64 4
ncu_k gpl-down qgemv_mma_gpl 132 64 4
pack
log "end"
