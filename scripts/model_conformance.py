#!/usr/bin/env python3
"""Model-level conformance of mlxcel against mlx-lm on fixture checkpoints (DESIGN.md
"Correctness"): for each fixture, teacher-forced top-k traces at w1, w8 and w256 compared at
decided positions (margin >= 2.0; gate: zero disagreements, and 0 decided is inconclusive), and
greedy generation of 32 tokens compared token for token.

usage: model_conformance.py MLXCEL_BIN FIXTURE_DIR [FIXTURE_DIR ...] [--numerics mlx|fast]
                            [--json OUT] [--markdown OUT]
Exit 0 when every fixture passes.

--numerics mlx (the default) runs mlxcel with MLX's CPU arithmetic, so its logits should equal
mlx-lm's bit for bit: the report also gives the share of positions whose top-1 logit is
identical. --numerics fast measures the default engine (fp32 accumulation) against the same gate.
"""
import argparse
import json
import random
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.sample_utils import make_sampler
from mlx_lm.utils import load_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_traces import compare  # noqa: E402

# Tokens per trace. w8 runs a 512-token prefill and then chunks of 8; only the positions after
# the prefill are traced (the prefill itself is w512-shaped). w256 traces every third position of
# its 256-token chunks. The untraced positions are computed but not projected to logits, so the
# reference (MLX's CPU backend is slow at the LM head of a 150k vocabulary) costs a fraction.
WIDTHS = {"w1": 48, "w8": 576, "w256": 300}
STEP = {"w1": 1, "w8": 8, "w256": 256}


def traced(width, pos):
    if width == "w8":
        return pos >= 512
    if width == "w256":
        return pos % 3 == 0
    return True


def head(model, h):
    """mlx-lm's output projection (every supported family's Model.__call__ ends this way)."""
    args = getattr(model, "args", None)
    tie = getattr(args, "tie_word_embeddings", None) if args is not None else None
    if tie is None:
        tie = getattr(model, "tie_word_embeddings")
    return model.model.embed_tokens.as_linear(h) if tie else model.lm_head(h)


def check_head(model, token):
    """head(model.model(x)) must be exactly model(x), or the traces below would mislead."""
    a = model(mx.array([[token]]), cache=make_prompt_cache(model))
    b = head(model, model.model(mx.array([[token]]), make_prompt_cache(model)))
    if not mx.array_equal(a, b).item():
        raise RuntimeError("mlx-lm's model(x) differs from head(model.model(x)) for this family")


def mlx_trace(model, tokens, width, top_k=8):
    cache = make_prompt_cache(model)
    chunks, pos, n = [], 0, len(tokens)
    if width == "w8":
        chunks.append((0, min(512, n)))
        pos = min(512, n)
    while pos < n:
        chunks.append((pos, min(n, pos + STEP[width])))
        pos += STEP[width]
    positions = []
    for b, e in chunks:
        h = model.model(mx.array(tokens[b:e])[None], cache)
        rows = [r for r in range(e - b) if traced(width, b + r)]
        if not rows:
            mx.eval(h)
            continue
        logits = head(model, h[0, mx.array(rows)]).astype(mx.float32)
        idx = mx.argsort(-logits, axis=-1)[:, :top_k]
        vals = mx.take_along_axis(logits, idx, axis=-1)
        for r, i, v in zip(rows, idx.tolist(), vals.tolist()):
            positions.append({"pos": b + r, "top": [[a, c] for a, c in zip(i, v)]})
    return {"width": width, "tokens": tokens, "positions": positions}


def mlx_greedy(model, prompt, n=32):
    out = []
    for tok, _ in generate_step(mx.array(prompt), model, max_tokens=n, sampler=make_sampler(0.0)):
        out.append(int(tok))
    return out


def identical_top1(ref, ours):
    """Positions where mlxcel's logit for the reference's top-1 token is bit-identical."""
    cand = {p["pos"]: dict((a, b) for a, b in p["top"]) for p in ours["positions"]}
    n = 0
    for p in ref["positions"]:
        t, v = p["top"][0]
        n += cand.get(p["pos"], {}).get(t) == v
    return n


