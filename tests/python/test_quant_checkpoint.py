"""Checkpoints written by mlx-lm (random tiny models, nn.quantize through mlx_lm.utils.quantize_model,
saved with save_model / save_config) load in mlxcel with every tensor bit-identical to mx.load, and
`mlxcel inspect` reports exactly the quantized modules, modes, bits and group sizes mlx-lm's own
loader builds."""
import json
import subprocess
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx_lm.utils as lm_utils
import numpy as np
import pytest
from mlx.utils import tree_flatten

from _quant_util import CLI, DRIVER, assert_bits_equal

QWEN3 = dict(model_type="qwen3", hidden_size=128, num_hidden_layers=2, intermediate_size=256,
             num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6, vocab_size=256,
             rope_theta=10000.0, max_position_embeddings=512, tie_word_embeddings=False)
QWEN3_MOE = dict(model_type="qwen3_moe", hidden_size=128, num_hidden_layers=2, intermediate_size=256,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6, vocab_size=256,
                 rope_theta=10000.0, max_position_embeddings=512, tie_word_embeddings=True, num_experts=4,
                 num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[], moe_intermediate_size=64,
                 norm_topk_prob=True)


def mixed_predicate(path, module):
    if path.endswith("v_proj") or path.endswith("down_proj"):
        return {"group_size": 32, "bits": 8}  # no "mode": affine
    if path == "model.layers.0.self_attn.q_proj":
        return {"group_size": 128, "bits": 3, "mode": "affine"}
    if path == "lm_head":
        return {"bits": 6, "group_size": 64}
    if path == "model.layers.1.self_attn.k_proj":
        return False
    return True


CASES = {
    "affine4": (QWEN3, dict(group_size=64, bits=4, mode="affine"), None),
    "affine8": (QWEN3, dict(group_size=32, bits=8, mode="affine"), None),
    "mixed": (QWEN3, dict(group_size=64, bits=4, mode="affine"), mixed_predicate),
    "mxfp4": (QWEN3_MOE, dict(group_size=None, bits=None, mode="mxfp4"), None),
    "mxfp8": (QWEN3_MOE, dict(group_size=None, bits=None, mode="mxfp8"), None),
    "nvfp4": (QWEN3_MOE, dict(group_size=None, bits=None, mode="nvfp4"), None),
}


def build(tmp_path: Path, case: str, shards: int = 1, dtype=mx.bfloat16):
    args, q, pred = CASES[case]
    model_cls, args_cls = lm_utils._get_classes(args)
    model = model_cls(args_cls.from_dict(args))
    model.set_dtype(dtype)
    mx.eval(model.parameters())
    config = dict(args)
    model, config = lm_utils.quantize_model(model, config, q["group_size"], q["bits"], mode=q["mode"],
                                            quant_predicate=pred)
    if case == "mixed":
        config["quantization"]["model.layers.1.self_attn.k_proj"] = False
    out = tmp_path / case
    if shards > 1:
        orig = lm_utils.make_shards

        def split(weights, max_file_size_gb=5):
            items = list(weights.items())
            step = (len(items) + shards - 1) // shards
            return [dict(items[i:i + step]) for i in range(0, len(items), step)]

        lm_utils.make_shards = split
        try:
            lm_utils.save_model(out, model)
        finally:
            lm_utils.make_shards = orig
    else:
        lm_utils.save_model(out, model)
    lm_utils.save_config(config, out / "config.json")
    return out


def mlx_modules(path: Path):
    """Quantized modules as mlx-lm's loader builds them: path -> (mode, bits, group_size)."""
    model, _ = lm_utils.load_model(path)
    found = {}
    for name, m in model.named_modules():
        if hasattr(m, "bits") and hasattr(m, "group_size") and hasattr(m, "mode"):
            found[name] = (m.mode, m.bits, m.group_size)
    return found


def load_all(path: Path):
    ref = {}
    for f in sorted(path.glob("model*.safetensors")):
        ref.update(mx.load(str(f)))
    return ref


def check_checkpoint(path: Path, tmp_path: Path):
    dump = tmp_path / f"{path.name}_dump.safetensors"
    r = subprocess.run([str(DRIVER), "dump", str(path), str(dump)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ours = mx.load(str(dump))
    ref = load_all(path)
    assert set(ours) == set(ref)
    for k in ref:
        assert_bits_equal(ours[k], ref[k], k)

    r = subprocess.run([str(CLI), "inspect", "-m", str(path), "--json", "--backend", "cpu"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    got = {m["path"]: (m["mode"], m["bits"], m["group_size"]) for m in info["modules"]}
    assert got == mlx_modules(path)
    assert info["total_bytes"] == sum(v.nbytes for v in ref.values())
    assert all(m["route"] == "native" for m in info["modules"])
    return info


@pytest.mark.parametrize("case", list(CASES))
def test_mlx_lm_checkpoint_loads_bit_identical(tmp_path, case):
    path = build(tmp_path, case)
    info = check_checkpoint(path, tmp_path)
    if case == "mixed":
        modes = {m["path"]: (m["bits"], m["group_size"]) for m in info["modules"]}
        assert modes["model.layers.0.self_attn.q_proj"] == (3, 128)
        assert modes["model.layers.1.mlp.down_proj"] == (8, 32)
        assert modes["lm_head"] == (6, 64)
        assert "model.layers.1.self_attn.k_proj" not in modes
    if case in ("mxfp4", "mxfp8", "nvfp4"):
        modes = {m["path"]: m["mode"] for m in info["modules"]}
        assert modes["model.layers.0.mlp.gate"] == "affine"  # router override: a dict without mode
        assert modes["model.layers.0.mlp.switch_mlp.gate_proj"] == case


def test_sharded_checkpoint_with_index_and_glob(tmp_path):
    path = build(tmp_path, "mixed", shards=3, dtype=mx.float16)
    assert len(list(path.glob("model-*.safetensors"))) == 3
    check_checkpoint(path, tmp_path)
    (path / "model.safetensors.index.json").unlink()  # mlx-lm's glob path
    check_checkpoint(path, tmp_path)


def test_text_inspect_and_gpu_routes(tmp_path):
    path = build(tmp_path, "nvfp4")
    r = subprocess.run([str(CLI), "inspect", "-m", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "model.layers.*.mlp.switch_mlp.gate_proj" in r.stdout and "nvfp4" in r.stdout
    assert "total weight bytes" in r.stdout
    r = subprocess.run([str(CLI), "inspect", "-m", str(path), "--json", "--backend", "rocm"], capture_output=True,
                       text=True, timeout=60)
    info = json.loads(r.stdout)
    routes = {m["path"]: m["route"] for m in info["modules"]}
    assert routes["model.layers.0.mlp.switch_mlp.up_proj"].startswith("convert -> affine 8-bit gs 32")
    assert routes["model.layers.0.mlp.gate"] == "native"


def test_corrupt_checkpoint_is_refused_with_names(tmp_path):
    path = build(tmp_path, "mxfp4")
    f = path / "model.safetensors"
    w = mx.load(str(f))
    s = np.array(w["model.layers.1.self_attn.o_proj.scales"])
    s[3, 1] = 255
    w["model.layers.1.self_attn.o_proj.scales"] = mx.array(s)
    mx.save_safetensors(str(f), w, metadata={"format": "mlx"})
    r = subprocess.run([str(CLI), "inspect", "-m", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "model.layers.1.self_attn.o_proj" in r.stderr and "row 3, group 1" in r.stderr and "0xFF" in r.stderr
