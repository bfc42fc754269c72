#!/usr/bin/env python3
"""Build tiny random MLX checkpoints, written by mlx-lm itself, for model-level conformance.

usage: make_fixtures.py OUTDIR [--families llama,qwen3,...] [--modes bf16,affine4,mxfp4-f32,...] [--no-mixed]

For every family (llama, mistral, qwen2, qwen3, qwen3_moe, gemma3_text, phi3) and mode
(bf16, affine4 = affine 4-bit gs 64, affine8 = affine 8-bit gs 64, mxfp4, mxfp8; nvfp4 on
request) it writes
OUTDIR/<family>-<mode>/ with config.json, model.safetensors (+ index) and a real tokenizer, using
the installed mlx_lm.models.<arch> classes, mlx_lm.utils.quantize_model (nn.quantize with the
model's own quant_predicate) and mlx_lm.utils.save_model / save_config. One extra fixture,
llama-mixed, uses per-layer overrides (config.json "quantization" holds per-path entries).

Those seven families are hidden 64 with power-of-two sizes everywhere, which hides rounding and
blocking rules that only show at real widths. The "realistic" families (REALISTIC below) have the
shapes of real checkpoints, cut to 2 layers and a small vocabulary, each in its own list of
modes: llama_h576 (SmolLM2-135M: hidden 576, 9 query / 3 KV heads), gemma3_h640 (Gemma 3 270M:
hidden 640, head_dim 256, 1 KV head, sliding window) and qwen3_moe_h320 (5 query / 1 KV heads,
12 experts, top 3).

Float32-activation twins (F32_TWINS below), "<family>-<mode>-f32": the same family, shape, seed
and quantization as "<family>-<mode>", but the model in float32 before quantizing, so affine
scales/biases and the norms are float32 and mlx-lm's CPU reference computes and accumulates the
quantized matmuls in fp32 (docs/numerics.md): there the default `fast` engine can be gated at
decided positions, which the bf16-accumulating reference of the quantized bf16 fixtures does not
allow. Any mode takes the suffix on request (`--families phi3 --modes affine4-f32`).

Weights are deterministic (seed per family) and scaled so that logits have a standard deviation
near 15: top-1 vs top-2 margins >= 2.0 then occur at a good share of positions (printed as
"decided" for a random token sequence), which the model-level gate needs.
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.utils import _get_classes, quantize_model, save_config, save_model

FIXTURES = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures" / "tokenizers"
if not FIXTURES.exists():
    FIXTURES = Path("/work/shared/fixtures/tokenizers")

# Tokenizer folder, files to copy (source name -> name in the fixture), vocab size.
TOKENIZERS = {
    "mistral": ("mistral-7b-v0.3-metaspace", {"tokenizer.json": "tokenizer.json", "tokenizer_config.json": "tokenizer_config.json"}, 32768),
    "qwen2": ("qwen2.5", {"vocab.json": "vocab.json", "merges.txt": "merges.txt", "tokenizer_config.json": "tokenizer_config.json"}, 151665),
    "qwen3": ("qwen2.5", {"vocab.json": "vocab.json", "merges.txt": "merges.txt", "tokenizer_config.Qwen3-0.6B.json": "tokenizer_config.json"}, 151669),
    "phi3": ("phi-3-mini", {"tokenizer.json": "tokenizer.json", "tokenizer_config.json": "tokenizer_config.json"}, 32064),
}

MODES = {
    "bf16": None,
    "affine4": dict(mode="affine", group_size=64, bits=4),
    "affine8": dict(mode="affine", group_size=64, bits=8),
    "mxfp4": dict(mode="mxfp4", group_size=32, bits=4),
    "mxfp8": dict(mode="mxfp8", group_size=32, bits=8),
}
# Modes written only on request or as a float32 twin (F32_TWINS): nvfp4 (E2M1 elements, E4M3
# scales, groups of 16) has no bf16 fixture; its quantized matmul is checked against MLX op by op
# (tests/python/test_qmm_mlx_numerics.py) and its model-level path through its twin.
EXTRA_MODES = {"nvfp4": dict(mode="nvfp4", group_size=16, bits=4)}
ALL_MODES = {**MODES, **EXTRA_MODES}

# Written by default: each quantized mode once, across families chosen for what each adds, so that
# the fast-numerics gate covers every quantized matmul / embedding kernel (each twin costs ~5-20 s
# of CI per numerics mode, llama_h576 the most): llama_h576 affine4 (576 / 1536 wide, 9/3 heads,
# tied quantized head), gemma3_text affine8 (tied quantized head, GeGLU, sliding window),
# qwen3_moe mxfp4 (quantized experts through the gather matmul, q/k norms), phi3 mxfp8 (fused qkv
# / gate_up split, longrope), mistral nvfp4 (the one model-level nvfp4 fixture; sliding window,
# untied head). The 151k-vocabulary qwen3/qwen2 fixtures would double the cost of a twin.
F32_TWINS = {"mistral": ["nvfp4-f32"], "gemma3_text": ["affine8-f32"], "qwen3_moe": ["mxfp4-f32"],
             "phi3": ["mxfp8-f32"], "llama_h576": ["affine4-f32"]}

H = 64  # hidden size of every fixture of family_configs()


def family_configs():
    common = dict(hidden_size=H, num_hidden_layers=2, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=4096)
    return {
        # The fixtures' Llama 2 tokenizer.json has merges that HF tokenizers 0.23 refuses (mlx-lm
        # cannot load it), and Llama 3's is tiktoken only: Mistral v0.3's SentencePiece BPE stands in.
        "llama": ("mistral", 101, dict(common, model_type="llama", rope_theta=500000.0, tie_word_embeddings=True,
                                    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
        # mlx-lm applies Mistral's window through layer_types (its llama.py, which also needs one
        # full-attention layer); window 16 so that short traces already cross it.
        "mistral": ("mistral", 102, dict(common, model_type="mistral", rope_theta=1000000.0, tie_word_embeddings=False,
                                         sliding_window=16, layer_types=["sliding_attention", "full_attention"],
                                         head_dim=16)),
        "qwen2": ("qwen2", 103, dict(common, model_type="qwen2", rope_theta=1000000.0, tie_word_embeddings=True)),
        "qwen3": ("qwen3", 104, dict(common, model_type="qwen3", rope_theta=1000000.0, tie_word_embeddings=False, head_dim=32)),
        "qwen3_moe": ("qwen3", 105, dict(common, model_type="qwen3_moe", rope_theta=1000000.0, tie_word_embeddings=False,
                                         head_dim=16, num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1,
                                         mlp_only_layers=[], moe_intermediate_size=64, norm_topk_prob=True)),
        # No Gemma tokenizer in the fixtures: Phi-3's (Llama 2 vocab + chat tokens, 32064) stands in.
        "gemma3_text": ("phi3", 106, dict(common, model_type="gemma3_text", num_hidden_layers=4, head_dim=32,
                                             query_pre_attn_scalar=32, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                                             sliding_window=8, sliding_window_pattern=2, rms_norm_eps=1e-6,
                                             num_key_value_heads=1)),
        "phi3": ("phi3", 107, dict(common, model_type="phi3", rope_theta=10000.0, tie_word_embeddings=False,
                                   max_position_embeddings=4096, original_max_position_embeddings=256,
                                   rope_scaling={"type": "longrope",
                                                 "short_factor": [1.0 + 0.05 * i for i in range(8)],
                                                 "long_factor": [1.0 + 0.25 * i for i in range(8)]})),
    }


def realistic_configs():
    """Real checkpoints' shapes (non-power-of-two widths, odd head counts), 2 layers each:
    name -> (tokenizer, seed, config, modes). The vocabularies are the small fixture tokenizers
    (MLX's CPU LM head is slow at 150k+ rows and the traces would dominate CI time). The modes
    listed are the ones CI checks: MLX's CPU quantized matmul in bf16 (the reference) is slow at
    these widths, a quantized realistic fixture costs several times an unquantized one. The
    others are written on request, e.g. `--families gemma3_h640,qwen3_moe_h320 --modes affine4`
    or `--families llama_h576 --modes affine8,mxfp4`."""
    return {
        # SmolLM2-135M: hidden 576, intermediate 1536, 9 query heads / 3 KV heads of 64, tied head.
        "llama_h576": ("mistral", 111, dict(model_type="llama", hidden_size=576, intermediate_size=1536,
                                            num_hidden_layers=2, num_attention_heads=9, num_key_value_heads=3,
                                            head_dim=64, rms_norm_eps=1e-5, rope_theta=100000.0,
                                            tie_word_embeddings=True, max_position_embeddings=8192),
                       ["bf16", "affine4"]),
        # Gemma 3 270M: hidden 640, intermediate 2048, 4 query heads / 1 KV head of 256; a sliding
        # layer (window 24, not a power of two, so that w1 crosses it) and a global one.
        "gemma3_h640": ("phi3", 112, dict(model_type="gemma3_text", hidden_size=640, intermediate_size=2048,
                                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                                          head_dim=256, query_pre_attn_scalar=256, rms_norm_eps=1e-6,
                                          rope_theta=1000000.0, rope_local_base_freq=10000.0,
                                          sliding_window=24, sliding_window_pattern=2,
                                          max_position_embeddings=32768),
                        ["bf16"]),
        # Qwen3-MoE with odd counts: 5 query heads / 1 KV head of 64 on hidden 320, 12 experts of
        # 192, top 3. Mistral's vocabulary instead of Qwen's 151k (see the docstring).
        "qwen3_moe_h320": ("mistral", 113, dict(model_type="qwen3_moe", hidden_size=320, intermediate_size=960,
                                                num_hidden_layers=2, num_attention_heads=5, num_key_value_heads=1,
                                                head_dim=64, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                                tie_word_embeddings=False, max_position_embeddings=4096,
                                                num_experts=12, num_experts_per_tok=3, decoder_sparse_step=1,
                                                mlp_only_layers=[], moe_intermediate_size=192, norm_topk_prob=True),
                           ["bf16"]),
    }


def parse_mode(mode):
    """'affine4' -> ('affine4', bfloat16); 'affine4-f32' -> ('affine4', float32)."""
    base, sep, suffix = mode.partition("-")
    if base not in ALL_MODES or (sep and suffix != "f32") or (base == "bf16" and sep):
        known = ", ".join(list(ALL_MODES) + [f"{m}-f32" for m in ALL_MODES if m != "bf16"])
        raise ValueError(f"unknown mode {mode} (known: {known})")
    return base, mx.float32 if sep else mx.bfloat16


def default_modes():
    """family -> the modes main() writes for it by default."""
    fams = {f: list(MODES) for f in family_configs()}
    fams.update({f: list(modes) for f, (_, _, _, modes) in realistic_configs().items()})
    for f, twins in F32_TWINS.items():
        fams[f] += twins
    return fams


def f32_twin_names():
    """The float32-activation twins main() writes by default, by folder name."""
    return [f"{f}-{m}" for f, twins in F32_TWINS.items() for m in twins]


def fixture_names():
    """Every fixture main() writes by default, by folder name."""
    names = [f"{f}-{m}" for f, modes in default_modes().items() for m in modes] + ["llama-mixed"]
    # The unquantized MoE fixtures are float32 (see write_fixture).
    return [n.replace("_moe-bf16", "_moe-f32").replace("_moe_h320-bf16", "_moe_h320-f32") for n in names]


def build_model(config, seed, dtype):
    model_cls, args_cls = _get_classes(config)
    model = model_cls(args_cls.from_dict(config))
    mx.random.seed(seed)
    tied = not any(k.startswith("lm_head") for k, _ in tree_flatten(model.parameters()))
    H = config["hidden_size"]
    # Logit std ~ 15: tied tables (and lm_head) get std 15/sqrt(H); the normed hidden state has
    # entries of size ~1. Other matrices keep mlx's init, scaled x2 so the layers matter next to
    # the embedding.
    new = []
    for name, p in tree_flatten(model.parameters()):
        if name.endswith("embed_tokens.weight"):
            std = 15.0 / np.sqrt(H) if tied else 1.0
            if config["model_type"] == "gemma3_text":
                std /= np.sqrt(H) / 3.0  # gemma multiplies the input embedding by sqrt(H)
            v = mx.random.normal(p.shape) * std
        elif name.startswith("lm_head"):
            v = mx.random.normal(p.shape) * (15.0 / np.sqrt(H))
        elif "norm" in name:
            base = 0.0 if config["model_type"] == "gemma3_text" else 1.0  # gemma stores w for (1 + w)
            v = base + 0.1 * mx.random.normal(p.shape)
        elif name.endswith("mlp.gate.weight"):  # MoE router: spread the expert scores
            v = mx.random.normal(p.shape) * 0.5
        elif p.ndim >= 2:
            v = mx.random.uniform(-1, 1, p.shape) * (2.0 / np.sqrt(p.shape[-1]))
            if tied and (name.endswith("o_proj.weight") or "down_proj" in name):
                # Tied head: without strong layer outputs the normed residual stays close to the
                # input embedding and every position predicts its own token.
                v = v * 6.0
        else:
            v = mx.random.normal(p.shape) * 0.1  # biases
        new.append((name, v.astype(dtype)))
    model.update(tree_unflatten(new))
    mx.eval(model.parameters())
    return model


def decided_share(model, vocab, seed, n=48):
    """Share of positions with a top-1 margin >= 2, and of those predicting their own input."""
    ids = np.random.default_rng(seed).integers(0, vocab, size=(1, n))
    toks = mx.array(ids)
    logits = model(toks).astype(mx.float32)[0]
    echo = float((np.array(mx.argmax(logits, axis=-1)) == ids[0]).mean())
    top2 = mx.topk(logits, 2, axis=-1)
    top2 = mx.sort(top2, axis=-1)
    margin = np.array(top2[:, 1] - top2[:, 0])
    return float((margin >= 2.0).mean()), echo


def mixed_predicate(path, module):
    """Per-layer overrides: first layer's v_proj/down_proj 8-bit, the head 6-bit gs 32."""
    if path.endswith("lm_head") or path.endswith("embed_tokens"):
        return {"group_size": 32, "bits": 6, "mode": "affine"}
    if path.startswith("model.layers.0.") and (path.endswith("v_proj") or path.endswith("down_proj")):
        return {"group_size": 64, "bits": 8, "mode": "affine"}
    return True


def write_fixture(out, family, mode, tok_key, seed, config, predicate=None, mode_params=None,
                  dtype=mx.bfloat16):
    folder, files, vocab = TOKENIZERS[tok_key]
    config = dict(config, vocab_size=vocab)
    # MLX's CPU GatherMM (the unquantized MoE expert matmul) only runs in float32, so the
    # unquantized qwen3_moe fixture is float32 ("<family>-f32") to stay runnable by mlx-lm on CPU.
    if mode == "bf16" and config["model_type"] == "qwen3_moe":
        dtype, mode = mx.float32, "f32"
    model = build_model(config, seed, dtype)
    if mode_params is not None:
        model, config = quantize_model(model, config, mode_params["group_size"], mode_params["bits"],
                                       mode=mode_params["mode"], quant_predicate=predicate)
    dst = out / f"{family}-{mode}"
    if dst.exists():
        shutil.rmtree(dst)
    save_model(dst, model)
    save_config(config, dst / "config.json")
    for src, name in files.items():
        shutil.copy(FIXTURES / folder / src, dst / name)
    share, echo = decided_share(model, vocab, seed)
    size = sum(f.stat().st_size for f in dst.glob("*.safetensors"))
    print(f"wrote {dst}  ({size / 1e6:.1f} MB weights, vocab {vocab}, decided {share:.2f}, echo {echo:.2f})", flush=True)
    return dst


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--families", default=",".join(list(family_configs()) + list(realistic_configs())))
    ap.add_argument("--modes", help="modes for every family (default: all for the small families, "
                    "each realistic family's own list)")
    ap.add_argument("--no-mixed", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    mx.set_default_device(mx.cpu)
    fams = {k: (*v, None) for k, v in family_configs().items()}
    fams.update(realistic_configs())
    defaults = default_modes()
    for fam in args.families.split(","):
        if fam not in fams:
            sys.exit(f"make_fixtures: unknown family {fam} (known: {', '.join(fams)})")
        tok, seed, cfg, _ = fams[fam]
        for mode in (args.modes.split(",") if args.modes else defaults[fam]):
            try:
                base, dtype = parse_mode(mode)
            except ValueError as e:
                sys.exit(f"make_fixtures: {e}")
            write_fixture(out, fam, mode, tok, seed, cfg, mode_params=ALL_MODES[base], dtype=dtype)
    if not args.no_mixed and "llama" in args.families.split(","):
        tok, seed, cfg, _ = fams["llama"]
        write_fixture(out, "llama", "mixed", tok, seed, cfg, predicate=mixed_predicate,
                      mode_params=dict(mode="affine", group_size=64, bits=4))


if __name__ == "__main__":
    main()
