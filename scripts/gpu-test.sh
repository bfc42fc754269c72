#!/usr/bin/env bash
# GPU test runs on a machine with an NVIDIA GPU but none of our Debian -dev packages (the H200:
# Ubuntu 24.04, CUDA 13 driver). Two halves:
#   scripts/gpu-test.sh build   here (Debian 12 + CUDA toolkit): builds the cuda preset; the CUDA
#                               runtime is linked statically, gtest/pcre2/utf8proc are static
#                               archives, so build/cuda runs there as it is.
#   scripts/gpu-test.sh run     there: runs every test binary of build/cuda/tests with
#                               MLXCEL_REQUIRE_GPU=1 (a missing GPU fails instead of skipping),
#                               then `mlxcel --version` and `mlxcel devices`. With $OUT set, the
#                               full log goes to $OUT/gpu-test.log.
#   scripts/gpu-test.sh models REFS FIXTURES [BIN]
#                               there: for every fixture with references in REFS (written here by
#                               scripts/gpu_model_refs.py refs), `mlxcel trace --device gpu` at
#                               w1/w8/w256 and 32 greedy tokens on the GPU and on the CPU (fast);
#                               results in $OUT/models.tar.gz (compare here with
#                               scripts/gpu_model_refs.py compare).
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  build)
    cmake --preset cuda >/dev/null && cmake --build --preset cuda -j"$(nproc)"
    ;;
  run)
    log=${OUT:-/tmp}/gpu-test.log
    : > "$log"
    export MLXCEL_REQUIRE_GPU=1
    fails=0
    passes=0
    {
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
      build/cuda/bin/mlxcel --version
      build/cuda/bin/mlxcel devices
      for t in build/cuda/tests/test_*; do
        [ -x "$t" ] || continue
        echo "=== $t"
        if "$t" --gtest_color=no; then passes=$((passes + 1)); else fails=$((fails + 1)); fi
      done
      echo "gpu-test: $passes passed, $fails failed"
    } 2>&1 | tee -a "$log"
    grep -q "gpu-test: [0-9]* passed, 0 failed" "$log"
    ;;
  models)
    refs=$2
    fixtures=$3
    bin=${4:-build/cuda/bin/mlxcel}
    res=$(mktemp -d)
    for d in "$refs"/*/; do
      f=$(basename "$d")
      [ -d "$fixtures/$f" ] || continue
      mkdir -p "$res/$f"
      start=$(date +%s)
      for dev in gpu cpu; do
        for w in w1 w8 w256; do
          "$bin" trace -m "$fixtures/$f" --tokens "$d/ids-$w.json" --width $w --device $dev \
            -o "$res/$f/$dev-$w.json" > "$res/$f/$dev-$w.log" 2>&1 ||
            echo "$f $dev $w: trace failed: $(tail -2 "$res/$f/$dev-$w.log")"
        done
        "$bin" generate -m "$fixtures/$f" --prompt-ids "$d/prompt.json" -n 32 --ignore-eos -q \
          --output-ids "$res/$f/gen-$dev.json" --device $dev > "$res/$f/gen-$dev.log" 2>&1 ||
          echo "$f generate $dev failed: $(tail -2 "$res/$f/gen-$dev.log")"
      done
      # The CPU engine's margins along its own greedy sequence: where GPU and CPU greedy part,
      # was the CPU's choice decided (top-1 - top-2 >= 2.0)?
      python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); g=json.load(open(sys.argv[2]))["tokens"]; json.dump(p+g, open(sys.argv[3],"w"))' \
        "$d/prompt.json" "$res/$f/gen-cpu.json" "$res/$f/greedy-seq.json" &&
        "$bin" trace -m "$fixtures/$f" --tokens "$res/$f/greedy-seq.json" --width w1 --device cpu \
          -o "$res/$f/cpu-greedy.json" > /dev/null 2>&1
      echo "$f: $(($(date +%s) - start)) s"
      tar -C "$res" -czf "${OUT:-/tmp}/models.tar.gz" .  # after each fixture: a timeout keeps the rest
    done
    ;;
  *)
    echo "usage: scripts/gpu-test.sh build|run|models" >&2
    exit 2
    ;;
esac
