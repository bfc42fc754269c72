#!/usr/bin/env bash
# Fourth H200 call of session 7 (issue 12). Binaries built here, carried in `.gpu`:
#   3a = .gpu/mlxcel-3a: run 15's 3a (KV pool layer-major, qgemv instruction diet);
#   4  = .gpu/mlxcel:    + attention loads unconditional (clamped), so a chunk's K (then V) loads
#        are in flight together (run 15's SASS: predicated loads reused one register, each load
#        waited for the one before), qgemv back to one unit per iteration (no prefetch).
# Prediction: decode attention 43 -> <= 15 us per launch; 0.6B tg128 348 -> >= 480 tok/s.
set -u
OUT=${OUT:-$PWD/out}
R=$OUT/r
mkdir -p "$R"
S=/tmp/mlxcel-synth
mkdir -p "$S"
t0=$SECONDS
log() { echo "[$((SECONDS - t0))s] $*" | tee -a "$R/steps.log"; }
pack() { cp "$OUT/bench.csv" "$R/" 2>/dev/null; tar -C "$OUT" -czf "$OUT/results16.tgz" r; }
export MLXCEL_REQUIRE_GPU=1
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
b 3a-0.6b .gpu/mlxcel-3a qwen3-0.6b 1 2
b 4-0.6b .gpu/mlxcel qwen3-0.6b 1 3
b 3a-8b .gpu/mlxcel-3a llama-3.1-8b 1 2
b 4-8b .gpu/mlxcel llama-3.1-8b 1 3
b 4-30b .gpu/mlxcel qwen3-30b-a3b 1 2
b 4-8b-b16 .gpu/mlxcel llama-3.1-8b 16 1
pack
for m in llama-3.1-8b qwen3-0.6b qwen3-30b-a3b; do
  MLXCEL_GPU_PROFILE=1 timeout 120 .gpu/mlxcel bench -m "$S/$m" -p 512 -g 128 -r 1 \
    --device gpu > "$R/prof-$m.log" 2>&1
  log "profile $m rc=$?"
  sed -n '/device time per op/,$p' "$R/prof-$m.log" | head -10
done
MLXCEL_GPU_PROFILE=1 timeout 120 .gpu/mlxcel bench -m "$S/llama-3.1-8b" -p 512 -g 128 -r 1 \
  --batch 16 --device gpu > "$R/prof-8b-b16.log" 2>&1
log "profile 8b b16 rc=$?"
sed -n '/device time per op/,$p' "$R/prof-8b-b16.log" | head -10
pack
log "end"
