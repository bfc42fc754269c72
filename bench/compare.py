#!/usr/bin/env python3
"""Like-for-like comparison of `mlxcel bench` CSVs with each other and with the peers' outputs.

usage: compare.py FILE... [--json]

FILE is any of:
  - a CSV written by `mlxcel bench --csv` (one row per run);
  - llama.cpp's `llama-bench -o json` or `-o csv` output (pp rows have n_gen 0, tg rows
    n_prompt 0);
  - the mlx-lm peer's output (`mlx_cuda_peer.py`: one JSON object per line, or a JSON list).

Results are matched on (shape, quant, tokens, batch): prefill on P, decode on G. Quantizations
match when they stream the same bytes per weight: llama.cpp Q4_0 (18 bytes / 32 weights) is
affine4-g64 (4 bits + bf16 scale and bias per 64), Q8_0 is affine8-g64, Q4_1 is affine4-g32.
llama-bench times tg from an empty context and `mlxcel bench` after the P-token prompt, so our
decode streams slightly more KV per token than llama.cpp's (docs/benchmarks.md).

For each group it prints every engine's tok/s and the ratio of the newest mlxcel row (the last one
read) to each other row; `--json` prints the same as JSON lines.
"""
import argparse
import csv
import json
import os
import re
import sys

# Peer shape names (PEERS.md, synth_gguf.py, mlx_cuda_peer.py) -> `mlxcel synth --like` names.
SHAPE_ALIASES = {
    "qwen3_0p6b": "qwen3-0.6b",
    "llama31_8b": "llama-3.1-8b",
    "qwen3_30b_a3b": "qwen3-30b-a3b",
}
# llama.cpp types -> the MLX quantization that streams the same bytes per weight.
GGML_QUANT = {"Q4_0": "affine4-g64", "Q4_1": "affine4-g32", "Q8_0": "affine8-g64", "BF16": "bf16", "F16": "f16"}


def norm_shape(name):
    base = os.path.basename(str(name))
    base = re.sub(r"\.gguf$", "", base)
    for alias, like in SHAPE_ALIASES.items():
        if alias in base:
            return like
    return SHAPE_ALIASES.get(base, base)


def read_ours(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            eng = "mlxcel %s %s" % (r["commit"][:10], r["backend"])
            base = dict(engine=eng, source=path, shape=r["shape"], quant=r["quant"], batch=int(r["batch"]),
                        date=r["date"], device=r["device"])
            rows.append(dict(base, metric="prefill", tokens=int(r["prompt_tokens"]),
                             tok_s=float(r["prefill_tok_s"])))
            rows.append(dict(base, metric="decode", tokens=int(r["gen_tokens"]), tok_s=float(r["decode_tok_s"]),
                             roofline_fraction=float(r["decode_roofline_fraction"])))
    return rows


def read_llama_bench(path, items):
    rows = []
    for r in items:
        mtype = r.get("model_type", "")
        qt = mtype.split()[-1] if mtype else ""
        quant = GGML_QUANT.get(qt.upper(), qt)
        shape = norm_shape(r.get("model_filename", mtype))
        base = dict(engine="llama.cpp %s %s" % (str(r.get("build_commit", ""))[:10], r.get("backends", "")),
                    source=path, shape=shape, quant=quant, batch=1, device=r.get("gpu_info", ""))
        n_p, n_g = int(r.get("n_prompt", 0)), int(r.get("n_gen", 0))
        if n_p > 0 and n_g == 0:
            rows.append(dict(base, metric="prefill", tokens=n_p, tok_s=float(r["avg_ts"])))
        elif n_g > 0 and n_p == 0:
            rows.append(dict(base, metric="decode", tokens=n_g, tok_s=float(r["avg_ts"])))
    return rows


def read_mlx_peer(path, items):
    rows = []
    for r in items:
        m = re.match(r"affine(\d+)\s+g(\d+)", r.get("quant", ""))
        quant = "affine%s-g%s" % m.groups() if m else r.get("quant", "")
        base = dict(engine=r.get("engine", "mlx-lm"), source=path, shape=norm_shape(r["shape"]), quant=quant,
                    batch=int(r.get("batch", 1)), device=str(r.get("device", "")))
        rows.append(dict(base, metric="prefill", tokens=int(r["prompt"]), tok_s=float(r["prefill_tps"])))
        rows.append(dict(base, metric="decode", tokens=int(r["gen"]), tok_s=float(r["decode_tps"])))
    return rows


def read_any(path):
    with open(path) as f:
        text = f.read()
    head = text.lstrip()[:1]
    if head not in "[{":
        first = text.splitlines()[0] if text else ""
        if "avg_ts" in first.replace('"', "").split(","):  # llama-bench -o csv
            return read_llama_bench(path, list(csv.DictReader(text.splitlines())))
        return read_ours(path)
    try:
        data = json.loads(text)
        items = data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        items = [json.loads(line) for line in text.splitlines() if line.strip()]
    if items and "avg_ts" in items[0]:
        return read_llama_bench(path, items)
    if items and "decode_tps" in items[0]:
        return read_mlx_peer(path, items)
    raise SystemExit("%s: neither an mlxcel bench CSV, llama-bench JSON nor mlx peer output" % path)


def compare(rows):
    """Groups rows like for like; in each group, ratios of the newest mlxcel row to every other."""
    groups = {}
    for r in rows:
        groups.setdefault((r["shape"], r["quant"], r["metric"], r["tokens"], r["batch"]), []).append(r)
    out = []
    for key in sorted(groups):
        g = groups[key]
        ours = [r for r in g if r["engine"].startswith("mlxcel")]
        subject = ours[-1] if ours else None
        entries = []
        for r in g:
            e = dict(engine=r["engine"], source=r["source"], tok_s=r["tok_s"])
            if "roofline_fraction" in r:
                e["roofline_fraction"] = r["roofline_fraction"]
            if subject is not None and r is not subject and r["tok_s"] > 0:
                e["mlxcel_ratio"] = subject["tok_s"] / r["tok_s"]
            entries.append(e)
        out.append(dict(shape=key[0], quant=key[1], metric=key[2], tokens=key[3], batch=key[4],
                        subject=subject["engine"] if subject else None, entries=entries))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    a = ap.parse_args(argv)
    rows = []
    for p in a.files:
        rows.extend(read_any(p))
    res = compare(rows)
    if a.json:
        for g in res:
            print(json.dumps(g))
        return 0
    print("| shape | quant | test | B | engine | tok/s | mlxcel / this |")
    print("|---|---|---|---|---|---|---|")
    for g in res:
        test = ("pp%d" if g["metric"] == "prefill" else "tg%d") % g["tokens"]
        for e in g["entries"]:
            ratio = "%.2fx" % e["mlxcel_ratio"] if "mlxcel_ratio" in e else "-"
            extra = " (%.0f%% of roofline)" % (100 * e["roofline_fraction"]) if "roofline_fraction" in e else ""
            print("| %s | %s | %s | %d | %s | %.1f%s | %s |" % (g["shape"], g["quant"], test, g["batch"], e["engine"],
                                                              e["tok_s"], extra, ratio))
    return 0


if __name__ == "__main__":
    sys.exit(main())
