"""Our sampler (src/runtime/sampler.cpp, through build/cpu/tests/sampler_driver) against mlx-lm's
(mlx_lm.sample_utils) on the same random logits, and its Philox4x32-10 generator against a
pure-Python implementation written from the paper (Salmon et al., SC 2011) and Random123's
known-answer vectors.

- Processing (logit bias, repetition / presence / frequency penalties, log-softmax, top-p, min-p,
  top-k, in mlx-lm's order): the surviving token set is equal and the processed log-probabilities
  agree to fp32 accuracy.
- Greedy (temperature 0): the same token as mlx-lm's greedy_sampler.
- Random draws: MLX's random numbers are not ours, so many seeded draws are compared with the
  processed distribution at the temperature (softmax(logprobs / T), mlx-lm's categorical_sampling)
  by a chi-square test at a 1e-6 false-alarm rate; the draws are deterministic (fixed seed), and
  the same statistic against a wrong temperature must fail, so the test has power.
"""
import json
import math
import os
import subprocess
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p, make_logits_processors

BUILD = Path(os.environ.get("MLXCEL_BUILD_DIR", Path(__file__).resolve().parents[2] / "build" / "cpu"))
DRIVER = BUILD / "tests" / "sampler_driver"

# ---------------------------------------------------------------------------------------------
# Philox4x32-10 from the specification.
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    c, k = list(ctr), list(key)
    for r in range(10):
        if r:
            k = [(k[0] + W0) & MASK, (k[1] + W1) & MASK]
        p0, p1 = M0 * c[0], M1 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & MASK, (p0 >> 32) ^ c[3] ^ k[1], p0 & MASK]
    return c


def uniform(seed, stream, position):
    """The sampler's draw (core/philox.h): key = seed, counter = (position, stream), 64-bit values
    low word first; the first 53 bits of the block over 2^53."""
    x = philox4x32_10([position & MASK, position >> 32, stream & MASK, stream >> 32], [seed & MASK, seed >> 32])
    return ((x[0] << 32 | x[1]) >> 11) / 2.0**53


