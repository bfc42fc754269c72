#!/usr/bin/env bash
# The peers rerun beside our bench (run 47's form, whose llama.cpp build failed: the repack had
# dropped app/, which its CMakeLists adds). Call it right after run 48, on the same warm machine:
# llama.cpp builds for ~260 s while the GGUFs are written (CPU only; no GPU timing overlaps it),
# then llama-bench on the three shapes and mlxcel bench (defaults) on the same shapes in the same
# call. Packing (here): `bash dev/pack_llama_peer.sh` writes .gpu/llama.tar.xz and
# .gpu/synth_gguf.py.
RUN=49
BUDGET_S=${BUDGET_S:-520}
source dev/h200_lib.sh
[ -x .gpu/mlxcel ] || unxz_to .gpu/mlxcel.xz .gpu/mlxcel
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader |
  tee -a "$R/steps.log"
llama_peers qwen3-0.6b llama-3.1-8b qwen3-30b-a3b
[ -d "$S/llama-3.1-8b" ] && [ -d "$S/qwen3-0.6b" ] && [ -d "$S/qwen3-30b-a3b" ] || synth_all
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
python3 bench/compare.py "$CSV" "$R"/llama-bench-*.json > "$R/compare.md" 2>&1
log "compare rc=$?"
cat "$R/compare.md"
pack
