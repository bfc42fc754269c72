"""quantized_matmul, gather_qmm and QuantizedEmbedding against live MLX on fresh random inputs.

Bound (fp32): |ours - mlx| <= 8 * K * 2^-24 * (|x| @ |dequant(w)|) + 1e-30, the textbook error
bound of a length-K fp32 dot product (MLX accumulates in fp32, mlxcel in double) with margin.
Embedding lookup is bit-identical (it is a dequantize)."""
import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from _quant_util import assert_bits_equal, run_driver

SEED = np.random.SeedSequence().entropy % (2**32)
MODES = [("affine", 4, 64), ("affine", 3, 32), ("affine", 8, 128), ("affine", 2, 64), ("affine", 6, 32),
         ("affine", 5, 128), ("mxfp4", 4, 32), ("mxfp8", 8, 32), ("nvfp4", 4, 16)]


def quant(w, mode, bits, gs):
    r = mx.quantize(w, group_size=gs, bits=bits, mode=mode)
    d = {"weight": r[0], "scales": r[1]}
    if mode == "affine":
        d["biases"] = r[2]
    return d


def deq(q, mode, bits, gs):
    return mx.dequantize(q["weight"], q["scales"], q.get("biases"), group_size=gs, bits=bits, mode=mode,
                         dtype=mx.float32)


def check_close(ours, ref, bound_ref, K, what):
    assert ours.shape == ref.shape and ours.dtype == ref.dtype, f"{what}: {ours.shape} {ours.dtype} vs {ref.shape} {ref.dtype}"
    err = np.abs(np.array(ours, dtype=np.float64) - np.array(ref, dtype=np.float64))
    tol = 8 * K * 2.0**-24 * np.array(bound_ref, dtype=np.float64) + 1e-30
    worst = np.max(err / tol)
    assert worst <= 1.0, f"{what} (seed {SEED}): error {np.max(err):.3g} exceeds the fp32 bound (ratio {worst:.3g})"


@pytest.mark.parametrize("mode,bits,gs", MODES)
@pytest.mark.parametrize("transpose", [True, False])
def test_quantized_matmul(tmp_path, mode, bits, gs, transpose):
    rng = np.random.default_rng(SEED + bits * 7 + gs)
    K, N = 256, 128
    w = mx.array(rng.standard_normal((N, K) if transpose else (K, N)).astype(np.float32))
    x = mx.array(rng.standard_normal((3, 5, K)).astype(np.float32))
    q = quant(w, mode, bits, gs)
    ref = mx.quantized_matmul(x, q["weight"], q["scales"], q.get("biases"), transpose=transpose, group_size=gs, bits=bits, mode=mode)
    out = run_driver("qmm", {"x": x, **q}, tmp_path, mode=mode, bits=bits, gs=gs, transpose=int(transpose))["y"]
    wd = deq(q, mode, bits, gs)
    bound = mx.abs(x) @ (mx.abs(wd).T if transpose else mx.abs(wd))
    check_close(out, ref, bound, K, f"qmm {mode} {bits} {gs} t={transpose}")


@pytest.mark.parametrize("mode,bits,gs", [("affine", 4, 64), ("mxfp4", 4, 32)])
def test_quantized_matmul_batched_weights_and_vector(tmp_path, mode, bits, gs):
    rng = np.random.default_rng(SEED + 5)
    K, N = 128, 64
    w = mx.array(rng.standard_normal((2, N, K)).astype(np.float32))
    x = mx.array(rng.standard_normal((2, 3, K)).astype(np.float32))
    q = quant(w, mode, bits, gs)
    ref = mx.quantized_matmul(x, q["weight"], q["scales"], q.get("biases"), transpose=True, group_size=gs, bits=bits, mode=mode)
    out = run_driver("qmm", {"x": x, **q}, tmp_path, mode=mode, bits=bits, gs=gs)["y"]
    bound = mx.abs(x) @ mx.swapaxes(mx.abs(deq(q, mode, bits, gs)), -1, -2)
    check_close(out, ref, bound, K, "batched qmm")


def test_quantized_matmul_bf16_output_dtype(tmp_path):
    """bf16 activations with bf16 scales give bf16 (MLX's promote rule)."""
    rng = np.random.default_rng(SEED + 11)
    w = mx.array(rng.standard_normal((64, 128)).astype(np.float32)).astype(mx.bfloat16)
    x = mx.array(rng.standard_normal((2, 128)).astype(np.float32)).astype(mx.bfloat16)
    q = quant(w, "affine", 4, 64)
    ref = mx.quantized_matmul(x, q["weight"], q["scales"], q.get("biases"), transpose=True, group_size=64, bits=4)
    out = run_driver("qmm", {"x": x, **q}, tmp_path, mode="affine", bits=4, gs=64)["y"]
    assert out.dtype == ref.dtype == mx.bfloat16
    # MLX rounds its bf16 accumulation; allow a few bf16 ulps of the magnitude bound.
    bound = np.array((mx.abs(x).astype(mx.float32) @ mx.abs(deq(q, "affine", 4, 64)).T))
    err = np.abs(np.array(out.astype(mx.float32)) - np.array(ref.astype(mx.float32)))
    assert np.all(err <= 4 * 2.0**-8 * bound + 1e-6)


