#!/usr/bin/env bash
# Packs the llama.cpp peer for the device calls (dev/h200_lib.sh's llama_peers, run 49):
# llama-cpp-python 0.3.36's sdist from PyPI, its vendored llama.cpp (commit 0c1e570) without
# docs, tests, the web UI, media, benches, pocs, the other backends and every vocab file but the
# two the synthetic GGUFs use, xz-compressed into .gpu/llama.tar.xz (~7.5 MB), plus
# ../shared/peers/synth_gguf.py as .gpu/synth_gguf.py. Run from the repository root.
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$work"
tar -xzf "$work"/llama_cpp_python-0.3.36.tar.gz -C "$work"
src=$work/llama_cpp_python-0.3.36/vendor/llama.cpp
rm -rf "$src"/{docs,tools/ui,tests,media,benches,pocs,.github}
find "$src/models" -mindepth 1 -maxdepth 1 ! -name ggml-vocab-llama-bpe.gguf \
  ! -name ggml-vocab-qwen2.gguf -exec rm -rf {} +
for b in cann et hexagon hip metal musa opencl openvino sycl virtgpu vulkan webgpu zdnn zendnn; do
  rm -rf "$src/ggml/src/ggml-$b"
done
mkdir -p .gpu
tar -C "$src/.." -cf - llama.cpp | xz -T2 -6 > .gpu/llama.tar.xz
cp ../shared/peers/synth_gguf.py .gpu/synth_gguf.py
ls -l .gpu/llama.tar.xz .gpu/synth_gguf.py
