#!/usr/bin/env bash
# Fifth H200 call of session 7 (issue 12): the session's final binary (.gpu/mlxcel): run 16's
# plus RMSNorm / add+RMSNorm holding a row in registers (1,024 threads above 2,048 columns)
# instead of one memory round trip per element. Prediction: 8B rms_norm and add_rms_norm
# 15 -> <= 5 us, 8B tg128 155 -> >= 170 tok/s. Results: $OUT/results17.tgz, $OUT/bench.csv.
set -u
OUT=${OUT:-$PWD/out}
R=$OUT/r
mkdir -p "$R"
S=/tmp/mlxcel-synth
mkdir -p "$S"
t0=$SECONDS
log() { echo "[$((SECONDS - t0))s] $*" | tee -a "$R/steps.log"; }
pack() { cp "$OUT/bench.csv" "$R/" 2>/dev/null; tar -C "$OUT" -czf "$OUT/results17.tgz" r; }
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
b() {  # b TAG MODEL BATCH REPEAT
  timeout 150 .gpu/mlxcel bench -m "$S/$2" -p 512 -g 128 -r "$4" --batch "$3" --device gpu \
    --csv "$CSV" > "$R/bench-$1.log" 2>&1
  log "bench $1 rc=$? $(grep -E '^\| (pp|tg)' "$R/bench-$1.log" | tr -s ' ' | tr '\n' ' ')"
}
b 0.6b qwen3-0.6b 1 3
b 8b llama-3.1-8b 1 3
b 30b qwen3-30b-a3b 1 2
b 8b-b16 llama-3.1-8b 16 1
pack
MLXCEL_GPU_PROFILE=1 timeout 120 .gpu/mlxcel bench -m "$S/llama-3.1-8b" -p 512 -g 128 -r 1 \
  --device gpu > "$R/prof-8b.log" 2>&1
log "profile 8b rc=$?"
sed -n '/device time per op/,$p' "$R/prof-8b.log" | head -24
pack
log "end"
