#!/usr/bin/env python3
"""Reference logits trace from mlx-lm (CPU), in the format of `mlxcel trace`.

Teacher-forces the token ids through mlx-lm's model with its own KV cache at one width:
w1 (one token per step), w8 (a 512-token prefill, then steps of 8), w256 (steps of 256), and
writes the top-k logits after every position. Logits are computed in the model's dtype by MLX
and widened to fp32 for the file.

usage: mlx_trace.py MODEL_DIR --tokens IDS.json --width w1|w8|w256 [--top-k 8] -o OUT.json
"""
import argparse
import json
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import load_model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--width", default="w1", choices=["w1", "w8", "w256"])
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    mx.set_default_device(mx.cpu)
    tokens = json.load(open(a.tokens))
    if isinstance(tokens, dict):
        tokens = tokens["tokens"]
    model, _ = load_model(Path(a.model))
    cache = make_prompt_cache(model)
    n = len(tokens)
    chunks, pos = [], 0
    if a.width == "w8":
        pre = min(512, n)
        chunks.append((0, pre))
        pos = pre
    step = {"w1": 1, "w8": 8, "w256": 256}[a.width]
    while pos < n:
        chunks.append((pos, min(n, pos + step)))
        pos += step
    positions = []
    for b, e in chunks:
        logits = model(mx.array(tokens[b:e])[None], cache=cache)[0].astype(mx.float32)
        k = min(a.top_k, logits.shape[-1])
        idx = mx.argsort(-logits, axis=-1)[:, :k]
        vals = mx.take_along_axis(logits, idx, axis=-1)
        mx.eval(idx, vals)
        for r, (ids, vs) in enumerate(zip(idx.tolist(), vals.tolist())):
            positions.append({"pos": b + r, "top": [[i, v] for i, v in zip(ids, vs)]})
    json.dump({"width": a.width, "tokens": tokens, "positions": positions, "engine": "mlx-lm"},
              open(a.output, "w"))


if __name__ == "__main__":
    main()