# Random123 tests/kat_vectors, "philox4x32 10" lines: counter, key, output.
KAT = [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([MASK] * 4, [MASK] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]


def run_driver(request):
    if not DRIVER.exists():
        pytest.fail(f"{DRIVER} missing: build the cpu preset (target sampler_driver)")
    r = subprocess.run([str(DRIVER)], input=json.dumps(request), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_reference_philox_matches_random123_vectors():
    for ctr, key, out in KAT:
        assert philox4x32_10(ctr, key) == out


def test_driver_uniforms_equal_reference_philox():
    rng = np.random.default_rng(5)
    triples = [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [2**64 - 1, 2**64 - 1, 2**64 - 1],
               [0x299F31D0A4093822, 0x0370734413198A2E, 0x85A308D3243F6A88]]
    triples += [[int(a), int(b), int(c)] for a, b, c in rng.integers(0, 2**63, size=(40, 3), dtype=np.int64)]
    out = run_driver({"uniforms": triples})["uniforms"]
    assert out == [uniform(*t) for t in triples]


# ---------------------------------------------------------------------------------------------
# Processing against mlx-lm.
V = 1000


def random_logits(seed, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(V) * scale).astype(np.float32)


def mlx_processed(logits, history, p):
    """mlx-lm's pipeline up to the draw: processors (generate_step), log-softmax, filters in
    make_sampler's order."""
    x = mx.array(logits)[None]
    procs = make_logits_processors(
        logit_bias=dict(p["logit_bias"]) if p.get("logit_bias") else None,
        repetition_penalty=p.get("repetition_penalty"), repetition_context_size=p.get("repetition_context", 20),
        presence_penalty=p.get("presence_penalty"), presence_context_size=p.get("presence_context", 20),
        frequency_penalty=p.get("frequency_penalty"), frequency_context_size=p.get("frequency_context", 20))
    toks = mx.array(history, dtype=mx.int32)
    for proc in procs:
        x = proc(toks, x)
    lp = x - mx.logsumexp(x, axis=-1, keepdims=True)
    top_p, min_p, top_k = p.get("top_p", 1.0), p.get("min_p", 0.0), p.get("top_k", 0)
    if 0 < top_p < 1.0:
        lp = apply_top_p(lp, top_p)
    if min_p != 0.0:
        lp = apply_min_p(lp, min_p, p.get("min_tokens_to_keep", 1))
    if top_k > 0:
        lp = apply_top_k(lp, top_k)
    return np.array(lp[0].astype(mx.float32))


def ours_processed(out):
    return np.array([-np.inf if v is None else v for v in out["processed"]], np.float64)


HIST = [int(t) for t in np.random.default_rng(9).integers(0, 60, size=40)]  # repeats on purpose
CASES = {
    "plain": {},
    "top_p": {"top_p": 0.9},
    "top_p_small": {"top_p": 0.3},
    "min_p": {"min_p": 0.05},
    "min_p_keep": {"min_p": 0.6, "min_tokens_to_keep": 7},
    "top_k": {"top_k": 20},
    "top_p_min_p_top_k": {"top_p": 0.95, "min_p": 0.01, "top_k": 40},
    "repetition": {"repetition_penalty": 1.3},
    "repetition_ctx": {"repetition_penalty": 0.8, "repetition_context": 7},
    "presence": {"presence_penalty": 0.7, "presence_context": 25},
    "frequency": {"frequency_penalty": 0.4},
    "bias_penalties_filters": {"logit_bias": [[3, 5.0], [17, -100.0], [999, 2.5]], "repetition_penalty": 1.2,
                               "presence_penalty": -0.5, "frequency_penalty": 0.3, "frequency_context": 11,
                               "top_p": 0.8, "top_k": 50},
}


@pytest.mark.parametrize("case", list(CASES))
def test_processed_logprobs_match_mlx_lm(case):
    p = CASES[case]
    for seed in (1, 2, 3):
        logits = random_logits(100 * seed + len(case))
        ref = mlx_processed(logits, HIST, p)
        ours = ours_processed(run_driver({"logits": logits.tolist(), "history": HIST,
                                          "params": dict(p, temperature=1.0, seed=1)}))
        kept_ref, kept_ours = np.isfinite(ref), np.isfinite(ours)
        assert kept_ref.sum() > 0
        assert np.array_equal(kept_ref, kept_ours), (
            f"{case} seed {seed}: survivors differ: only mlx-lm {np.flatnonzero(kept_ref & ~kept_ours)[:10]}, "
            f"only ours {np.flatnonzero(kept_ours & ~kept_ref)[:10]}")
        err = np.abs(ref[kept_ref] - ours[kept_ref])
        assert err.max() <= 1e-5 + 1e-6 * np.abs(ref[kept_ref]).max(), f"{case} seed {seed}: max err {err.max()}"
        if case != "plain":  # the case changes something (a test that cannot fail is a defect)
            assert not np.allclose(ours, ours_processed(run_driver(
                {"logits": logits.tolist(), "history": HIST, "params": {"temperature": 1.0}})), atol=1e-3)


@pytest.mark.parametrize("case", ["plain", "repetition", "bias_penalties_filters"])
def test_greedy_matches_mlx_lm(case):
    p = CASES[case]
    for seed in range(5):
        logits = random_logits(7 + seed)
        ref = mlx_processed(logits, HIST, {k: v for k, v in p.items() if k not in ("top_p", "min_p", "top_k")})
        out = run_driver({"logits": logits.tolist(), "history": HIST, "params": dict(p, temperature=0.0), "n_top": 3})
        assert out["sample"]["token"] == int(np.argmax(ref))
        assert abs(out["sample"]["logprob"] - ref.max()) <= 1e-5
        assert [t[0] for t in out["sample"]["top"]] == list(np.argsort(-ref, kind="stable")[:3])


# ---------------------------------------------------------------------------------------------
# Random draws: empirical distribution against the processed one.


def chi2_bound(df, alpha=1e-6):
    """Upper alpha-quantile of chi-square(df), Wilson-Hilferty (accurate to a few % for df >= 3)."""
    z = {1e-6: 4.753}[alpha]
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi2(counts, probs, n):
    """Pearson statistic, pooling tokens whose expected count is below 5 into one bin."""
    exp = probs * n
    big = exp >= 5
    obs_big, exp_big = counts[big], exp[big]
    obs_rest, exp_rest = counts[~big].sum(), exp[~big].sum()
    stat = float(((obs_big - exp_big) ** 2 / exp_big).sum())
    df = int(big.sum()) - 1
    if exp_rest >= 5:
        stat += (obs_rest - exp_rest) ** 2 / exp_rest
        df += 1
    return stat, df


DRAW_CASES = {
    "t1": ({"temperature": 1.0}, 2.0),
    "t07_top_k": ({"temperature": 0.7, "top_k": 30}, 1.5),
    "t13_top_p_min_p": ({"temperature": 1.3, "top_p": 0.9, "min_p": 0.02}, 1.5),
    "t05_penalties": ({"temperature": 0.5, "repetition_penalty": 1.5, "presence_penalty": 0.3}, 1.0),
}


@pytest.mark.parametrize("case", list(DRAW_CASES))
def test_draws_follow_processed_distribution(case):
    p, scale = DRAW_CASES[case]
    n = 20000
    logits = random_logits(31 + len(case), scale)
    ref = mlx_processed(logits, HIST, p).astype(np.float64)
    t = p["temperature"]

    def dist(temp):
        z = np.where(np.isfinite(ref), np.exp((ref - ref[np.isfinite(ref)].max()) / temp), 0.0)
        return z / z.sum()

    out = run_driver({"logits": logits.tolist(), "history": HIST, "params": dict(p, seed=20260),
                      "stream": 3, "draws": n, "first_position": len(HIST)})
    counts = np.zeros(V)
    for k, c in out["counts"].items():
        counts[int(k)] = c
    assert counts.sum() == n
    assert counts[~np.isfinite(ref)].sum() == 0, "drew a token that mlx-lm's filters remove"
    stat, df = chi2(counts, dist(t), n)
    assert df >= 3, "too few populated tokens for the test to mean anything"
    assert stat <= chi2_bound(df), f"{case}: chi2 {stat:.1f} > bound {chi2_bound(df):.1f} (df {df})"
    # Power: the same draws are clearly not from the distribution at a 25% different temperature.
    wrong, wdf = chi2(counts, dist(t * 1.25), n)
    assert wrong > chi2_bound(wdf), f"{case}: chi2 against the wrong temperature only {wrong:.1f}"
