"""CPU kernels against live MLX (mlx[cpu]) on fresh random inputs.

Our kernels run through build/cpu/tests/ops_driver (float32 .npy in and out, parameters as
key=value; see tests/cpu_ops/ops_driver.cpp). Every case runs on both ISA paths the CPU has.
Bounds (fp32): matmul 1e-5 relative to the row's |x|·|w| scale; softmax 2e-6 absolute; gelu
variants and silu 2e-6 relative + 1e-6 absolute; rope (base form) 2e-6 + 4 * 2^-24 * max angle * max|x| (MLX's
own vector exp differs from libm by an ulp, which moves the angle by ~theta * 2^-24); rope with a
freqs table 2e-6; the frequency tables 2e-6 relative; attention 2e-5 absolute.
"""
import os
import subprocess
import tempfile
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx_lm.models import rope_utils

BUILD = Path(os.environ.get("MLXCEL_BUILD_DIR", Path(__file__).resolve().parents[2] / "build" / "cpu"))
DRIVER = BUILD / "tests" / "ops_driver"


def _has_avx2():
    try:
        return " avx2 " in open("/proc/cpuinfo").read().replace("\n", " ")
    except OSError:
        return False


ISAS = ["scalar"] + (["avx2"] if _has_avx2() else [])

pytestmark = pytest.mark.skipif(not DRIVER.exists(), reason=f"{DRIVER} not built (cmake --build --preset cpu)")


def run_op(op, inputs, isa, **params):
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, a in enumerate(inputs):
            p = os.path.join(d, f"in{i}.npy")
            np.save(p, np.ascontiguousarray(a))
            paths.append(p)
        out = os.path.join(d, "out.npy")
        args = [str(DRIVER), op, out] + paths + [f"{k}={v}" for k, v in params.items()] + [f"isa={isa}"]
        r = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return np.load(out), r.stdout


def rng(seed):
    return np.random.default_rng(seed)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("m,n,k,bias", [(1, 33, 64, False), (3, 64, 31, True), (37, 70, 129, True), (64, 128, 256, False)])
