#!/usr/bin/env bash
# Packs the cuda preset's binaries for the device calls (dev/h200_runNN.sh, carry [".gpu"]):
# mlxcel, test_backend_ops and bench_gemv_access stripped and xz-compressed into .gpu/ (h200_lib.sh
# unpacks them there). Build first:
#   cmake --preset cuda && cmake --build --preset cuda --target mlxcel test_backend_ops bench_gemv_access
# Keeps .gpu's other files (the llama.cpp peer from dev/pack_llama_peer.sh). Run from the
# repository root.
set -euo pipefail
mkdir -p .gpu
strip -o .gpu/mlxcel build/cuda/bin/mlxcel
strip -o .gpu/test_backend_ops build/cuda/tests/test_backend_ops
strip -o .gpu/bench_gemv_access build/cuda/bench/bench_gemv_access
xz -T2 -f .gpu/mlxcel .gpu/test_backend_ops .gpu/bench_gemv_access
du -sh .gpu
