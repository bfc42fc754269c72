"""Model-level conformance against mlx-lm (DESIGN.md "Correctness"; issue: model families end to
end). Every fixture that scripts/make_fixtures.py writes (7 families x bf16, affine 4/8-bit,
mxfp4, mxfp8, plus a mixed-bits recipe, and the realistic-shape families: llama_h576,
gemma3_h640, qwen3_moe_h320) is traced by mlx-lm and by mlxcel at w1, w8 (after a
512-token prefill) and w256, and generated greedily for 32 tokens.

With --numerics mlx, mlxcel reproduces MLX's CPU arithmetic, so the gate is strict: zero
disagreements at decided positions (margin >= 2.0, with decided positions present), the same 32
greedy tokens, and the reference's top-1 logit bit-identical at every traced position. The
default engine (fp32 accumulation) is held to the decided-position gate on the unquantized
fixtures."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from _quant_util import CLI  # noqa: E402
from make_fixtures import fixture_names  # noqa: E402
from model_conformance import check_fixture  # noqa: E402

# mlx-lm cannot run an unquantized qwen3_moe in bf16 on the CPU (GatherMM has no bf16 kernel);
# make_fixtures writes those in float32 (<family>-f32).
NAMES = fixture_names()

# Realistic-shape fixtures the current engine does not yet reproduce bit for bit under
# --numerics mlx (found when they were added; the C++ fix removes the entry, strict xfail makes
# that necessary). All three point at the same op: with identical input, our rms_norm output
# differs from mlx.fast.rms_norm's in the last bit, as if MLX's CPU kernel summed the squares in
# another order than our sequential fp32 sum at widths 320 / 576 / 640 (hidden 64 never showed
# it). Findings from scripts/layer_diff.py on the conformance token ids:
RMS = "our rms_norm vs MLX CPU at a non-power-of-two width (reduction order of the sum of squares?)"
XFAIL_MLX = {
    "llama_h576-affine4": "w8: 1 disagreement (pos 567, margin 2.0: mlx-lm 27729, ours 9847), top-1 identical at "
                          "27/64 positions; first differing tensor: step 2 (positions 520-527) layer 1 attn_norm, "
                          "4/4608 elements one bf16 ulp off while layer 0's output h is identical; " + RMS,
    "gemma3_h640-bf16": "top-1 logits identical at 61/64 (w8) and 97/100 (w256) positions, no decided "
                        "disagreement; first differing tensor at w256: step 0 layer 1 attn_norm, 6/163840 "
                        "elements one bf16 ulp off while layer 0's output h is identical; " + RMS,
    "qwen3_moe_h320-f32": "top-1 identical at 12/48 (w1), 6/64 (w8), 10/100 (w256) positions, no decided "
                          "disagreement; first differing tensor at w1: step 6 final_norm (311/320 elements off by "
                          "~1 fp32 ulp) while the last layer's h is identical; " + RMS,
}


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


# The unquantized fixtures: there MLX's CPU backend accumulates in fp32 too, so the default engine
# differs from it only by summation order and must agree at every decided position. (For
# quantized bf16 models MLX's CPU reference accumulates in bf16, a few ulps of noise per layer,
# and the fp32 engine legitimately disagrees at a margin-2.0 position now and then: those are
# measured and reported, not gated; docs/numerics.md.)
@pytest.mark.parametrize("name", ["llama-bf16", "qwen3-bf16", "gemma3_text-bf16", "phi3-bf16", "qwen3_moe-f32",
                                  "llama_h576-bf16", "gemma3_h640-bf16", "qwen3_moe_h320-f32"])
def test_fast_numerics_decided_positions(all_fixtures, tmp_path, name):
    r = check_fixture(str(CLI), str(all_fixtures / name), tmp_path, "fast")
    print(name, "fast:", describe(r))
    for width, s in r["widths"].items():
        assert s["decided"] > 0, f"{name} {width}: inconclusive"
        assert s["disagree"] == 0, f"{name} {width}: {s['first_disagreements']}"
