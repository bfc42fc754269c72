"""Model-level conformance against mlx-lm (DESIGN.md "Correctness"; issue: model families end to
end). Every fixture that scripts/make_fixtures.py writes (7 families x bf16, affine 4/8-bit,
mxfp4, mxfp8, plus a mixed-bits recipe, and the realistic-shape families: llama_h576,
gemma3_h640, qwen3_moe_h320) is traced by mlx-lm and by mlxcel at w1, w8 (after a
512-token prefill) and w256, and generated greedily for 32 tokens.

With --numerics mlx, mlxcel reproduces MLX's CPU arithmetic, so the gate is strict: zero
disagreements at decided positions (margin >= 2.0, with decided positions present), the same 32
greedy tokens, and the reference's top-1 logit bit-identical at every traced position. The
default engine (fp32 accumulation) is held to the decided-position gate on the unquantized
fixtures and on the float32-activation twins of the quantized ones (every quantized mode once,
affine4 at the realistic llama_h576 shape)."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from _quant_util import CLI  # noqa: E402
from make_fixtures import f32_twin_names, fixture_names  # noqa: E402
from model_conformance import check_fixture  # noqa: E402

# mlx-lm cannot run an unquantized qwen3_moe in bf16 on the CPU (GatherMM has no bf16 kernel);
# make_fixtures writes those in float32 (<family>-f32).
NAMES = fixture_names()

# Fixtures the engine does not reproduce bit for bit under --numerics mlx yet, with the finding
# (strict xfail: the fix makes the test XPASS, which fails until the entry is removed). History:
# the realistic shapes showed that rms_norm must multiply by fp32(1/n), as mx.mean does (fixed).
XFAIL_MLX = {}  # gemma3 f32 twins once showed gelu_approx's x**3 must be powf (fixed)


def with_marks(names, xfail):
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=xfail[n])) if n in xfail else n
            for n in names]


def describe(r):
    w = r["widths"]
    return "  ".join(f"{k}: {v['disagree']}/{v['decided']} of {v['positions']} (= {v['top1_identical']})"
                     for k, v in w.items()) + f"  greedy: {r['greedy']}"


@pytest.mark.parametrize("name", with_marks(NAMES, XFAIL_MLX))
def test_mlx_numerics_match_mlx_lm(all_fixtures, tmp_path, name):
    fixture = all_fixtures / name
    assert fixture.is_dir(), f"make_fixtures.py did not write {name}"
    r = check_fixture(str(CLI), str(fixture), tmp_path, "mlx")
    print(name, describe(r))
    for width, s in r["widths"].items():
        assert s["decided"] > 0, f"{name} {width}: no decided positions (inconclusive)"
        assert s["disagree"] == 0, f"{name} {width}: {s['first_disagreements']}"
        assert s["top1_identical"] == s["positions"], f"{name} {width}: logits not bit-identical ({describe(r)})"
    assert r["greedy"]["equal"], f"{name}: greedy tokens differ at {r['greedy']['first_difference']}"


# The unquantized fixtures and the float32-activation twins of the quantized ones: there MLX's CPU
# backend accumulates in fp32 too, so the default engine differs from it only by summation order
# and must agree at every decided position. (For quantized bf16 models MLX's CPU reference
# accumulates in bf16, a few ulps of noise per layer, and the fp32 engine legitimately disagrees
# at a margin-2.0 position now and then; the twins run the same quantized kernels without that
# noise; docs/numerics.md.)
FAST_GATED = ["llama-bf16", "qwen3-bf16", "gemma3_text-bf16", "phi3-bf16", "qwen3_moe-f32",
              "llama_h576-bf16", "gemma3_h640-bf16", "qwen3_moe_h320-f32"] + f32_twin_names()


# On the twins both sides accumulate in fp32, so the reference's top-1 logit (std ~15) is also
# held to a bound: measured differences are <= 2e-4, while a realistic bug (f32 scales rounded to
# bf16 in the fast quantized matmul, tried as a mutation) moves it by 0.3-0.5 and still passes
# the decided-position gate.
TOP1_BOUND = 2e-3


@pytest.mark.parametrize("name", FAST_GATED)
def test_fast_numerics_decided_positions(all_fixtures, tmp_path, name):
    r = check_fixture(str(CLI), str(all_fixtures / name), tmp_path, "fast")
    print(name, "fast:", describe(r), " max |d top1|:", {w: s["top1_max_diff"] for w, s in r["widths"].items()})
    for width, s in r["widths"].items():
        assert s["decided"] > 0, f"{name} {width}: inconclusive"
        assert s["disagree"] == 0, f"{name} {width}: {s['first_disagreements']}"
        if name in f32_twin_names():
            assert s["top1_max_diff"] <= TOP1_BOUND, f"{name} {width}: top-1 logit off by {s['top1_max_diff']:.3g}"
