#!/usr/bin/env bash
# Session 16: measurements only (main's binary, d114727), for the 30B decode's next step.
#  - The expert GEMVs' K split: MLXCEL_GPU_QGEMV_TARGET_WARPS 1024 / 4096 / 8192 against 2048.
#    Prediction: within +-3 % (the 8B showed no gain from other targets, run 28).
#  - ncu --set full of the 8-bit router GEMV (qgemv_kernel, 2048 -> 128) and of moe_route in a
#    decode step: why 7.1 / 6.1 us for 262 KB / 128 values (expected: a few blocks only, each
#    walking K alone: low DRAM throughput, long-scoreboard stalls).
RUN=32
BUDGET_S=${BUDGET_S:-300}
source dev/h200_lib.sh
unxz_to .gpu/mlxcel.xz .gpu/mlxcel
synth() { timeout 120 .gpu/mlxcel synth --like qwen3-30b-a3b --quant affine4 --group-size 64 \
  --no-tokenizer --force "$S/qwen3-30b-a3b" > "$R/synth.log" 2>&1; log "synth rc=$?"; }
synth
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
for w in 1024 4096 8192; do
  b 30b-tw$w .gpu/mlxcel qwen3-30b-a3b 1 3 MLXCEL_GPU_QGEMV_TARGET_WARPS=$w
done
k30() {
  local tag=$1 re=$2 skip=$3
  late "ncu $tag" && return
  timeout 150 ncu --set full --import-source no -k "regex:$re" --launch-skip "$skip" \
    --launch-count 1 -o "$R/ncu-$tag" -f .gpu/mlxcel bench -m "$S/qwen3-30b-a3b" -p 8 -g 3 -r 1 \
    --device gpu > "$R/ncu-$tag.log" 2>&1
  log "ncu $tag rc=$?"
  ncu -i "$R/ncu-$tag.ncu-rep" --page details --print-summary none 2>/dev/null |
    grep -E "_kernel|Duration|Grid Size|Block Size|Registers Per|Issued Warp|Achieved Occ|DRAM Throughput|Mem Busy|Waves Per SM|One or More|No Eligible" |
    head -16 | tee "$R/ncu-$tag-summary.txt"
  rm -f "$R/ncu-$tag.ncu-rep"
}
# Skip the warm-up's and prefill's launches: the 200th router launch lies in a decode step.
k30 router qgemv_kernel 200
k30 route moe_route_kernel 200
pack
log "end"
