"""Foreign checkpoint formats against mlx-lm's own conversions: HF fine-grained FP8 blocks
(deepseek_v3's sanitize: mx.from_fp8, block scale multiply, cast) and AutoAWQ repacking
(mlx_lm.utils._transform_awq_weights)."""
import json
import subprocess

import mlx.core as mx
import mlx_lm.utils as lm_utils
import numpy as np
import pytest
from mlx.utils import tree_flatten

from _quant_util import CLI, assert_bits_equal, run_driver

SEED = np.random.SeedSequence().entropy % (2**32)


def mlx_lm_fp8_dequant(weight, scale_inv, bs=128, dtype=mx.bfloat16):
    """The body of mlx_lm.models.deepseek_v3.Model.sanitize's dequant, called on its inputs."""
    weight = mx.from_fp8(weight, dtype=dtype)
    m, n = weight.shape
    pad_bottom, pad_side = (-m) % bs, (-n) % bs
    weight = mx.pad(weight, ((0, pad_bottom), (0, pad_side)))
    weight = weight.reshape(((m + pad_bottom) // bs, bs, (n + pad_side) // bs, bs))
    weight = (weight * scale_inv[:, None, :, None]).reshape(m + pad_bottom, n + pad_side)
    return weight[:m, :n]


@pytest.mark.parametrize("scale_dtype", [mx.float32, mx.bfloat16])
def test_fp8_block_dequantize_and_mxfp8_requantize(tmp_path, scale_dtype):
    rng = np.random.default_rng(SEED)
    m, n = 300, 416  # ragged edge blocks in both directions
    wbytes = rng.integers(0, 256, size=(m, n), dtype=np.uint8)
    wbytes[(wbytes & 0x7F) == 0x7F] = 0x3C  # NaN codes are covered by the C++ tests
    w = mx.array(wbytes)
    s = mx.array(np.exp(rng.uniform(-6, 2, size=((m + 127) // 128, (n + 127) // 128))).astype(np.float32)).astype(scale_dtype)
    ref = mlx_lm_fp8_dequant(w, s)
    out = run_driver("fp8", {"weight": w, "scale_inv": s}, tmp_path)
    assert_bits_equal(out["w"], ref.astype(mx.bfloat16), f"fp8 dequant (seed {SEED})")
    # The exact product (e4m3 x scale fits fp32's significand) is what gets re-quantized.
    exact = mlx_lm_fp8_dequant(w, s.astype(mx.float32), dtype=mx.float32)
    assert_bits_equal(out["w32"], exact, f"fp8 dequant f32 (seed {SEED})")
    wq, sc = mx.quantize(exact, mode="mxfp8")
    assert_bits_equal(out["weight"], wq, "mxfp8 requant weight")
    assert_bits_equal(out["scales"], sc, "mxfp8 requant scales")


def test_awq_repack_matches_mlx_lm(tmp_path):
    rng = np.random.default_rng(SEED + 1)
    in_f, out_f, gs = 256, 64, 128
    qweight = mx.array(rng.integers(-2**31, 2**31, size=(in_f, out_f // 8), dtype=np.int64).astype(np.int32))
    qzeros = mx.array(rng.integers(-2**31, 2**31, size=(in_f // gs, out_f // 8), dtype=np.int64).astype(np.int32))
    scales = mx.array(rng.uniform(0.001, 0.1, size=(in_f // gs, out_f)).astype(np.float16))
    for with_zeros in (True, False):
        weights = {"l.qweight": qweight, "l.scales": scales}
        if with_zeros:
            weights["l.qzeros"] = qzeros
        ref, qcfg = lm_utils._transform_awq_weights(dict(weights), {"bits": 4, "group_size": gs})
        assert qcfg == {"group_size": gs, "bits": 4}
        inputs = {"qweight": qweight, "scales": scales}
        if with_zeros:
            inputs["qzeros"] = qzeros
        out = run_driver("awq", inputs, tmp_path, mode="affine", bits=4, gs=gs)
        for k in ("weight", "scales", "biases"):
            assert_bits_equal(out[k], ref[f"l.{k}"], f"awq {k} zeros={with_zeros}")


def test_fp8_checkpoint_inspect_route(tmp_path):
    rng = np.random.default_rng(SEED + 2)
    d = tmp_path / "fp8"
    d.mkdir()
    w = mx.array(rng.integers(0, 0x7E, size=(256, 128), dtype=np.uint8))
    tensors = {"model.layers.0.mlp.up_proj.weight": w,
               "model.layers.0.mlp.up_proj.weight_scale_inv": mx.ones((2, 1), dtype=mx.bfloat16),
               "model.norm.weight": mx.ones((128,), dtype=mx.bfloat16)}
    mx.save_safetensors(str(d / "model.safetensors"), tensors)
    # mx.save_safetensors writes U8; rewrite the dtype in the header as HF FP8 files carry it.
    raw = bytearray((d / "model.safetensors").read_bytes())
    n = int.from_bytes(raw[:8], "little")
    header = raw[8:8 + n].decode().replace('"dtype":"U8"', '"dtype":"F8_E4M3"').encode()
    (d / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(raw[8 + n:]))
    (d / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                                                                        "weight_block_size": [128, 128]}}))
    r = subprocess.run([str(CLI), "inspect", "-m", str(d), "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    (m,) = info["modules"]
    assert m["path"] == "model.layers.0.mlp.up_proj" and m["mode"] == "mxfp8" and m["origin"] == "fp8-block"
    assert m["route"].startswith("fp8 block -> mxfp8 at load")
