#!/usr/bin/env bash
# First H200 call of session 7 (issue 12). Two binaries built here and carried in `.gpu`:
#   A = .gpu/mlxcel-a: main at ea23f01 (run 12's kernels, whose results were lost) + the f16
#       conversion fix;
#   B = .gpu/mlxcel:   attention with rolled key loops (35 KB of SASS instead of 55 KB; the
#       hypothesis: a decode launch runs each block once, so cold instruction fetch dominates),
#       qgemv back to one unit per iteration and run 11's ksplit thresholds.
# Then per-op device time and ncu stall reasons for one gate_up qgemv and one decode attention.
# Results: $OUT/results13.tgz (r/steps.log first), $OUT/bench.csv.
set -u
OUT=${OUT:-$PWD/out}
R=$OUT/r
mkdir -p "$R"
S=/tmp/mlxcel-synth
mkdir -p "$S"
t0=$SECONDS
log() { echo "[$((SECONDS - t0))s] $*" | tee -a "$R/steps.log"; }
pack() { cp "$OUT/bench.csv" "$R/" 2>/dev/null; tar -C "$OUT" -czf "$OUT/results13.tgz" r; }
export MLXCEL_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> "$R/steps.log"
timeout 120 .gpu/test_backend_ops --gtest_color=no > "$R/test_backend_ops.log" 2>&1
log "test_backend_ops rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$R/test_backend_ops.log" | tr '\n' ' ')"
grep -E "Failure|differs|actual" "$R/test_backend_ops.log" | head -10
for shape in qwen3-0.6b llama-3.1-8b qwen3-30b-a3b; do
  timeout 120 .gpu/mlxcel synth --like $shape --quant affine4 --group-size 64 --no-tokenizer --force \
    "$S/$shape" > "$R/synth-$shape.log" 2>&1
  log "synth $shape rc=$?"
done
CSV=$OUT/bench.csv
b() {  # b TAG BINARY MODEL BATCH REPEAT [ENV...]
  local tag=$1 bin=$2 model=$3 batch=$4 rep=$5
  shift 5
  env "$@" timeout 150 "$bin" bench -m "$S/$model" -p 512 -g 128 -r "$rep" --batch "$batch" \
    --device gpu --csv "$CSV" > "$R/bench-$tag.log" 2>&1
  log "bench $tag rc=$? $(grep -E '^\| (pp|tg)' "$R/bench-$tag.log" | tr -s ' ' | tr '\n' ' ')"
}
b a-0.6b .gpu/mlxcel-a qwen3-0.6b 1 2
b b-0.6b .gpu/mlxcel qwen3-0.6b 1 2
b a-8b .gpu/mlxcel-a llama-3.1-8b 1 2
b b-8b .gpu/mlxcel llama-3.1-8b 1 2
b b-8b-ks1 .gpu/mlxcel llama-3.1-8b 1 1 MLXCEL_GPU_QGEMV_KSPLIT=1
b b-8b-ks2 .gpu/mlxcel llama-3.1-8b 1 1 MLXCEL_GPU_QGEMV_KSPLIT=2
b b-30b .gpu/mlxcel qwen3-30b-a3b 1 1
b b-8b-b16 .gpu/mlxcel llama-3.1-8b 16 1
pack
for m in qwen3-0.6b llama-3.1-8b; do
  MLXCEL_GPU_PROFILE=1 timeout 120 .gpu/mlxcel bench -m "$S/$m" -p 512 -g 128 -r 1 --device gpu \
    > "$R/prof-$m.log" 2>&1
  log "profile $m rc=$?"
  sed -n '/device time per op/,$p' "$R/prof-$m.log" | head -24
done
pack
if command -v ncu > /dev/null; then
  for k in attention_split qgemv; do
    timeout 120 ncu --kernel-name regex:$k --launch-skip 1500 --launch-count 2 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
      --section LaunchStats --section InstructionStats \
      .gpu/mlxcel bench -m "$S/llama-3.1-8b" -p 64 -g 32 -r 1 --device gpu > "$R/ncu-$k.log" 2>&1
    log "ncu $k rc=$?"
    grep -E "qgemv_kernel|attention_split_kernel|Duration|Memory Throughput|DRAM Through|Registers|Grid Size|Achieved Occ|Theoretical Occ|Stall|Issued Warp|No Eligible|Executed Ipc A|Warp Cycles Per Issued|Avg. Active" \
      "$R/ncu-$k.log" | head -40
  done
fi
pack
log "end"
