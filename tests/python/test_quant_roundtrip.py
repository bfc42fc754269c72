"""quantize and dequantize are bit-identical with MLX's CPU backend for every affine bits x group
size, the three fp modes, and F32 / BF16 / F16 inputs, on fresh random inputs."""
import itertools

import mlx.core as mx
import numpy as np
import pytest

from _quant_util import FLOAT_DTYPES, assert_bits_equal, random_weights, run_driver

AFFINE = list(itertools.product([1, 2, 3, 4, 5, 6, 8], [32, 64, 128]))
FP = [("mxfp4", 4, 32), ("mxfp8", 8, 32), ("nvfp4", 4, 16)]
SEED = np.random.SeedSequence().entropy % (2**32)


@pytest.mark.parametrize("dtype", list(FLOAT_DTYPES))
@pytest.mark.parametrize("bits,gs", AFFINE)
def test_affine_quantize_dequantize_bit_exact(tmp_path, dtype, bits, gs):
    w = random_weights((2, 12, 256), FLOAT_DTYPES[dtype], SEED + bits * 1000 + gs, gs)
    wq, s, b = mx.quantize(w, group_size=gs, bits=bits, mode="affine")
    out = run_driver("quantize", {"w": w}, tmp_path, mode="affine", bits=bits, gs=gs)
    assert_bits_equal(out["weight"], wq, f"seed {SEED} weight")
    assert_bits_equal(out["scales"], s, f"seed {SEED} scales")
    assert_bits_equal(out["biases"], b, f"seed {SEED} biases")
    ref = mx.dequantize(wq, s, b, group_size=gs, bits=bits, mode="affine")
    deq = run_driver("dequantize", {"weight": wq, "scales": s, "biases": b}, tmp_path, mode="affine", bits=bits, gs=gs)
    assert_bits_equal(deq["w"], ref, f"seed {SEED} dequantize")


@pytest.mark.parametrize("dtype", list(FLOAT_DTYPES))
@pytest.mark.parametrize("mode,bits,gs", FP)
def test_fp_quantize_dequantize_bit_exact(tmp_path, dtype, mode, bits, gs):
    w = random_weights((3, 16, 256), FLOAT_DTYPES[dtype], SEED + 7 + bits + gs, gs)
    wq, s = mx.quantize(w, mode=mode)
    out = run_driver("quantize", {"w": w}, tmp_path, mode=mode)
    assert_bits_equal(out["weight"], wq, f"seed {SEED} {mode} weight")
    assert_bits_equal(out["scales"], s, f"seed {SEED} {mode} scales")
    for odt in ["bfloat16", "float32", "float16"]:
        ref = mx.dequantize(wq, s, mode=mode, dtype=FLOAT_DTYPES[odt])
        names = {"bfloat16": "BF16", "float32": "F32", "float16": "F16"}
        deq = run_driver("dequantize", {"weight": wq, "scales": s}, tmp_path, mode=mode, dtype=names[odt])
        assert_bits_equal(deq["w"], ref, f"seed {SEED} {mode} dequantize to {odt}")


@pytest.mark.parametrize("mode", ["mxfp4", "mxfp8", "nvfp4"])
def test_fp_dequantize_every_scale_and_code(tmp_path, mode):
    """Every scale byte against every element code. The scale bytes MLX decodes to inf/NaN
    (E8M0 255, E4M3 0x7F/0xFF) are mlxcel's defined exception: their groups dequantize to 0."""
    gs = 16 if mode == "nvfp4" else 32
    bits = 8 if mode == "mxfp8" else 4
    row_bytes = gs * bits // 8
    rng = np.random.default_rng(SEED)
    # Each row: every byte value once (all element codes, all nibble pairs), then random bytes.
    wbytes = np.concatenate([np.tile(np.arange(256, dtype=np.uint8), (256, 1)),
                             rng.integers(0, 256, size=(256, row_bytes * 2), dtype=np.uint8)], axis=1)
    wq = mx.array(wbytes).view(mx.uint32)
    ngroups = wbytes.shape[1] // row_bytes
    s = mx.array(np.repeat(np.arange(256, dtype=np.uint8).reshape(256, 1), ngroups, axis=1))
    invalid = [0x7F, 0xFF] if mode == "nvfp4" else [0xFF]
    valid = np.array([i for i in range(256) if i not in invalid])
    for odt, name in [(mx.bfloat16, "BF16"), (mx.float32, "F32"), (mx.float16, "F16")]:
        ref = mx.dequantize(wq, s, mode=mode, dtype=odt)
        if mode == "mxfp8":
            # E4M3 elements 0x7F/0xFF (NaN in MLX) are the other defined exception: they decode to 0.
            # (Where the scale itself overflows F16, 0 * inf stays NaN in both.)
            finite_scale = np.arange(256)[:, None] < (143 if name == "F16" else 255)
            mask = ((wbytes & 0x7F) == 0x7F) & finite_scale
            ref = mx.where(mx.array(mask), mx.array(0.0, dtype=odt), ref)
        deq = run_driver("dequantize", {"weight": wq, "scales": s}, tmp_path, mode=mode, dtype=name)["w"]
        assert_bits_equal(deq[mx.array(valid)], ref[mx.array(valid)], f"{mode} every scale to {name}")
        assert np.all(np.array(deq[mx.array(invalid)].astype(mx.float32)) == 0.0), "invalid scales must give 0"
        if name != "F16":  # F16 overflows to inf for large scales, and 0 * inf is NaN (as in MLX)
            assert not np.isnan(np.array(deq.astype(mx.float32))).any()