@pytest.mark.parametrize("mode,bits,gs", [("affine", 4, 64), ("affine", 8, 32), ("mxfp4", 4, 32),
                                          ("mxfp8", 8, 32), ("nvfp4", 4, 16)])
@pytest.mark.parametrize("transpose", [True, False])
def test_gather_qmm(tmp_path, mode, bits, gs, transpose):
    rng = np.random.default_rng(SEED + 13 + bits)
    E, K, N, M = 4, 128, 64, 2
    w = mx.array(rng.standard_normal((E, N, K) if transpose else (E, K, N)).astype(np.float32))
    x = mx.array(rng.standard_normal((6, M, K)).astype(np.float32))
    lhs = mx.array(rng.integers(0, 6, size=(3, 5)).astype(np.uint32))
    rhs = mx.array(rng.integers(0, E, size=(3, 5)).astype(np.uint32))
    q = quant(w, mode, bits, gs)
    ref = mx.gather_qmm(x, q["weight"], q["scales"], q.get("biases"), lhs_indices=lhs, rhs_indices=rhs, transpose=transpose, group_size=gs, bits=bits,
                        mode=mode)
    out = run_driver("gather_qmm", {"x": x, **q, "lhs_indices": lhs, "rhs_indices": rhs}, tmp_path, mode=mode,
                     bits=bits, gs=gs, transpose=int(transpose))["y"]
    wd = deq(q, mode, bits, gs)
    wt = mx.swapaxes(mx.abs(wd), -1, -2) if transpose else mx.abs(wd)
    bound = mx.abs(x)[lhs] @ wt[rhs]
    check_close(out, ref, bound, K, f"gather_qmm {mode}")


def test_gather_qmm_switch_glu_pattern(tmp_path):
    """mlx-lm SwitchGLU: x [T, 1, 1, D], top-k expert ids [T, k], no lhs indices."""
    rng = np.random.default_rng(SEED + 17)
    T, D, H, E, k = 5, 128, 64, 8, 2
    w = mx.array(rng.standard_normal((E, H, D)).astype(np.float32))
    x = mx.array(rng.standard_normal((T, 1, 1, D)).astype(np.float32))
    ids = mx.array(rng.integers(0, E, size=(T, k)).astype(np.uint32))
    q = quant(w, "affine", 4, 64)
    ref = mx.gather_qmm(x, q["weight"], q["scales"], q.get("biases"), rhs_indices=ids, transpose=True, group_size=64, bits=4)
    out = run_driver("gather_qmm", {"x": x, **q, "rhs_indices": ids}, tmp_path, mode="affine", bits=4, gs=64)["y"]
    bound = mx.abs(x) @ mx.swapaxes(mx.abs(deq(q, "affine", 4, 64)), -1, -2)[ids]
    check_close(out, ref, bound, D, "switch glu gather")


@pytest.mark.parametrize("mode,bits,gs", [("affine", 4, 64), ("affine", 6, 32), ("mxfp4", 4, 32),
                                          ("mxfp8", 8, 32), ("nvfp4", 4, 16)])
@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float32])
def test_quantized_embedding_and_as_linear(tmp_path, mode, bits, gs, dtype):
    rng = np.random.default_rng(SEED + 19)
    V, D = 50, 128
    emb = nn.Embedding(V, D)
    emb.weight = mx.array(rng.standard_normal((V, D)).astype(np.float32)).astype(dtype)
    qe = nn.QuantizedEmbedding.from_embedding(emb, group_size=gs, bits=bits, mode=mode)
    ids = mx.array(rng.integers(0, V, size=(2, 7)).astype(np.uint32))
    h = mx.array(rng.standard_normal((2, 3, D)).astype(np.float32))
    q = {"weight": qe.weight, "scales": qe.scales}
    if mode == "affine":
        q["biases"] = qe.biases
    out = run_driver("embed", {"ids": ids, "h": h, **q}, tmp_path, mode=mode, bits=bits, gs=gs)
    assert_bits_equal(out["emb"], qe(ids), f"embedding {mode}")
    ref = qe.as_linear(h)
    bound = mx.abs(h) @ mx.abs(deq(q, mode, bits, gs)).T
    check_close(out["logits"], ref, bound, D, f"as_linear {mode}")
