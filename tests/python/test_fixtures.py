"""scripts/make_fixtures.py and scripts/mlx_reference.py end to end: build a few fixtures into a
temporary folder, check what mlx-lm wrote (config, quantization entries, tokenizer), load them
with mlx-lm, generate greedily and take a teacher-forced top-k trace."""
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKE = ROOT / "scripts" / "make_fixtures.py"
REF = ROOT / "scripts" / "mlx_reference.py"


@pytest.fixture(scope="module")
def fixtures(all_fixtures):
    return all_fixtures


def test_writes_every_fixture(fixtures):
    names = sorted(p.name for p in fixtures.iterdir())
    fams = ["gemma3_text", "llama", "mistral", "phi3", "qwen2", "qwen3", "qwen3_moe"]
    want = sorted([f"{f}-{m}" for f in fams for m in ("affine4", "affine8", "mxfp4", "mxfp8")] +
                  [f"{f}-bf16" for f in fams if f != "qwen3_moe"] + ["qwen3_moe-f32", "llama-mixed"] +
                  ["llama_h576-bf16", "llama_h576-affine4", "gemma3_h640-bf16", "qwen3_moe_h320-f32"] +
                  ["mistral-nvfp4-f32", "gemma3_text-affine8-f32", "qwen3_moe-mxfp4-f32", "phi3-mxfp8-f32",
                   "llama_h576-affine4-f32"])
    assert names == want


def test_config_and_quantization(fixtures):
    out = fixtures
    cfg = json.loads((out / "llama-affine4" / "config.json").read_text())
    assert cfg["model_type"] == "llama"
    assert cfg["rope_scaling"]["rope_type"] == "llama3"
    assert cfg["tie_word_embeddings"] is True
    assert cfg["quantization"] == {"group_size": 64, "bits": 4, "mode": "affine"}
    g = json.loads((out / "gemma3_text-mxfp8" / "config.json").read_text())
    assert g["model_type"] == "gemma3_text" and g["sliding_window_pattern"] == 2
    assert g["quantization"]["mode"] == "mxfp8" and g["quantization"]["group_size"] == 32
    moe = json.loads((out / "qwen3_moe-affine4" / "config.json").read_text())
    # The model's own quant_predicate keeps the router at 8 bits.
    assert moe["quantization"]["model.layers.0.mlp.gate"]["bits"] == 8
    mixed = json.loads((out / "llama-mixed" / "config.json").read_text())
    q = mixed["quantization"]
    assert q["bits"] == 4
    assert q["model.layers.0.mlp.down_proj"] == {"group_size": 64, "bits": 8, "mode": "affine"}
    assert q["model.embed_tokens"]["bits"] == 6
    assert "model.layers.1.mlp.down_proj" not in q


def test_safetensors_hold_quantized_tensors(fixtures):
    import mlx.core as mx
    out = fixtures
    w = mx.load(str(out / "llama-affine4" / "model.safetensors"))
    assert w["model.layers.0.self_attn.q_proj.weight"].dtype == mx.uint32
    assert "model.layers.0.self_attn.q_proj.scales" in w and "model.layers.0.self_attn.q_proj.biases" in w
    w8 = mx.load(str(out / "llama-mxfp8" / "model.safetensors"))
    assert "model.layers.0.self_attn.q_proj.scales" in w8
    assert "model.layers.0.self_attn.q_proj.biases" not in w8  # mxfp has no biases
    assert w8["model.layers.0.self_attn.q_proj.scales"].dtype == mx.uint8


def test_f32_twins_are_float32(fixtures):
    """The float32-activation twins: same quantization as their bf16 fixture, float32 everywhere
    else (affine scales/biases, norms), which is what makes mlx-lm accumulate in fp32."""
    import mlx.core as mx
    for name, bf16 in [("llama_h576-affine4-f32", "llama_h576-affine4"), ("phi3-mxfp8-f32", "phi3-mxfp8")]:
        cfg = json.loads((fixtures / name / "config.json").read_text())
        assert cfg["quantization"] == json.loads((fixtures / bf16 / "config.json").read_text())["quantization"]
        w = mx.load(str(fixtures / name / "model.safetensors"))
        ref = mx.load(str(fixtures / bf16 / "model.safetensors"))
        assert sorted(w) == sorted(ref)
        for k, v in w.items():
            if ref[k].dtype == mx.bfloat16:
                assert v.dtype == mx.float32, f"{name} {k}: {v.dtype}"
            else:
                assert v.dtype == ref[k].dtype and v.shape == ref[k].shape, f"{name} {k}"
    w = mx.load(str(fixtures / "llama_h576-affine4-f32" / "model.safetensors"))
    assert w["model.layers.0.self_attn.q_proj.scales"].dtype == mx.float32
    assert w["model.layers.0.self_attn.q_proj.biases"].dtype == mx.float32


def test_deterministic(tmp_path, fixtures):
    out = fixtures
    r = subprocess.run([sys.executable, str(MAKE), str(tmp_path), "--families", "llama", "--modes", "affine4",
                        "--no-mixed"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()
    assert digest(tmp_path / "llama-affine4" / "model.safetensors") == digest(out / "llama-affine4" / "model.safetensors")


@pytest.mark.parametrize("name", ["llama-mixed", "gemma3_text-affine4", "qwen3_moe-mxfp8"])
def test_mlx_lm_loads_and_generates(fixtures, tmp_path, name):
    out = fixtures
    trace = tmp_path / "trace.json"
    r = subprocess.run([sys.executable, str(REF), str(out / name), "--prompt", "The quick brown fox jumps over",
                        "--out", str(trace), "--top-k", "4"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    t = json.loads(trace.read_text())
    cfg = json.loads((out / name / "config.json").read_text())
    assert len(t["prompt_ids"]) >= 3
    assert len(t["generated_ids"]) == 32
    assert all(0 <= i < cfg["vocab_size"] for i in t["prompt_ids"] + t["generated_ids"])
    assert len(t["positions"]) == len(t["prompt_ids"]) + 32
    # Teacher-forced argmax reproduces greedy generation at decided positions.
    n = len(t["prompt_ids"])
    decided = 0
    for j, tok in enumerate(t["generated_ids"]):
        p = t["positions"][n - 1 + j]
        if p["logits"][0] - p["logits"][1] >= 2.0:
            decided += 1
            assert p["ids"][0] == tok
    assert decided > 0, "no decided positions: the fixture's logits are degenerate"