def test_fp_quantize_near_power_of_two_and_ties(tmp_path):
    """Group maxima just above / below powers of two (E8M0 rounding) and elements on E2M1 ties."""
    rng = np.random.default_rng(SEED)
    rows = []
    for e in range(-20, 20):
        for ulp in (-2, -1, 0, 1, 2):
            amax = np.float32(6.0 * 2.0**e)
            amax = np.nextafter(amax, np.float32(np.inf if ulp > 0 else -np.inf), dtype=np.float32) if ulp else amax
            if abs(ulp) == 2:
                amax = np.nextafter(amax, np.float32(np.inf if ulp > 0 else -np.inf), dtype=np.float32)
            g = (rng.integers(-24, 25, size=32).astype(np.float32) / 4.0) * np.float32(2.0**e)
            g[0] = amax
            rows.append(g)
    w = mx.array(np.stack(rows).reshape(-1, 64))
    for mode in ["mxfp4", "mxfp8", "nvfp4"]:
        for dt in [mx.float32, mx.bfloat16]:
            x = w.astype(dt)
            wq, s = mx.quantize(x, mode=mode)
            out = run_driver("quantize", {"w": x}, tmp_path, mode=mode)
            assert_bits_equal(out["scales"], s, f"{mode} {dt} scales")
            assert_bits_equal(out["weight"], wq, f"{mode} {dt} weight")


def test_nvfp4_global_scale(tmp_path):
    w = random_weights((4, 8, 128), mx.float32, SEED + 99, 16)
    gsc = mx.max(mx.abs(w)).astype(mx.float32)
    wq, s = mx.quantize(w, mode="nvfp4", global_scale=gsc)
    out = run_driver("quantize", {"w": w, "global_scale": gsc.reshape(1)}, tmp_path, mode="nvfp4")
    assert_bits_equal(out["scales"], s, "nvfp4 global scales")
    assert_bits_equal(out["weight"], wq, "nvfp4 global weight")
    for odt, name in [(mx.bfloat16, "BF16"), (mx.float32, "F32"), (mx.float16, "F16")]:
        ref = mx.dequantize(wq, s, mode="nvfp4", global_scale=gsc, dtype=odt)  # F32: promoted
        deq = run_driver("dequantize", {"weight": wq, "scales": s, "global_scale": gsc.reshape(1)}, tmp_path,
                         mode="nvfp4", dtype=name)
        assert_bits_equal(deq["w"], ref, f"nvfp4 global dequantize {name}")


@pytest.mark.parametrize("mode", ["mxfp4", "mxfp8", "nvfp4"])
def test_fp_quantize_non_finite_inputs_match_mlx(tmp_path, mode):
    """NaN / inf weights: MLX stores E8M0 byte 128 (mx modes) or E4M3 0x7E (nvfp4); so do we."""
    rng = np.random.default_rng(SEED + 3)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    x[0, 3] = np.nan
    x[1, 40] = np.inf
    x[2, 7] = -np.inf
    w = mx.array(x)
    wq, s = mx.quantize(w, mode=mode)
    out = run_driver("quantize", {"w": w}, tmp_path, mode=mode)
    assert_bits_equal(out["scales"], s, f"{mode} non-finite scales")
    assert_bits_equal(out["weight"], wq, f"{mode} non-finite weight")
