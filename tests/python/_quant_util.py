"""Helpers for the quantization conformance tests: MLX (the oracle) writes inputs with
mx.save_safetensors, the mlxcel test driver computes, and the results are compared bit for bit."""
import os
import subprocess
from pathlib import Path

import mlx.core as mx
import numpy as np

BUILD = Path(os.environ.get("MLXCEL_BUILD_DIR", Path(__file__).resolve().parents[2] / "build" / "cpu"))
DRIVER = BUILD / "tests" / "mlxcel_quant_driver"
CLI = BUILD / "bin" / "mlxcel"

FLOAT_DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}


def run_driver(op, inputs: dict, tmp_path: Path, **params):
    tag = f"{op}_{len(list(tmp_path.iterdir()))}"
    src = tmp_path / f"{tag}_in.safetensors"
    dst = tmp_path / f"{tag}_out.safetensors"
    mx.save_safetensors(str(src), inputs)
    args = [str(DRIVER), op, str(src), str(dst)] + [f"{k}={v}" for k, v in params.items()]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"driver failed: {r.stderr}"
    return mx.load(str(dst))


def bits_of(a: mx.array) -> np.ndarray:
    """Raw bits of an array, so comparisons are exact (NaN payloads and -0 included)."""
    if a.dtype in (mx.bfloat16, mx.float16):
        return np.array(a.view(mx.uint16))
    if a.dtype == mx.float32:
        return np.array(a.view(mx.uint32))
    return np.array(a)


def assert_bits_equal(ours: mx.array, ref: mx.array, what: str):
    """Bit-identical, except that any NaN equals any NaN (payloads carry no meaning)."""
    assert ours.dtype == ref.dtype, f"{what}: dtype {ours.dtype} != {ref.dtype}"
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != {ref.shape}"
    a, b = bits_of(ours), bits_of(ref)
    diff = a != b
    if ours.dtype in (mx.float32, mx.bfloat16, mx.float16):
        both_nan = np.isnan(np.array(ours.astype(mx.float32))) & np.isnan(np.array(ref.astype(mx.float32)))
        diff &= ~both_nan
    bad = np.argwhere(diff)
    assert bad.size == 0, f"{what}: {len(bad)} of {a.size} elements differ, first at {bad[0].tolist()}: ours {a[tuple(bad[0])]} mlx {b[tuple(bad[0])]}"


def random_weights(shape, dtype, seed, gs=32):
    """Normal values with per-row scales over many decades, plus the edge groups of MLX_FORMATS.md
    §1.4: all-zero, constant positive, constant negative, a single outlier, all negative."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape).astype(np.float32)
    rows = w.reshape(-1, shape[-1])
    rows *= np.exp(rng.uniform(-8, 4, size=(rows.shape[0], 1))).astype(np.float32)
    rows[0, :gs] = 0.0
    rows[1, :gs] = 0.37
    rows[2, :gs] = -1.5
    rows[3, :gs] = 0.0
    rows[3, 5] = 9.0
    rows[4, :gs] = -np.abs(rows[4, :gs])
    return mx.array(rows.reshape(shape)).astype(dtype)
