#!/usr/bin/env bash
# Session 10, second H200 call (issue 12). Against run 24's binary (.gpu/mlxcel-base.xz, at
# 5d458c2: graphs, fused rope/qk-norm, add + next norm, attention slices), the new one has:
#  - the sampler skipping its softmax normalizer when nothing reads logprobs (bench and servers
#    without logprobs). Run 24's ncu: sample_kernel 133 us (8B) / 155 us (0.6B) of a step.
#    Prediction: 0.6B 700 -> >= 760 tok/s, 8B 283 -> >= 290, 30B 228 -> >= 235.
#  - moe_combine over (token, 256-element) blocks instead of one block per token (12.8 us under
#    ncu per 30B layer). Prediction: 30B a further +3-5 %.
#  - the prefill GEMM on the tensor cores by default (run 24: 8B pp512 1,396 -> 5,807).
# Then per-kernel times of one decode step with ncu's clock and cache control off (run 24's ncu
# ran at base clocks with caches flushed between kernels: times inflated), for 0.6B, 30B and
# the 8B at batch 16 (16 x one stream's speed is the target; run 24: 1,230 tok/s = 4.3x).
RUN=25
source dev/h200_lib.sh
unxz_to() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2" && chmod +x "$2"; }
unxz_to .gpu/mlxcel-base.xz /tmp/mlxcel-base
unxz_to .gpu/test_backend_ops.xz .gpu/test_backend_ops
run_tests
timeout 120 .gpu/mlxcel selftest --device gpu > "$R/selftest.log" 2>&1
log "selftest rc=$? $(tail -1 "$R/selftest.log")"
synth_all
for m in llama-3.1-8b:8b qwen3-0.6b:0.6b qwen3-30b-a3b:30b; do
  b ${m#*:} .gpu/mlxcel ${m%:*} 1 3
  b ${m#*:}-base /tmp/mlxcel-base ${m%:*} 1 3
done
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 1
b 8b-b16-gpl0 .gpu/mlxcel llama-3.1-8b 16 1 MLXCEL_GPU_QGEMV_MMA_GPL=0
ncu_step 0.6b qwen3-0.6b 1
ncu_step 30b qwen3-30b-a3b 1
ncu_step 8b llama-3.1-8b 1
ncu_step 8b-b16 llama-3.1-8b 16
pack
log "end"
