#!/usr/bin/env python3
"""Find where mlxcel's forward pass first departs from mlx-lm's, tensor by tensor.

Runs the same teacher-forced chunks as `mlxcel trace` (w1, w8, w256) through mlx-lm with recording
wrappers around its modules, runs `mlxcel trace --dump`, and compares every named intermediate
(embed, attn_norm, q, k, v, q_rope, k_rope, attn, o, ffn_norm, gate, up, act, down, h,
final_norm, logits) step by step: the share of bit-identical elements and the largest
difference. A debugging tool for the model conformance gate (DESIGN.md "Correctness").

usage: layer_diff.py MLXCEL_BIN MODEL_DIR [--width w1] [--tokens N] [--numerics mlx]
                     [--steps K] [--all]
"""
import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import load_model

STEP = {"w1": 1, "w8": 8, "w256": 256}


class Rec(nn.Module):
    """Calls the wrapped module and records its output (or input) under a name."""

    def __init__(self, inner, log, names, record_input=None):
        super().__init__()
        self.inner = inner
        self._log, self._names, self._input = log, names, record_input
        self._calls = 0

    def __getattr__(self, key):  # layer flags the model reads (use_sliding, ...)
        try:
            return super().__getattr__(key)
        except AttributeError:
            if key == "inner" or "inner" not in self:
                raise
            return getattr(self["inner"], key)

    def __call__(self, x, *args, **kwargs):
        y = self.inner(x, *args, **kwargs)
        name = self._names[self._calls % len(self._names)]
        self._calls += 1
        self._log.append((name, y))
        if self._input:
            self._log.append((self._input, x))
        return y


def flat(a):
    """[B, L, ...] or [B, H, L, D] (heads first) -> rows x cols fp32, one row per token."""
    a = a.astype(mx.float32)
    if a.ndim == 4:
        a = a.transpose(0, 2, 1, 3)
    return np.array(a).reshape(a.shape[0] * a.shape[1], -1)


