#!/usr/bin/env bash
# One device call measures everything of issue 12 on the H200 (docs/benchmarks.md): synthesizes
# the benchmark shapes (affine 4-bit, group 64) into a scratch folder, runs `mlxcel bench
# --device gpu` on each (pp512/tg128, batch 1; the 8B shape also at batch 16), appends the rows to
# one CSV under $OUT and prints a summary. A shape that fails (synth or bench) is reported and the
# others still run; the exit status is the number of failed steps.
#
# usage: scripts/h200_bench.sh            (from the repository root, on the device machine)
# env:   MLXCEL=build/cuda/bin/mlxcel  OUT=$OUT (or ./out)  SCRATCH=/tmp/mlxcel-bench
#        SHAPES="qwen3-0.6b llama-3.1-8b qwen3-30b-a3b"  QUANT=affine4  GROUP=64
#        P=512 G=128 REPEAT=3  BATCH8B="1 16"  STEP_TIMEOUT=280 (seconds per synth or bench)
#        DEVICE=gpu (cpu: a dry run of this script on a machine without a GPU)
#        KEEP=1 keeps the checkpoints (default: each is deleted after its bench, to spare the disk)
set -u
MLXCEL=${MLXCEL:-build/cuda/bin/mlxcel}
OUT=${OUT:-$PWD/out}
SCRATCH=${SCRATCH:-/tmp/mlxcel-bench}
SHAPES=${SHAPES:-"qwen3-0.6b llama-3.1-8b qwen3-30b-a3b"}
QUANT=${QUANT:-affine4}
GROUP=${GROUP:-64}
P=${P:-512}
G=${G:-128}
REPEAT=${REPEAT:-3}
BATCH8B=${BATCH8B:-"1 16"}
STEP_TIMEOUT=${STEP_TIMEOUT:-280}
KEEP=${KEEP:-0}
DEVICE=${DEVICE:-gpu}

mkdir -p "$OUT" "$SCRATCH"
host=$(hostname -s 2>/dev/null || echo host)
CSV="$OUT/bench-h200-$DEVICE-$(date -u +%Y%m%d).csv"
LOG="$OUT/h200_bench.log"
summary=()
failed=0

if [ ! -x "$MLXCEL" ]; then
  echo "h200_bench: $MLXCEL is not an executable; build the cuda preset first (or set MLXCEL=...)" >&2
  exit 100
fi
{
  echo "# $(date -u +%FT%TZ) on $host"
  "$MLXCEL" --version
  "$MLXCEL" devices
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  df -h "$SCRATCH" | tail -1
} 2>&1 | tee "$OUT/machine.txt"

step() {  # step NAME CMD...: runs with the timeout, logs, records ok / FAILED in the summary
  local name=$1
  shift
  local t0=$SECONDS
  echo "== $name: $*" | tee -a "$LOG"
  timeout "$STEP_TIMEOUT" "$@" >>"$LOG" 2>&1
  local rc=$?
  local dt=$((SECONDS - t0))
  if [ $rc -eq 0 ]; then
    summary+=("ok      $name (${dt}s)")
  else
    [ $rc -eq 124 ] && why="timed out after ${STEP_TIMEOUT}s" || why="exit $rc"
    summary+=("FAILED  $name ($why; see h200_bench.log)")
    failed=$((failed + 1))
    tail -5 "$LOG" | sed 's/^/    /'
  fi
  return $rc
}

for shape in $SHAPES; do
  dir="$SCRATCH/$shape-$QUANT-g$GROUP"
  if ! step "synth $shape" "$MLXCEL" synth --like "$shape" --quant "$QUANT" --group-size "$GROUP" \
      --no-tokenizer --force "$dir"; then
    continue
  fi
  grep "^wrote $dir" "$LOG" | tail -1
  batches=1
  [ "$shape" = "llama-3.1-8b" ] && batches=$BATCH8B
  for b in $batches; do
    step "bench $shape b$b" "$MLXCEL" bench -m "$dir" -p "$P" -g "$G" -r "$REPEAT" --batch "$b" \
      --device "$DEVICE" --csv "$CSV"
    grep -A3 "^| test" "$LOG" | tail -2
  done
  [ "$KEEP" = 1 ] || rm -rf "$dir"
done

echo
echo "== summary ($CSV)"
printf '%s\n' "${summary[@]}"
if command -v python3 >/dev/null && [ -s "$CSV" ]; then
  peers=()
  for f in "$OUT"/llama-bench*.json "$OUT"/mlx_cuda_peer*.json; do [ -s "$f" ] && peers+=("$f"); done
  python3 bench/compare.py "$CSV" "${peers[@]}" | tee "$OUT/compare.md"
elif [ -s "$CSV" ]; then
  cat "$CSV"
fi
exit $failed
