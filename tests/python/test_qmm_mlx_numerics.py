"""The CPU backend's quantized linear against live MLX quantized_matmul (transpose=True).

numerics=mlx must be bit-identical to MLX's CPU backend for every mode, bit width, group size
and activation dtype, on both kernel paths: that is the arithmetic the model conformance gate
relies on (backend/cpu/mlx_matmul.h). numerics=fast accumulates in fp32; it is checked against
MLX run on float32 inputs, within the fp32 dot-product bound."""
import mlx.core as mx
import numpy as np
import pytest

from _quant_util import FLOAT_DTYPES, assert_bits_equal, run_driver

SEED = np.random.SeedSequence().entropy % (2**32)
AFFINE = [(b, g) for b in (2, 3, 4, 5, 6, 8) for g in (32, 64, 128)]
FP = [("mxfp4", 4, 32), ("mxfp8", 8, 32), ("nvfp4", 4, 16)]


def make(mode, bits, gs, dtype, M, N, K, seed):
    rng = np.random.default_rng(seed)
    w = mx.array(rng.standard_normal((N, K)).astype(np.float32)).astype(dtype)
    x = mx.array(rng.standard_normal((M, K)).astype(np.float32)).astype(dtype)
    r = mx.quantize(w, group_size=gs, bits=bits, mode=mode)
    q = {"weight": r[0], "scales": r[1]}
    if mode == "affine":
        q["biases"] = r[2]
    return x, q


@pytest.mark.parametrize("isa", ["scalar", "avx2"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("bits,gs", AFFINE)
def test_affine_mlx_numerics_bit_identical(tmp_path, isa, dtype, bits, gs):
    # N = 21 leaves a partial 8-row tile; M = 3 exercises several rows per tile.
    x, q = make("affine", bits, gs, FLOAT_DTYPES[dtype], 3, 21, 2 * 128, SEED + bits * 131 + gs)
    ref = mx.quantized_matmul(x, q["weight"], q["scales"], q["biases"], transpose=True, group_size=gs, bits=bits)
    ours = run_driver("qmm_cpu", {"x": x, **q}, tmp_path, mode="affine", bits=bits, gs=gs, numerics="mlx",
                      isa=isa)["y"]
    assert_bits_equal(ours, ref, f"affine {bits}-bit gs {gs} {dtype} {isa} (seed {SEED})")


@pytest.mark.parametrize("isa", ["scalar", "avx2"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("mode,bits,gs", FP)
def test_fp_modes_mlx_numerics_bit_identical(tmp_path, isa, dtype, mode, bits, gs):
    x, q = make(mode, bits, gs, FLOAT_DTYPES[dtype], 2, 19, 256, SEED + bits * 17 + gs)
    ref = mx.quantized_matmul(x, q["weight"], q["scales"], transpose=True, group_size=gs, bits=bits, mode=mode)
    ours = run_driver("qmm_cpu", {"x": x, **q}, tmp_path, mode=mode, bits=bits, gs=gs, numerics="mlx",
                      isa=isa)["y"]
    assert_bits_equal(ours, ref, f"{mode} {dtype} {isa} (seed {SEED})")


def test_bf16_accumulation_is_what_mlx_does(tmp_path):
    """Guards the premise: MLX's CPU result for bf16 inputs is not the fp32-accumulated one, so
    bit identity above is a real check of the bf16 chain (a newer MLX that accumulates in fp32
    fails here and the emulation must follow it)."""
    x, q = make("affine", 4, 64, mx.bfloat16, 4, 64, 1024, SEED)
    ref = mx.quantized_matmul(x, q["weight"], q["scales"], q["biases"], transpose=True, group_size=64, bits=4)
    fast = run_driver("qmm_cpu", {"x": x, **q}, tmp_path, mode="affine", bits=4, gs=64, numerics="fast")["y"]
    assert not np.array_equal(np.array(fast.astype(mx.float32)), np.array(ref.astype(mx.float32)))


@pytest.mark.parametrize("isa", ["scalar", "avx2"])
@pytest.mark.parametrize("mode,bits,gs", [("affine", 4, 64), ("affine", 8, 64), ("affine", 3, 32)] + FP)
def test_fast_numerics_fp32_bound(tmp_path, isa, mode, bits, gs):
    K = 512
    x, q = make(mode, bits, gs, mx.float32, 5, 37, K, SEED + 7 * bits + gs)
    ref = mx.quantized_matmul(x, q["weight"], q["scales"], q.get("biases"), transpose=True, group_size=gs,
                              bits=bits, mode=mode)
    ours = run_driver("qmm_cpu", {"x": x, **q}, tmp_path, mode=mode, bits=bits, gs=gs, numerics="fast",
                      isa=isa)["y"]
    wd = mx.dequantize(q["weight"], q["scales"], q.get("biases"), group_size=gs, bits=bits, mode=mode,
                       dtype=mx.float32)
    bound = 8 * K * 2.0**-24 * np.array(mx.abs(x) @ mx.abs(wd).T, dtype=np.float64) + 1e-30
    err = np.abs(np.array(ours, dtype=np.float64) - np.array(ref, dtype=np.float64))
    assert np.max(err / bound) <= 1.0, f"{mode} {bits} {gs} {isa}: error {err.max():.3g} (seed {SEED})"
