#!/usr/bin/env bash
# Second H200 call of session 7 (issue 12). Binaries built here, carried in `.gpu`:
#   B  = .gpu/mlxcel-b: b7654f1 (run 13's "B": rolled attention, qgemv one unit/iteration);
#   B2 = .gpu/mlxcel:   + qgemv instruction diet: x row pointers hoisted out of the unit loop (a
#        64-bit division per row and unit), group index by shift, affine 4/8-bit codes to floats
#        by one byte permute each, only 16-byte loads (unaligned operands take the generic path).
# Prediction: 8B gate_up 65 -> <= 45 us, 8B tg128 141 -> >= 165 tok/s.
# Then source-level (SASS) stall samples for one decode attention and one gate_up qgemv.
set -u
OUT=${OUT:-$PWD/out}
R=$OUT/r
mkdir -p "$R"
S=/tmp/mlxcel-synth
mkdir -p "$S"
t0=$SECONDS
log() { echo "[$((SECONDS - t0))s] $*" | tee -a "$R/steps.log"; }
pack() { cp "$OUT/bench.csv" "$R/" 2>/dev/null; tar -C "$OUT" -czf "$OUT/results14.tgz" r; }
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
b b-8b .gpu/mlxcel-b llama-3.1-8b 1 2
b b2-8b .gpu/mlxcel llama-3.1-8b 1 2
b b2-0.6b .gpu/mlxcel qwen3-0.6b 1 2
b b2-30b .gpu/mlxcel qwen3-30b-a3b 1 1
b b2-8b-b16 .gpu/mlxcel llama-3.1-8b 16 1
pack
MLXCEL_GPU_PROFILE=1 timeout 120 .gpu/mlxcel bench -m "$S/llama-3.1-8b" -p 512 -g 128 -r 1 \
  --device gpu > "$R/prof-8b.log" 2>&1
log "profile 8b rc=$?"
sed -n '/device time per op/,$p' "$R/prof-8b.log" | head -12
pack
if command -v ncu > /dev/null; then
  for k in attention_split qgemv; do
    skip=1500
    [ $k = qgemv ] && skip=1501  # a gate_up launch: 4 qgemv per layer + lm_head = 129 per step
    timeout 150 ncu --set full --import-source no -k regex:$k --launch-skip $skip --launch-count 1 \
      -o "$R/ncu-$k" -f .gpu/mlxcel bench -m "$S/llama-3.1-8b" -p 64 -g 32 -r 1 --device gpu \
      > "$R/ncu-$k.log" 2>&1
    log "ncu $k rc=$?"
    ncu -i "$R/ncu-$k.ncu-rep" --page details --print-summary none 2>/dev/null |
      grep -E "qgemv_kernel|attention_split_kernel|Duration|Grid Size|Executed Instructions  |Issued Warp|Achieved Occ" | head -8
    ncu -i "$R/ncu-$k.ncu-rep" --page source --print-source sass --csv > "$R/sass-$k.csv" 2> "$R/sass-$k.err"
    python3 dev/ncu_top_sass.py 28 < "$R/sass-$k.csv" 2>&1 | head -32
  done
fi
pack
log "end"