def test_matmul(isa, m, n, k, bias):
    g = rng(m * 1000 + n)
    x = g.standard_normal((m, k)).astype(np.float32)
    w = g.standard_normal((n, k)).astype(np.float32)
    b = g.standard_normal((n,)).astype(np.float32)
    lin = nn.Linear(k, n, bias=bias)
    lin.weight = mx.array(w)
    if bias:
        lin.bias = mx.array(b)
    want = np.array(lin(mx.array(x)))
    got, _ = run_op("matmul", [x, w] + ([b] if bias else []), isa)
    scale = np.abs(x) @ np.abs(w).T + 1.0
    assert np.max(np.abs(got - want) / scale) < 1e-5


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype,mxdtype", [("bf16", mx.bfloat16), ("f16", mx.float16)])
def test_matmul_half_precision_matches_mlx_rounding(isa, dtype, mxdtype):
    """MLX's half-precision matmul accumulates in f32 and rounds once, as ours does: the results
    must agree to one ulp everywhere and exactly almost everywhere (ties of the f32 sums at a
    rounding boundary depend on summation order)."""
    g = rng(17)
    x = np.array(mx.array(g.standard_normal((5, 320)).astype(np.float32)).astype(mxdtype).astype(mx.float32))
    w = np.array(mx.array(g.standard_normal((96, 320)).astype(np.float32)).astype(mxdtype).astype(mx.float32))
    want = np.array((mx.array(x).astype(mxdtype) @ mx.array(w).astype(mxdtype).T).astype(mx.float32))
    got, _ = run_op("matmul", [x, w], isa, dtype=dtype)
    ulp = np.abs(want) * (2.0**-7 if dtype == "bf16" else 2.0**-10)
    assert np.all(np.abs(got - want) <= ulp + 1e-6)
    assert np.mean(got == want) > 0.99


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("rows,cols", [(1, 1), (4, 33), (7, 1000)])
def test_softmax(isa, rows, cols):
    g = rng(rows + cols)
    x = (4 * g.standard_normal((rows, cols))).astype(np.float32)
    mask = np.where(g.random((rows, cols)) < 0.2, -np.inf, 0.0).astype(np.float32)
    mask[:, 0] = 0.0
    want = np.array(mx.softmax(mx.array(x) + mx.array(mask), axis=-1))
    got, _ = run_op("softmax", [x, mask], isa)
    assert np.max(np.abs(got - want)) < 2e-6
    got2, _ = run_op("softmax", [x], isa)
    assert np.max(np.abs(got2 - np.array(mx.softmax(mx.array(x), axis=-1, precise=True)))) < 2e-6


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("kind,fn", [("silu", nn.silu), ("gelu", nn.gelu), ("gelu_tanh", nn.gelu_approx)])
def test_activations(isa, kind, fn):
    g = rng(7)
    x = (3 * g.standard_normal((4, 257))).astype(np.float32)
    x[0, :4] = [30.0, -30.0, -90.0, 0.0]
    want = np.array(fn(mx.array(x)))
    got, _ = run_op("act", [x], isa, kind=kind)
    assert np.max(np.abs(got - want) / (np.abs(want) + 1.0)) < 2e-6
    up = g.standard_normal(x.shape).astype(np.float32)
    want_g = np.array(fn(mx.array(x)) * mx.array(up))
    got_g, _ = run_op("gated", [x, up], isa, kind=kind)
    assert np.max(np.abs(got_g - want_g) / (np.abs(want_g) + 1.0)) < 4e-6


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "heads,L,D,dims,traditional,base,scale,offset",
    [(4, 9, 64, 64, False, 10000.0, 1.0, 0), (3, 33, 64, 64, True, 500000.0, 1.0, 17),
     (2, 5, 96, 32, False, 10000.0, 0.25, 3000), (2, 1, 128, 128, False, 1e6, 1.0, 4000)],
)
def test_rope_base(isa, heads, L, D, dims, traditional, base, scale, offset):
    x = rng(heads * L).standard_normal((heads, L, D)).astype(np.float32)
    want = np.array(mx.fast.rope(mx.array(x)[None], dims, traditional=traditional, base=base, scale=scale, offset=offset))[0]
    got, _ = run_op("rope", [x], isa, dims=dims, traditional=int(traditional), base=base, scale=scale, offset=offset)
    # An ulp of inv_freq or of the f32 angle moves the rotation by ~theta * 2^-24 radians.
    max_theta = (offset + L) * scale
    assert np.max(np.abs(got - want)) < 2e-6 + 4 * 2.0**-24 * max_theta * np.abs(x).max()
    assert np.array_equal(got[..., dims:], x[..., dims:])


