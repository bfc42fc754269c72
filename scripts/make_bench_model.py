#!/usr/bin/env python3
"""Writes a Qwen3-0.6B-shaped checkpoint with random weights, quantized with mlx-lm (affine
4-bit, group 64, as mlx-community's Qwen3-0.6B-4bit), for `mlxcel bench`.

usage: make_bench_model.py OUTDIR [--bits 4] [--group-size 64]
"""
import argparse
from pathlib import Path

import mlx.core as mx
from mlx_lm.utils import _get_classes, quantize_model, save_config, save_model

QWEN3_0_6B = {
    "model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 28, "intermediate_size": 3072,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-6,
    "vocab_size": 151936, "rope_theta": 1000000.0, "max_position_embeddings": 40960,
    "tie_word_embeddings": True,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=64)
    a = ap.parse_args()
    mx.set_default_device(mx.cpu)
    mx.random.seed(0)
    cfg = dict(QWEN3_0_6B)
    model_cls, args_cls = _get_classes(cfg)
    model = model_cls(args_cls.from_dict(cfg))
    model.set_dtype(mx.bfloat16)
    model, cfg = quantize_model(model, cfg, a.group_size, a.bits)
    out = Path(a.out)
    save_model(out, model)
    save_config(cfg, out / "config.json")
    print("wrote", out)


if __name__ == "__main__":
    main()
