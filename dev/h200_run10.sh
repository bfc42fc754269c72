#!/usr/bin/env bash
# One H200 call for issue 12 (session 6): binaries built here (scripts/gpu-test.sh build, then
# copied into .gpu/: mlxcel, mlxcel-base = main before the change, test_backend_ops), carried as
# `.gpu`. Conformance + invariance tests, selftest, then pp512/tg128 benchmarks of the new build
# against the base build in the same session, A/B switches, and a per-kernel profile of 8B decode.
# Results: $OUT/results10.tgz (logs) and $OUT/bench.csv.
set -u
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT/r"
R=$OUT/r
S=/tmp/mlxcel-synth
mkdir -p "$S"
NEW=.gpu/mlxcel
BASE=.gpu/mlxcel-base
t0=$SECONDS
log() { echo "[$((SECONDS - t0))s] $*" | tee -a "$R/steps.log"; }
pack() { tar -C "$OUT" -czf "$OUT/results10.tgz" r; }
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  ldd $NEW | grep -i "not found" || echo "ldd: all libraries found"
  $NEW --version
  $NEW devices
  which nsys ncu || true
} > "$R/machine.txt" 2>&1
cat "$R/machine.txt"
export MLXCEL_REQUIRE_GPU=1
log "test_backend_ops"
timeout 240 .gpu/test_backend_ops --gtest_color=no > "$R/test_backend_ops.log" 2>&1
log "test_backend_ops rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$R/test_backend_ops.log" | tr '\n' ' ')"
grep -E "FAILED|Failure|differs" "$R/test_backend_ops.log" | head -20
pack
for shape in qwen3-0.6b llama-3.1-8b; do
  timeout 120 $NEW synth --like $shape --quant affine4 --group-size 64 --no-tokenizer --force "$S/$shape" \
    > "$R/synth-$shape.log" 2>&1
  log "synth $shape rc=$?"
done
CSV=$OUT/bench.csv
b() {  # b TAG BIN MODEL BATCH REPEAT [ENV...]
  local tag=$1 bin=$2 model=$3 batch=$4 rep=$5
  shift 5
  env "$@" timeout 200 $bin bench -m "$S/$model" -p 512 -g 128 -r "$rep" --batch "$batch" --device gpu \
    --csv "$CSV" > "$R/bench-$tag.log" 2>&1
  log "bench $tag rc=$? $(grep -E '^\| (pp|tg)' "$R/bench-$tag.log" | tr -s ' ' | tr '\n' ' ')"
  tail -12 "$R/bench-$tag.log"
}
b new-0.6b $NEW qwen3-0.6b 1 3
b new-8b $NEW llama-3.1-8b 1 3
b base-0.6b $BASE qwen3-0.6b 1 1
b base-8b $BASE llama-3.1-8b 1 1
pack
b new-8b-b16 $NEW llama-3.1-8b 16 2
b new-8b-noqgemv $NEW llama-3.1-8b 1 1 MLXCEL_GPU_QGEMV=0
b new-8b-nosplit $NEW llama-3.1-8b 1 1 MLXCEL_GPU_SPLIT_KV=0
pack
if command -v nsys > /dev/null; then
  log "nsys 8b"
  timeout 150 nsys profile -o "$R/p8b" --force-overwrite true $NEW bench -m "$S/llama-3.1-8b" -p 512 -g 64 -r 1 \
    --device gpu > "$R/nsys-run.log" 2>&1
  nsys stats -r cuda_gpu_kern_sum -f csv -o "$R/k8b" "$R/p8b.nsys-rep" > "$R/nsys-stats.log" 2>&1
  rm -f "$R"/p8b.nsys-rep "$R"/p8b.sqlite
  log "nsys done"
  head -25 "$R"/k8b*.csv
fi
pack
log "selftest"
timeout 120 $NEW selftest --device gpu > "$R/selftest.log" 2>&1
log "selftest rc=$? $(tail -1 "$R/selftest.log")"
pack
if [ $((SECONDS - t0)) -lt 380 ]; then
  timeout 120 $NEW synth --like qwen3-30b-a3b --quant affine4 --group-size 64 --no-tokenizer --force "$S/qwen3-30b-a3b" \
    > "$R/synth-30b.log" 2>&1
  log "synth 30b rc=$?"
  b new-30b $NEW qwen3-30b-a3b 1 1
fi
cp "$CSV" "$R/" 2>/dev/null
pack
log "end"