def top1_max_diff(ref, ours):
    """Largest |mlxcel - reference| of the reference's top-1 logit over the traced positions
    (inf where mlxcel's top-k lacks that token): a tolerance check where both accumulate in fp32."""
    cand = {p["pos"]: dict((a, b) for a, b in p["top"]) for p in ours["positions"]}
    d = 0.0
    for p in ref["positions"]:
        t, v = p["top"][0]
        d = max(d, abs(cand.get(p["pos"], {}).get(t, float("inf")) - v))
    return d


def check_fixture(binary, fixture, tmp, numerics="mlx"):
    mx.set_default_device(mx.cpu)
    model, config = load_model(Path(fixture))
    vocab = config["vocab_size"]
    # A stable seed per fixture (str hash() is salted per process).
    rng = random.Random(zlib.crc32(Path(fixture).name.encode()))
    result = {"fixture": Path(fixture).name, "widths": {}, "ok": True}
    check_head(model, 1)
    for width, n in WIDTHS.items():
        tokens = [rng.randrange(vocab) for _ in range(n)]
        ids = Path(tmp) / f"ids-{width}.json"
        ids.write_text(json.dumps(tokens))
        ours_path = Path(tmp) / f"ours-{width}.json"
        subprocess.run([binary, "trace", "-m", fixture, "--tokens", str(ids), "--width", width,
                        "--numerics", numerics, "-o", str(ours_path)], check=True, capture_output=True)
        ref = mlx_trace(model, tokens, width)
        ours = json.loads(ours_path.read_text())
        s = compare(ref, ours, 2.0)
        s["top1_identical"] = identical_top1(ref, ours)
        s["top1_max_diff"] = top1_max_diff(ref, ours)
        result["widths"][width] = s
        result["ok"] &= s["status"] == "pass"
    prompt = [rng.randrange(vocab) for _ in range(16)]
    ref_tokens = mlx_greedy(model, prompt)
    p = Path(tmp) / "prompt.json"
    p.write_text(json.dumps(prompt))
    o = Path(tmp) / "gen.json"
    subprocess.run([binary, "generate", "-m", fixture, "--prompt-ids", str(p), "-n", "32",
                    "--ignore-eos", "-q", "--output-ids", str(o), "--numerics", numerics], check=True, capture_output=True)
    ours = json.loads(o.read_text())["tokens"]
    first_diff = next((i for i, (a, b) in enumerate(zip(ref_tokens, ours)) if a != b), None)
    result["greedy"] = {"equal": ours == ref_tokens, "first_difference": first_diff, "n": len(ref_tokens)}
    result["ok"] &= ours == ref_tokens
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("fixtures", nargs="+")
    ap.add_argument("--numerics", default="mlx", choices=["mlx", "fast"])
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    results = []
    for f in a.fixtures:
        with tempfile.TemporaryDirectory() as tmp:
            r = check_fixture(a.binary, f, tmp, a.numerics)
        results.append(r)
        w = r["widths"]
        print(f"{r['fixture']:22s} " + "  ".join(
            f"{k}: {v['disagree']}/{v['decided']} of {v['positions']} (={v['top1_identical']})" for k, v in w.items()) +
              f"  greedy32: {'equal' if r['greedy']['equal'] else 'DIFFERS at ' + str(r['greedy']['first_difference'])}"
              f"  -> {'pass' if r['ok'] else 'FAIL'}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    if a.markdown:
        lines = [f"numerics: {a.numerics}. Cells: disagreements / decided positions (of all positions; "
                 "identical top-1 logits).", "",
                 "| fixture | w1 | w8 | w256 | greedy 32 tokens |", "|---|---|---|---|---|"]
        for r in results:
            w = r["widths"]
            lines.append(f"| {r['fixture']} | " + " | ".join(
                f"{w[k]['disagree']}/{w[k]['decided']} (of {w[k]['positions']}; {w[k]['top1_identical']} identical)"
                for k in WIDTHS) +
                f" | {'equal' if r['greedy']['equal'] else 'differs at ' + str(r['greedy']['first_difference'])} |")
        Path(a.markdown).write_text("\n".join(lines) + "\n")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
