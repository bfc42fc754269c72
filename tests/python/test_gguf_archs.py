"""`mlxcel convert --from-gguf` for the families beyond llama/qwen2/qwen3: mistral (which llama.cpp
writes as "llama"), qwen3_moe, gemma3 and phi3.

Each test builds a tiny random model with mlx-lm's own classes (scripts/make_fixtures.py's
build_model, float32), writes it as a GGUF file the way llama.cpp's convert_hf_to_gguf.py does
(tensor names from the `gguf` package's own TensorNameMap, its metadata keys through GGUFWriter,
LlamaModel.permute on q/k for llama, Gemma's 1 + w norms, Phi-3's LongRoPE factor tensors,
stacked MoE experts), converts it back with `mlxcel convert`, and checks that
(a) every tensor equals the original model's bit for bit, and
(b) mlx-lm loads the converted folder and gives the original model's logits exactly, and
    mlxcel's greedy tokens (--numerics mlx) equal mlx-lm's.
A quantized variant (Q8_0 experts, 3-D) is checked against the `gguf` package's dequantizer."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from _quant_util import CLI  # noqa: E402
from test_gguf_convert import TOKENS, MERGES, check_exact  # noqa: E402

gguf = pytest.importorskip("gguf")
mx = pytest.importorskip("mlx.core")
T = gguf.GGMLQuantizationType

COMMON = dict(hidden_size=64, num_hidden_layers=2, intermediate_size=128, num_attention_heads=4,
              num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=4096, vocab_size=len(TOKENS))

# family -> (GGUF architecture, gguf.MODEL_ARCH, mlx-lm config)
FAMILIES = {
    # Mistral v0.2+ (no sliding window): llama.cpp's converter registers MistralForCausalLM as
    # LlamaModel, so the file says "llama" and comes back as model_type llama.
    "mistral": ("llama", gguf.MODEL_ARCH.LLAMA,
                dict(COMMON, model_type="mistral", rope_theta=1000000.0, tie_word_embeddings=False)),
    "qwen3_moe": ("qwen3moe", gguf.MODEL_ARCH.QWEN3MOE,
                  dict(COMMON, model_type="qwen3_moe", rope_theta=1000000.0, tie_word_embeddings=False,
                       head_dim=16, num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1,
                       mlp_only_layers=[], moe_intermediate_size=64, norm_topk_prob=True)),
    # llama.cpp hard-codes Gemma 3's period of 6 (5 sliding layers, then a global one).
    "gemma3_text": ("gemma3", gguf.MODEL_ARCH.GEMMA3,
                    dict(COMMON, model_type="gemma3_text", num_hidden_layers=6, head_dim=32,
                         query_pre_attn_scalar=32, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                         sliding_window=8, sliding_window_pattern=6, rms_norm_eps=1e-6,
                         num_key_value_heads=1)),
    "phi3": ("phi3", gguf.MODEL_ARCH.PHI3,
             dict(COMMON, model_type="phi3", rope_theta=10000.0, tie_word_embeddings=False,
                  original_max_position_embeddings=256,
                  rope_scaling={"type": "longrope", "short_factor": [1.0 + 0.05 * i for i in range(8)],
                                "long_factor": [1.0 + 0.25 * i for i in range(8)]})),
}


def run(*args, timeout=120):
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def build(family):
    from make_fixtures import build_model
    cfg = FAMILIES[family][2]
    model = build_model(cfg, 300 + list(FAMILIES).index(family), mx.float32)
    if family == "gemma3_text":
        # Norm weights on a 1/64 grid, so that llama.cpp's w + 1 and our - 1 are exact in fp32;
        # the final norm stays random to check the off-grid case against numpy's arithmetic.
        from mlx.utils import tree_flatten, tree_unflatten
        new = [(n, mx.round(p * 64) / 64) for n, p in tree_flatten(model.parameters())
               if n.endswith("norm.weight") and n != "model.norm.weight"]
        model.update(tree_unflatten(new))
        mx.eval(model.parameters())
    return model, cfg


def llamacpp_permute(w, n_head):
    """convert_hf_to_gguf.py LlamaModel.permute: Hugging Face's rotary halves to ggml's pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llamacpp_gguf(path, model, cfg, family, qtype=None, extra=None):
    """What convert_hf_to_gguf.py writes for this family (metadata keys, tensor names and the
    transformations its model classes apply); matrices as F32 or `qtype`, vectors as F32."""
    from mlx.utils import tree_flatten
    arch, arch_enum, _ = FAMILIES[family]
    n_layers = cfg["num_hidden_layers"]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(n_layers)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    if "head_dim" in cfg:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    if family == "qwen3_moe":
        w.add_expert_count(cfg["num_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    if family == "gemma3_text":
        w.add_sliding_window(cfg["sliding_window"])
    if family == "phi3":
        hd = cfg["hidden_size"] // cfg["num_attention_heads"]
        w.add_rope_dimension_count(hd)
        w.add_rope_scaling_orig_ctx_len(cfg["original_max_position_embeddings"])
        scale = cfg["max_position_embeddings"] / cfg["original_max_position_embeddings"]
        w.add_rope_scaling_attn_factors(float(np.sqrt(1 + np.log(scale) / np.log(cfg["original_max_position_embeddings"]))))
        for kind in ("long", "short"):
            w.add_tensor(f"rope_factors_{kind}.weight", np.array(cfg["rope_scaling"][f"{kind}_factor"], np.float32))
    if extra:
        extra(w)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(TOKENS)
    w.add_token_types([3, 3, 3] + [1] * (len(TOKENS) - 3))
    w.add_token_merges(MERGES)
    w.add_eos_token_id(2)
    tmap = gguf.get_tensor_name_map(arch_enum, n_layers)
    for name, p in tree_flatten(model.parameters()):
        # mlx-lm's switch_mlp.* are Hugging Face's experts stacked, which llama.cpp stacks too.
        new = tmap.get_name(name.replace(".switch_mlp.", ".experts."), try_suffixes=(".weight", ".bias"))
        assert new is not None, name
        x = np.array(p.astype(mx.float32))
        if arch == "llama" and name.endswith("q_proj.weight"):
            x = llamacpp_permute(x, cfg["num_attention_heads"])
        elif arch == "llama" and name.endswith("k_proj.weight"):
            x = llamacpp_permute(x, cfg["num_key_value_heads"])
        if family == "gemma3_text" and name.endswith("norm.weight"):
            x = x + np.float32(1.0)  # Gemma3Model.norm_shift, in the checkpoint's dtype
        # llama.cpp keeps vectors and the MoE router in F32.
        if qtype is None or x.ndim == 1 or ".ffn_gate_inp." in new:
            w.add_tensor(new, x)
        else:
            q = gguf.quants.quantize(x, qtype)
            w.add_tensor(new, q, raw_shape=q.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


PROMPT = [5, 9, 12, 3, 30, 7, 7, 21, 2, 14, 33, 0]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_round_trips_bit_exact(tmp_path, family):
    from mlx.utils import tree_flatten
    from mlx_lm.utils import load_model
    from model_conformance import mlx_greedy
    mx.set_default_device(mx.cpu)
    model, cfg = build(family)
    g = write_llamacpp_gguf(tmp_path / "m.gguf", model, cfg, family)
    out = tmp_path / "out"
    r = run("convert", "--from-gguf", g, out, "--dtype", "float32")
    assert r.returncode == 0, r.stderr
    conv_cfg = json.loads((out / "config.json").read_text())
    assert conv_cfg["model_type"] == ("llama" if family == "mistral" else family)

    # (a) every tensor, under its MLX name, bit for bit.
    ours = mx.load(str(out / "model.safetensors"))
    orig = dict(tree_flatten(model.parameters()))
    assert sorted(ours) == sorted(orig)
    for name, p in orig.items():
        want = np.array(p)
        if family == "gemma3_text" and name.endswith("norm.weight"):
            # The GGUF holds fl(w + 1); we store fl(fl(w + 1) - 1): w itself on the 1/64 grid,
            # off it whatever the two fp32 roundings leave (here the final norm).
            want = (want + np.float32(1)) - np.float32(1)
            if name != "model.norm.weight":
                assert np.array_equal(want, np.array(p)), name
        got = np.array(ours[name])
        assert got.dtype == want.dtype and np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
    if family == "gemma3_text":
        n_norms = sum(name.endswith("norm.weight") for name in orig)
        assert f"{n_norms} Gemma norm weights stored by llama.cpp as 1 + w" in r.stderr, r.stderr
        assert not np.array_equal(np.array(ours["model.norm.weight"]), np.array(orig["model.norm.weight"]))
        model.update({"model": {"norm": {"weight": ours["model.norm.weight"]}}})

    # (b) mlx-lm: the converted folder's logits equal the original model's exactly.
    conv, _ = load_model(out)
    toks = mx.array([PROMPT])
    want_logits = np.array(model(toks))
    got_logits = np.array(conv(toks))
    assert np.array_equal(want_logits, got_logits), float(np.abs(want_logits - got_logits).max())
    # mlxcel on the converted folder: mlx-lm's greedy tokens with --numerics mlx.
    want = mlx_greedy(conv, PROMPT[:5], n=12)
    (tmp_path / "p.json").write_text(json.dumps(PROMPT[:5]))
    r = run("generate", "-m", out, "--prompt-ids", tmp_path / "p.json", "-n", "12", "--ignore-eos", "-q",
            "--numerics", "mlx", "--output-ids", tmp_path / "o.json")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "o.json").read_text())["tokens"] == want


def test_qwen3_moe_quantized_experts(tmp_path):
    """Q8_0 stacked experts [n_expert, out, in] map to MLX affine 8-bit per expert, exactly."""
    mx.set_default_device(mx.cpu)
    model, cfg = build("qwen3_moe")
    g = write_llamacpp_gguf(tmp_path / "q.gguf", model, cfg, "qwen3_moe", qtype=T.Q8_0)
    out = tmp_path / "out"
    r = run("convert", "--from-gguf", g, out)
    assert r.returncode == 0, r.stderr
    check_exact(g, out, arch="qwen3moe")
    ours = mx.load(str(out / "model.safetensors"))
    assert ours["model.layers.1.mlp.switch_mlp.down_proj.weight"].shape == (8, 64, 64 // 4)
    assert ours["model.layers.1.mlp.switch_mlp.down_proj.scales"].shape == (8, 64, 2)
    assert "model.layers.0.mlp.gate.scales" not in ours  # the router stays F32 as llama.cpp wrote it
    r = run("generate", out, "-p", "the", "-n", "4", "--ignore-eos", "-q")
    assert r.returncode == 0, r.stderr


def test_gemma3_sliding_window_pattern_key(tmp_path):
    """Newer llama.cpp files may carry the pattern: a period, or one bool per layer (true =
    sliding), which must be periodic to be expressible as gemma3_text's sliding_window_pattern."""
    model, cfg = build("gemma3_text")
    cases = [(3, 3), ([True, False] * 3, 2), ([True] * 5 + [False], 6), ([True, False, False, True, True, False], None)]
    for i, (value, want) in enumerate(cases):
        g = write_llamacpp_gguf(tmp_path / f"g{i}.gguf", model, cfg, "gemma3_text",
                                extra=lambda w, v=value: w.add_sliding_window_pattern(v))
        r = run("convert", "--from-gguf", g, tmp_path / f"o{i}")
        if want is None:
            assert r.returncode == 3 and "not periodic" in r.stderr, r.stderr
        else:
            assert r.returncode == 0, r.stderr
            assert json.loads((tmp_path / f"o{i}" / "config.json").read_text())["sliding_window_pattern"] == want


def test_gemma3_soft_capping_is_refused(tmp_path):
    model, cfg = build("gemma3_text")
    g = write_llamacpp_gguf(tmp_path / "g.gguf", model, cfg, "gemma3_text")
    # Same file with the key Gemma 2 checkpoints carry (the writer cannot append after writing).
    w = gguf.GGUFWriter(str(tmp_path / "cap.gguf"), "gemma3")
    rd = gguf.GGUFReader(str(g))
    for f in rd.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        vt = f.types[0]
        val = f.contents()
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(f.name, val, vt, sub_type=f.types[-1])
        else:
            w.add_key_value(f.name, val, vt)
    w.add_float32("gemma3.final_logit_softcapping", 30.0)
    for t in rd.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_shape=list(reversed(t.shape.tolist())), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = run("convert", "--from-gguf", tmp_path / "cap.gguf", tmp_path / "o")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 3 and len(lines) == 1, r.stderr
    assert "gemma3.final_logit_softcapping" in lines[0], lines[0]
