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
  *)
    echo "usage: scripts/gpu-test.sh build|run" >&2
    exit 2
    ;;
esac