def _mlx_freqs_and_scale(kind, dims, base):
    if kind == "llama3":
        r = rope_utils.Llama3RoPE(dims, base=base, scaling_config={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
        return np.array(r._freqs), 1.0, dict(factor=8, low_freq_factor=1, high_freq_factor=4, original_max=8192)
    if kind == "su":
        lf = list(np.linspace(1.0, 3.0, dims // 2))
        r = rope_utils.SuScaledRoPE(dims, base=base, max_position_embeddings=131072, original_max_position_embeddings=4096, short_factor=1.0, long_factor=lf)
        return np.array(r._freqs), r._scale, dict(max_pos=131072, original_max=4096, _lf=np.array(lf, np.float32))
    if kind == "yarn":
        r = rope_utils.YarnRoPE(dims, base=base, scaling_factor=4.0, original_max_position_embeddings=4096, beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=0.0)
        return np.array(r._freqs), r.mscale, dict(factor=4, original_max=4096, beta_fast=32, beta_slow=1, mscale=1, mscale_all_dim=0)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["llama3", "su", "yarn"])
@pytest.mark.parametrize("dims,base", [(64, 10000.0), (128, 500000.0)])
def test_rope_frequency_tables(kind, dims, base):
    want, want_scale, params = _mlx_freqs_and_scale(kind, dims, base)
    lf = params.pop("_lf", None)
    got, out = run_op("rope_freqs", [lf] if lf is not None else [], "scalar", type=kind, dims=dims, base=base, **params)
    assert got.shape == want.shape
    assert np.max(np.abs(got - want) / np.abs(want)) < 2e-6
    scale = float(out.strip().split("=")[1])
    assert abs(scale - want_scale) < 1e-6


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("kind", ["llama3", "su", "yarn"])
def test_rope_scaled_variants(isa, kind):
    """The full mlx-lm rope module (table + input mscale) against our table + kernel."""
    dims, D, heads, L, offset = 64, 64, 3, 7, 1000
    want_f, want_scale, params = _mlx_freqs_and_scale(kind, dims, 10000.0)
    lf = params.pop("_lf", None)
    freqs, out = run_op("rope_freqs", [lf] if lf is not None else [], "scalar", type=kind, dims=dims, base=10000.0, **params)
    in_scale = float(out.strip().split("=")[1])
    x = rng(5).standard_normal((heads, L, D)).astype(np.float32)
    if kind == "llama3":
        mod = rope_utils.Llama3RoPE(dims, base=10000.0, scaling_config={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    elif kind == "su":
        mod = rope_utils.SuScaledRoPE(dims, base=10000.0, max_position_embeddings=131072, original_max_position_embeddings=4096, long_factor=[float(v) for v in lf])
    else:
        mod = rope_utils.YarnRoPE(dims, base=10000.0, scaling_factor=4.0, original_max_position_embeddings=4096)
    want = np.array(mod(mx.array(x)[None], offset=offset))[0]
    got, _ = run_op("rope", [x, freqs], isa, dims=dims, base=10000.0, offset=offset, input_scale=in_scale)
    assert np.max(np.abs(got - want)) < 2e-5 * max(1.0, in_scale)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "H,Hkv,L,kv_len,cap,D,window",
    [(4, 4, 16, 16, 16, 32, 0),     # prefill
     (8, 2, 1, 77, 96, 64, 0),      # decode, GQA, KV cache capacity > length
     (6, 2, 12, 40, 40, 64, 0),     # chunked prefill with offset 28
     (4, 2, 20, 20, 20, 64, 6),     # sliding window prefill
     (4, 1, 1, 300, 300, 128, 0)],  # long decode
)
def test_attention(isa, H, Hkv, L, kv_len, cap, D, window):
    g = rng(H * L + kv_len)
    q = g.standard_normal((H, L, D)).astype(np.float32)
    k = g.standard_normal((Hkv, cap, D)).astype(np.float32)
    v = g.standard_normal((Hkv, cap, D)).astype(np.float32)
    scale = D ** -0.5
    qm, km, vm = mx.array(q)[None], mx.array(k[:, :kv_len])[None], mx.array(v[:, :kv_len])[None]
    if window:
        from mlx_lm.models.base import create_causal_mask
        mask = create_causal_mask(L, offset=kv_len - L, window_size=window)
        want = mx.fast.scaled_dot_product_attention(qm, km, vm, scale=scale, mask=mask)
    else:
        want = mx.fast.scaled_dot_product_attention(qm, km, vm, scale=scale, mask="causal" if L > 1 else None)
    want = np.array(want)[0]
    got, _ = run_op("attention", [q, k, v], isa, kv_len=kv_len, scale=scale, window=window)
    assert np.max(np.abs(got - want)) < 2e-5


def test_driver_rejects_unknown_op():
    r = subprocess.run([str(DRIVER), "nope", "/tmp/x.npy"], capture_output=True, text=True)
    assert r.returncode == 1 and "unknown op" in r.stderr
