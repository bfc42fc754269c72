#!/usr/bin/env python3
"""Bytes one batch-1 decode step streams, per benchmark shape, from `mlxcel synth --dry-run` (the
exact tensor sizes synth writes), and the decode rate that bandwidth allows. Feeds
docs/performance/gfx1151.md.

usage: bytes_per_token.py MLXCEL [--quant affine4] [--bandwidth 212] [--ctx 576,4096] [SHAPE...]

Weights per token: every matrix once, except the embedding (one row: its packed row plus its
scales/biases row); a tied LM head reads the whole embedding; MoE expert tensors count k/E of their
bytes (the average share of active experts), the router in full; norms in full. KV per token:
K and V (bf16) of every layer at the stated context, a sliding-window layer reading at most its
window.
"""
import argparse
import json
import re
import subprocess
import tempfile


def plan(mlxcel, shape, quant):
    out = subprocess.run([mlxcel, "synth", "--like", shape, "--quant", quant, "--dry-run"], capture_output=True,
                         text=True, check=True).stdout
    tensors = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 4:
            tensors[parts[0]] = ([int(x) for x in parts[2].strip("[]").split(",")], int(parts[3]))
    return tensors


def config(mlxcel, shape, quant):
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([mlxcel, "synth", "--like", shape, "--quant", quant, "--layers", "1", "--vocab", "64",
                        "--no-tokenizer", "--force", d + "/m"], capture_output=True, check=True)
        cfg = json.load(open(d + "/m/config.json"))
    return cfg


def per_token(tensors, cfg, layers):
    total = sum(b for _, b in tensors.values())
    w = 0
    experts, k = cfg.get("num_experts", 0), cfg.get("num_experts_per_tok", 0)
    for name, (shape, b) in tensors.items():
        if name.startswith("model.embed_tokens."):
            w += b // shape[0]  # one row
            if cfg["tie_word_embeddings"]:
                w += b  # the LM head reads it all
        elif ".switch_mlp." in name:
            w += b * k / experts
        else:
            w += b
    return total, w


def kv_bytes(cfg, layers, ctx):
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    per_pos = 2 * cfg["num_key_value_heads"] * hd * 2
    n = 0
    for layer in range(layers):
        window = None
        if cfg["model_type"] == "gemma3_text" and (layer + 1) % cfg.get("sliding_window_pattern", 6) != 0:
            window = cfg["sliding_window"]
        n += per_pos * (min(ctx, window) if window else ctx)
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mlxcel")
    ap.add_argument("shapes", nargs="*", default=["qwen3-0.6b", "llama-3.1-8b", "qwen3-30b-a3b", "gemma3-1b",
                                                   "gemma3-4b", "smollm2-135m"])
    ap.add_argument("--quant", default="affine4")
    ap.add_argument("--bandwidth", type=float, default=212.0, help="GB/s")
    ap.add_argument("--ctx", default="576,4096")
    a = ap.parse_args()
    ctxs = [int(c) for c in a.ctx.split(",")]
    head = "| shape | weights (GB) | weights/token (GB) | " + " | ".join(
        "KV/token @%d (MB) | total @%d (GB) | tok/s @%d" % (c, c, c) for c in ctxs) + " |"
    print(head)
    print("|" + "---|" * (3 + 3 * len(ctxs)))
    for s in a.shapes:
        t = plan(a.mlxcel, s, a.quant)
        cfg = config(a.mlxcel, s, a.quant)
        layers = max(int(m.group(1)) for m in (re.match(r"model\.layers\.(\d+)\.", n) for n in t) if m) + 1
        total, w = per_token(t, cfg, layers)
        cells = []
        for c in ctxs:
            kv = kv_bytes(cfg, layers, c)
            cells += ["%.1f" % (kv / 1e6), "%.3f" % ((w + kv) / 1e9), "%.0f" % (a.bandwidth * 1e9 / (w + kv))]
        print("| %s | %.3f | %.3f | %s |" % (s, total / 1e9, w / 1e9, " | ".join(cells)))


if __name__ == "__main__":
    main()
