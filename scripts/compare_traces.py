#!/usr/bin/env python3
"""Compare two teacher-forced logits traces (DESIGN.md "Correctness").

A trace is JSON: {"width": "w1"|"w8"|"w256", "tokens": [ids...], "positions": [{"pos": p,
"top": [[id, logit], ...]}, ...]} with the top-k logits (descending) after each position, as
written by `mlxcel trace` and by scripts/mlx_trace.py (mlx-lm). A position is *decided* when the
reference's top-1 logit beats its top-2 by at least --decided; the candidate disagrees there when
its top-1 id differs. Gate: zero disagreements at decided positions; 0 decided positions is
inconclusive, not a pass.

usage: compare_traces.py REF CAND [--decided 2.0] [--json]
exit: 0 pass, 1 disagreements (or malformed/mismatched traces), 3 inconclusive
"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        t = json.load(f)
    for key in ("tokens", "positions"):
        if key not in t:
            raise SystemExit(f"{path}: not a trace (missing '{key}')")
    return t


def compare(ref, cand, threshold=2.0):
    """Summary dict of a comparison (see the module docstring)."""
    if ref["tokens"] != cand["tokens"]:
        raise ValueError("traces were made from different token sequences")
    cpos = {p["pos"]: p for p in cand["positions"]}
    decided = agree = missing = 0
    disagreements = []
    for p in ref["positions"]:
        top = p["top"]
        if len(top) < 2 or top[0][1] - top[1][1] < threshold:
            continue
        decided += 1
        c = cpos.get(p["pos"])
        if c is None or not c["top"]:
            missing += 1
            disagreements.append({"pos": p["pos"], "ref": top[0][0], "cand": None})
        elif c["top"][0][0] == top[0][0]:
            agree += 1
        else:
            disagreements.append({"pos": p["pos"], "ref": top[0][0], "cand": c["top"][0][0],
                                  "ref_margin": top[0][1] - top[1][1]})
    status = "pass" if decided and not disagreements else ("inconclusive" if not decided else "fail")
    return {"width": ref.get("width"), "positions": len(ref["positions"]), "decided": decided,
            "agree": agree, "disagree": len(disagreements), "missing": missing, "status": status,
            "first_disagreements": disagreements[:10]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("cand")
    ap.add_argument("--decided", type=float, default=2.0)
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    a = ap.parse_args()
    ref, cand = load(a.ref), load(a.cand)
    try:
        summary = compare(ref, cand, a.decided)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    disagreements = summary["first_disagreements"]
    decided, status = summary["decided"], summary["status"]
    if a.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['width']}: {summary['disagree']}/{decided} disagreements at decided "
              f"positions (of {len(ref['positions'])}; margin >= {a.decided}) -> {status}")
        for d in disagreements[:10]:
            print("  ", d)
    return {"pass": 0, "fail": 1, "inconclusive": 3}[status]


if __name__ == "__main__":
    sys.exit(main())
