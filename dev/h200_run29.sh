#!/usr/bin/env bash
# Session 13, a short confirming call after run 28: PDL on by default but only while a decode
# graph is recorded (run 28: eager prefill lost 8 % with it, replayed decode gained 7-14 %),
# the cp.async ring deleted. Prediction: decode as run 28's PDL rows (8B ~330, 0.6B ~940, 30B
# ~286) and prefill as its non-PDL rows (8B ~5,950, 0.6B ~24,200, 30B ~1,244).
RUN=29
BUDGET_S=${BUDGET_S:-120}
source dev/h200_lib.sh
unxz_to() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2" && chmod +x "$2"; }
unxz_to .gpu/mlxcel.xz .gpu/mlxcel
unxz_to .gpu/test_backend_ops.xz .gpu/test_backend_ops
run_tests
synth_all
b 8b .gpu/mlxcel llama-3.1-8b 1 3
b 0.6b .gpu/mlxcel qwen3-0.6b 1 3
b 30b .gpu/mlxcel qwen3-30b-a3b 1 3
b 8b-nopdl .gpu/mlxcel llama-3.1-8b 1 3 MLXCEL_GPU_PDL=0
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 1
pack
log "end"
