#!/usr/bin/env bash
# Issue 13's two checks that need a real GPU, for the lead's H200 run:
#   1. `mlxcel devices` reports the real device (CUDA runtime + PCI), text and JSON;
#   2. `mlxcel inspect --ctx N` agrees with the peak device memory `generate` uses (within 15 %).
# Usage (on the H200, from the repo root, after copying build/cuda there):
#   tests/platform/h200_check.sh BUILD_DIR MODEL_DIR [CTX] [TOKENS]
# Writes devices.json, inspect.json, generate.err under $OUT (or the current folder).
set -euo pipefail
bin="${1:?build dir}/bin/mlxcel"
model="${2:?model folder}"
ctx="${3:-4096}"
tokens="${4:-64}"
out="${OUT:-.}"
"$bin" devices
"$bin" devices --json > "$out/devices.json"
"$bin" inspect -m "$model" --ctx "$ctx" --backend cuda --json > "$out/inspect.json"
"$bin" inspect -m "$model" --ctx "$ctx" --backend cuda | sed -n '/memory plan/,$p'
"$bin" generate -m "$model" --device gpu -c "$ctx" -n "$tokens" --ignore-eos \
  -p "Write a long story about a lighthouse keeper." > /dev/null 2> "$out/generate.err"
cat "$out/generate.err"
python3 - "$out/inspect.json" "$out/generate.err" <<'PY'
import json, re, sys
plan = json.load(open(sys.argv[1]))["memory"]
m = re.search(r"device peak: ([0-9.]+) MiB", open(sys.argv[2]).read())
if not m:
    sys.exit("no 'device peak' in generate's stderr")
peak = float(m.group(1)) * 1048576
est = plan["allocations"]
ratio = est / peak if peak else float("inf")
print(f"estimate (allocations) {est/2**20:.0f} MiB, device peak {peak/2**20:.0f} MiB, ratio {ratio:.3f}")
print("PASS (within 15%)" if abs(ratio - 1) <= 0.15 else "FAIL (off by more than 15%)")
sys.exit(0 if abs(ratio - 1) <= 0.15 else 1)
PY
