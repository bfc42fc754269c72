#!/usr/bin/env bash
# Session 24: the peers rerun in the same device session as our benchmark (issue 12's targets
# are ratios to llama.cpp on the same machine; the last peer numbers are the H200's of
# 2026-12-03, and our runs since have mostly been on H100s). The recipe is
# ../shared/peers/PEERS.md's: llama-cpp-python 0.3.36's vendored llama.cpp (commit 0c1e570),
# repacked without docs, tests, UI, other backends and all vocab files but two, carried as
# .gpu/llama.tar.xz; built here on the device (CUDA, sm_90, llama-bench only); Q4_0 models from
# synth_gguf.py (carried as .gpu/synth_gguf.py) with the real shapes; llama-bench pp512 / tg128,
# flash attention, 3 repeats. Then mlxcel bench on the same shapes, in the same call, under
# the default and run 46's switches (paired scales; with x a chunk ahead and the early norm
# weight).
# Packing (here): cp ../shared/peers/synth_gguf.py .gpu/; the repacked tree as .gpu/llama.tar.xz.
RUN=47
BUDGET_S=${BUDGET_S:-500}
source dev/h200_lib.sh
[ -x .gpu/mlxcel ] || unxz_to .gpu/mlxcel.xz .gpu/mlxcel
L=/tmp/llama
G=/tmp/gguf
mkdir -p "$L" "$G"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader |
  tee -a "$R/steps.log"
if [ ! -x "$L/llama.cpp/b/bin/llama-bench" ]; then
  python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
    .gpu/llama.tar.xz "$L"
  (cd "$L/llama.cpp" && cmake -S . -B b -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF > "$R/llama-cmake.log" 2>&1 &&
    cmake --build b --target llama-bench -j16 > "$R/llama-build.log" 2>&1) &
  build=$!
else
  build=
fi
# The GGUF models are written while llama.cpp builds (CPU only; no GPU timing overlaps it).
export PYTHONPATH=$L/llama.cpp/gguf-py
while [ ! -d "$L/llama.cpp/gguf-py" ]; do sleep 1; done
for m in qwen3_0p6b:qwen2:qwen3-0.6b llama31_8b:llama-bpe:llama-3.1-8b \
         qwen3_30b_a3b:qwen2:qwen3-30b-a3b; do
  IFS=: read -r shape vocab name <<< "$m"
  [ -s "$G/$name.gguf" ] || timeout 200 python3 .gpu/synth_gguf.py "$shape" \
    "$L/llama.cpp/models/ggml-vocab-$vocab.gguf" "$G/$name.gguf" > "$R/gguf-$name.log" 2>&1
  log "gguf $name rc=$? $(tail -1 "$R/gguf-$name.log")"
done
[ -n "$build" ] && { wait $build; log "llama.cpp build rc=$? $(tail -1 "$R/llama-build.log")"; }
for name in qwen3-0.6b llama-3.1-8b qwen3-30b-a3b; do
  late "llama-bench $name" && continue
  timeout 150 "$L/llama.cpp/b/bin/llama-bench" -m "$G/$name.gguf" -p 512 -n 128 -ngl 99 -fa 1 \
    -r 3 -o json > "$R/llama-bench-$name.json" 2> "$R/llama-bench-$name.err"
  log "llama-bench $name rc=$? $(python3 -c "import json,sys; print(' '.join('%s p%s n%s %.1f' % (r['model_type'], r['n_prompt'], r['n_gen'], r['avg_ts']) for r in json.load(open(sys.argv[1]))))" "$R/llama-bench-$name.json" 2>&1)"
done
[ -d "$S/llama-3.1-8b" ] && [ -d "$S/qwen3-0.6b" ] && [ -d "$S/qwen3-30b-a3b" ] || synth_all
P=MLXCEL_GPU_PAIRED_SCALES=1
X=MLXCEL_GPU_QGEMV_XPF=1
E=MLXCEL_GPU_NORM_EARLY_W=1
for m in 0.6b:qwen3-0.6b 8b:llama-3.1-8b 30b:qwen3-30b-a3b; do
  b ${m%%:*} .gpu/mlxcel ${m#*:} 1 3
  b ${m%%:*}-paired .gpu/mlxcel ${m#*:} 1 3 $P
  b ${m%%:*}-all .gpu/mlxcel ${m#*:} 1 3 $P $X $E
done
b 8b-b16-paired .gpu/mlxcel llama-3.1-8b 16 2 $P
python3 bench/compare.py "$CSV" "$R"/llama-bench-*.json > "$R/compare.md" 2>&1
log "compare rc=$?"
cat "$R/compare.md"
pack