def instrument(model):
    """Wraps the modules of every layer; returns the per-call log (a list, cleared by the caller)
    and a function mapping a log to {(layer, name): array}."""
    log = []
    inner = model.model if hasattr(model, "model") else model
    mod = sys.modules[type(model).__module__]
    for i, layer in enumerate(inner.layers):
        tag = lambda n, i=i: f"{i}:{n}"  # noqa: E731
        layer.input_layernorm = Rec(layer.input_layernorm, log, [tag("attn_norm")])
        ffn = "pre_feedforward_layernorm" if hasattr(layer, "pre_feedforward_layernorm") else "post_attention_layernorm"
        setattr(layer, ffn, Rec(getattr(layer, ffn), log, [tag("ffn_norm")]))
        at = layer.self_attn
        if hasattr(at, "qkv_proj"):
            at.qkv_proj = Rec(at.qkv_proj, log, [tag("qkv")])
        else:
            at.q_proj = Rec(at.q_proj, log, [tag("q")])
            at.k_proj = Rec(at.k_proj, log, [tag("k")])
            at.v_proj = Rec(at.v_proj, log, [tag("v")])
        at.rope = Rec(at.rope, log, [tag("q_rope"), tag("k_rope")])
        at.o_proj = Rec(at.o_proj, log, [tag("o")], record_input=tag("attn"))
        mlp = layer.mlp
        if hasattr(mlp, "down_proj"):
            if hasattr(mlp, "gate_up_proj"):
                mlp.gate_up_proj = Rec(mlp.gate_up_proj, log, [tag("gate_up")])
            else:
                mlp.gate_proj = Rec(mlp.gate_proj, log, [tag("gate")])
                mlp.up_proj = Rec(mlp.up_proj, log, [tag("up")])
            mlp.down_proj = Rec(mlp.down_proj, log, [tag("down")], record_input=tag("act"))
        inner.layers[i] = Rec(layer, log, [tag("h")], record_input=tag("layer_in") if i == 0 else None)
    inner.norm = Rec(inner.norm, log, ["-1:final_norm"])
    del mod

    def collect(entries):
        out = {}
        for name, a in entries:
            layer, n = name.split(":")
            layer = int(layer)
            if n == "layer_in":
                out[(-1, "embed")] = flat(a)
            elif n == "qkv":
                out[(layer, "qkv")] = flat(a)
            elif n == "gate_up":
                g = flat(a)
                half = g.shape[1] // 2
                out[(layer, "gate")], out[(layer, "up")] = g[:, :half], g[:, half:]
            else:
                out[(layer, n)] = flat(a)
        return out

    return log, collect


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("--width", default="w1", choices=list(STEP))
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--numerics", default="mlx")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=1000, help="compare at most this many forward steps")
    ap.add_argument("--all", action="store_true", help="print every tensor, not only the first few mismatches")
    a = ap.parse_args()

    mx.set_default_device(mx.cpu)
    model, config = load_model(Path(a.model))
    rng = random.Random(a.seed)
    tokens = [rng.randrange(config["vocab_size"]) for _ in range(a.tokens)]
    chunks, pos, n = [], 0, len(tokens)
    if a.width == "w8":
        chunks.append((0, min(512, n)))
        pos = min(512, n)
    while pos < n:
        chunks.append((pos, min(n, pos + STEP[a.width])))
        pos += STEP[a.width]

    cache = make_prompt_cache(model)
    log, collect = instrument(model)
    ref_steps = []
    for b, e in chunks[: a.steps]:
        log.clear()
        logits = model(mx.array(tokens[b:e])[None], cache=cache)
        mx.eval(logits)
        d = collect(log)
        d[(-1, "logits")] = flat(logits)
        ref_steps.append(d)

    with tempfile.TemporaryDirectory() as tmp:
        ids = Path(tmp) / "ids.json"
        ids.write_text(json.dumps(tokens))
        dump = Path(tmp) / "dump"
        subprocess.run([a.binary, "trace", "-m", a.model, "--tokens", str(ids), "--width", a.width,
                        "--numerics", a.numerics, "--dump", str(dump), "-o", str(Path(tmp) / "t.json")],
                       check=True, capture_output=True)
        ours = {}
        for f in dump.glob("*.npy"):
            step, layer, name = f.stem.split(".", 2)
            ours[(int(step), int(layer), name)] = np.load(f)

    order = ["embed", "attn_norm", "q", "k", "v", "qkv", "q_rope", "k_rope", "attn", "o", "ffn_norm", "gate", "up",
             "act", "down", "h", "final_norm", "logits"]
    first_bad = None
    compared = missing = 0
    for s, ref in enumerate(ref_steps):
        keys = sorted(ref, key=lambda k: (k[0] if k[0] >= 0 else (1 << 20 if k[1] != "embed" else -1), order.index(k[1])))
        for layer, name in keys:
            r = ref[(layer, name)]
            o = ours.get((s, layer, name))
            if o is None:
                missing += 1
                continue
            compared += 1
            if o.shape != r.shape:
                print(f"step {s} L{layer} {name}: shape ours {o.shape} vs mlx {r.shape}")
                continue
            same = np.sum(o.view(np.uint32) == r.view(np.uint32))
            diff = float(np.max(np.abs(o.astype(np.float64) - r.astype(np.float64))))
            bad = same != r.size
            if bad and first_bad is None:
                first_bad = (s, layer, name)
            if a.all or (bad and first_bad is not None and s == first_bad[0]):
                print(f"step {s:3d} L{layer:2d} {name:10s} exact {same}/{r.size}  max|diff| {diff:.3g}")
        if first_bad is not None and not a.all:
            break
    print(f"compared {compared} tensors over {len(ref_steps)} steps ({missing} without a counterpart)")
    print("first mismatch:", first_bad if first_bad else "none (all compared tensors bit-identical)")
    return 1 if first_bad or compared == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
