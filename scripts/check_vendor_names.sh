#!/usr/bin/env bash
# Portability gate: CUDA/HIP API names may appear only in the GPU compat header and in the vendor
# host-glue folders (src/backend/cuda, src/backend/rocm). Exits 1 listing offending lines.
set -euo pipefail
cd "$(dirname "$0")/.."
pattern='\b(cuda[A-Z][A-Za-z]+|hip[A-Z][A-Za-z]+|cublas[A-Z][A-Za-z]*|hipblas[A-Z][A-Za-z]*|__shfl(_xor|_up|_down)?(_sync)?|__hip_bfloat16|__nv_bfloat16|__half)\b'
hits=$(grep -rnE "$pattern" src tools 2>/dev/null \
  | grep -vE '^src/backend/(cuda|rocm)/|^src/backend/gpu/compat\.h:' || true)
if [ -n "$hits" ]; then
  echo "vendor API names outside src/backend/gpu/compat.h and src/backend/{cuda,rocm}/:"
  echo "$hits"
  exit 1
fi
echo "vendor-name gate: ok"
