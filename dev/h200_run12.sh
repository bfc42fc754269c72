#!/usr/bin/env bash
# Third H200 call of session 6 (issue 12): attention with the span's row offsets looked up once
# and a warp's K/V loads all in flight, qgemv with >= 4 units per lane, two units per iteration
# and 16-byte weight loads, the sampler at 1,024 threads; per-op device time and ncu metrics again.
# Carry `.gpu` (mlxcel, test_backend_ops built here). Results: $OUT/results12.tgz, $OUT/bench.csv.
set -u
OUT=${OUT:-$PWD/out}
R=$OUT/r
mkdir -p "$R"
S=/tmp/mlxcel-synth
mkdir -p "$S"
NEW=.gpu/mlxcel
t0=$SECONDS
log() { echo "[$((SECONDS - t0))s] $*" | tee -a "$R/steps.log"; }
pack() { cp "$OUT/bench.csv" "$R/" 2>/dev/null; tar -C "$OUT" -czf "$OUT/results12.tgz" r; }
export MLXCEL_REQUIRE_GPU=1
timeout 120 .gpu/test_backend_ops --gtest_color=no > "$R/test_backend_ops.log" 2>&1
log "test_backend_ops rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$R/test_backend_ops.log" | tr '\n' ' ')"
grep -E "Failure|differs|actual" "$R/test_backend_ops.log" | head -10
for shape in qwen3-0.6b llama-3.1-8b qwen3-30b-a3b; do
  timeout 120 $NEW synth --like $shape --quant affine4 --group-size 64 --no-tokenizer --force "$S/$shape" \
    > "$R/synth-$shape.log" 2>&1
  log "synth $shape rc=$?"
done
CSV=$OUT/bench.csv
b() {  # b TAG MODEL BATCH REPEAT GEN [ENV...]
  local tag=$1 model=$2 batch=$3 rep=$4 gen=$5
  shift 5
  env "$@" timeout 200 $NEW bench -m "$S/$model" -p 512 -g "$gen" -r "$rep" --batch "$batch" --device gpu \
    --csv "$CSV" > "$R/bench-$tag.log" 2>&1
  log "bench $tag rc=$? $(grep -E '^\| (pp|tg)' "$R/bench-$tag.log" | tr -s ' ' | tr '\n' ' ')"
}
b 0.6b qwen3-0.6b 1 3 128
b 8b llama-3.1-8b 1 3 128
b 8b-b16 llama-3.1-8b 16 2 128
b 30b qwen3-30b-a3b 1 2 128
pack
for m in qwen3-0.6b llama-3.1-8b qwen3-30b-a3b; do
  MLXCEL_GPU_PROFILE=1 timeout 200 $NEW bench -m "$S/$m" -p 512 -g 128 -r 1 --device gpu > "$R/prof-$m.log" 2>&1
  log "profile $m rc=$?"
  sed -n '/device time per op/,$p' "$R/prof-$m.log" | head -24
done
MLXCEL_GPU_PROFILE=1 timeout 200 $NEW bench -m "$S/llama-3.1-8b" -p 512 -g 128 -r 1 --batch 16 --device gpu > "$R/prof-8b-b16.log" 2>&1
log "profile 8b b16 rc=$?"
sed -n '/device time per op/,$p' "$R/prof-8b-b16.log" | head -16
pack
if command -v ncu > /dev/null; then
  timeout 150 ncu --kernel-name regex:'qgemv|attention_split' --launch-skip 2000 --launch-count 16 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size \
    $NEW bench -m "$S/llama-3.1-8b" -p 64 -g 32 -r 1 --device gpu > "$R/ncu-8b.log" 2>&1
  log "ncu rc=$?"
  grep -E "qgemv|attention|duration|dram__|warps_active|grid_size|registers" "$R/ncu-8b.log" | head -80
fi
pack
log "end"
