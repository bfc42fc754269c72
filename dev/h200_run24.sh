#!/usr/bin/env bash
# First H200 call of session 9's work (issue 12), written without a device (none was lent in
# session 9). Two changes, each against the same binary with its switch flipped:
#  - decode steps recorded as CUDA graphs and replayed (ops/step_graphs.h; MLXCEL_GPU_GRAPHS=0
#    is the old path). Prediction: 0.6B 479 -> >= 750 tok/s, 8B 236 -> >= 255, 30B 175 -> >= 200,
#    8B batch 16 1,108 -> >= 1,150.
#  - the prefill GEMM on the tensor cores (gemm_mma.cu; off unless MLXCEL_GPU_GEMM_MMA=1).
#    Prediction: 8B pp512 1,356 -> >= 6,000 tok/s, 0.6B 11,744 -> >= 25,000, 30B 1,164 -> >= 1,300
#    (its prefill is mostly the experts' GEMVs, which this does not touch).
#  - (session 10) rope_kv_append as one kernel carrying qk-norm, and attention's lanes holding
#    head_dim / 32 consecutive elements (one vector load per key where head_dim 128 took eight
#    2-byte loads, half of them wasted): against the eaaeb3e binary (.gpu/mlxcel-base.xz), both
#    with graphs; and each layer's closing residual add fused with the next layer's input norm
#    (add_rms_norm). Prediction: 0.6B +15-25 % (4 of ~12 launches per layer gone, attention
#    cheaper), 8B +6-10 % (2 of 10 launches; attention 18 -> <= 13 us), 30B +8-12 %.
# Then the kernels' own device time of one 8B / 0.6B decode step (ncu gpu__time_duration, no
# launch gaps; dev/ncu_step_times.py).
RUN=24
source dev/h200_lib.sh
# The carried tree must stay under 64 MiB: all but mlxcel travel xz-compressed.
unxz_to() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2" && chmod +x "$2"; }
unxz_to .gpu/mlxcel-base.xz /tmp/mlxcel-base
unxz_to .gpu/test_backend_ops.xz .gpu/test_backend_ops
unxz_to .gpu/bin/mlxcel-server.xz .gpu/bin/mlxcel-server
log "binaries: $(ls -la /tmp/mlxcel-base .gpu/test_backend_ops .gpu/bin/mlxcel-server | awk '{print $5}' | tr '\n' ' ')"
run_tests
run_tests MLXCEL_GPU_GEMM_MMA=1
timeout 120 .gpu/mlxcel selftest --device gpu > "$R/selftest.log" 2>&1
log "selftest rc=$? $(tail -1 "$R/selftest.log")"
grep -E "decode graphs" "$R/selftest.log"
synth_all
for m in llama-3.1-8b:8b qwen3-0.6b:0.6b qwen3-30b-a3b:30b; do
  b ${m#*:} .gpu/mlxcel ${m%:*} 1 3
  b ${m#*:}-nograph .gpu/mlxcel ${m%:*} 1 3 MLXCEL_GPU_GRAPHS=0
  b ${m#*:}-gemm .gpu/mlxcel ${m%:*} 1 3 MLXCEL_GPU_GEMM_MMA=1
  b ${m#*:}-base /tmp/mlxcel-base ${m%:*} 1 3
  grep -h "decode graphs" "$R/bench-${m#*:}.log" "$R/bench-${m#*:}-nograph.log"
done
b 8b-b16 .gpu/mlxcel llama-3.1-8b 16 1
b 8b-b16-nograph .gpu/mlxcel llama-3.1-8b 16 1 MLXCEL_GPU_GRAPHS=0
b 8b-b16-gemm .gpu/mlxcel llama-3.1-8b 16 1 MLXCEL_GPU_GEMM_MMA=1
# The server with 1, 16 and 64 streams on the 8B shape (target: 64 streams >= 16x one stream).
# .gpu/bin/mlxcel-server and .gpu/tokenizers/llama3-tiktoken are carried (docs/development.md).
MLXCEL_TOKENIZERS=.gpu/tokenizers timeout 120 .gpu/mlxcel synth --like llama-3.1-8b --quant affine4 \
  --group-size 64 --force "$S/llama-3.1-8b-tok" > "$R/synth-8b-tok.log" 2>&1
log "synth 8b with tokenizer rc=$?"
timeout 400 python3 scripts/bench_server.py --model "$S/llama-3.1-8b-tok" --build .gpu \
  --parallel 64 --levels 1,16,64 --max-tokens 64 --out "$R/server-8b.md" > "$R/server-8b.log" 2>&1
log "server 8b rc=$?"
cat "$R/server-8b.log"
for m in llama-3.1-8b qwen3-0.6b qwen3-30b-a3b; do
  timeout 200 ncu --metrics gpu__time_duration.sum --csv .gpu/mlxcel bench -m "$S/$m" -p 64 \
    -g 2 -r 1 --device gpu > "$R/ncu-step-$m.csv" 2> "$R/ncu-step-$m.err"
  log "ncu step $m rc=$?"
  python3 dev/ncu_step_times.py < "$R/ncu-step-$m.csv" 2>&1 | tee "$R/step-times-$m.txt" | head -16
done
pack
log "end"
