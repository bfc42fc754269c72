#!/usr/bin/env python3
"""Summarize a tests/backend_ops report (MLXCEL_OPS_REPORT=FILE: one line per case, tab-separated
signature, normalized error, bound, ok|FAIL; error -1 marks a skipped combination) as Markdown:
per op and activation dtype, the cases run, the worst error and its bound, failures and skips.

usage: ops_report.py REPORT.tsv [--markdown OUT]
"""
import argparse
import collections
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    rows = collections.OrderedDict()
    skipped, failed = [], []
    for line in open(a.report):
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 4:
            continue
        sig, err, lim, status = parts[0], float(parts[1]), float(parts[2]), parts[3]
        if err < 0:
            skipped.append(sig)
            continue
        words = sig.split()
        op = words[0]
        act = next((w.split("=")[1] for w in words if w.startswith("act=")), None) or \
            next((w for w in words if w in ("F32", "BF16", "F16")), "?")
        fmt = next((words[i + 1] for i, w in enumerate(words) if w.startswith("weight=")), "")
        key = (op, act)
        r = rows.setdefault(key, {"n": 0, "worst": 0.0, "bound": lim, "where": "", "fail": 0})
        r["n"] += 1
        if err / max(lim, 1e-30) >= r["worst"] / max(r["bound"], 1e-30):
            r["worst"], r["bound"], r["where"] = err, lim, sig
        if status != "ok":
            r["fail"] += 1
            failed.append(f"{sig}: {err:.3g} > {lim:.3g}")
    out = ["| op | act | cases | failed | worst normalized error (bound) | worst case |", "|---|---|---|---|---|---|"]
    for (op, act), r in rows.items():
        out.append(f"| {op} | {act} | {r['n']} | {r['fail']} | {r['worst']:.3g} ({r['bound']:.3g}) | {r['where']} |")
    out.append("")
    out.append(f"Skipped combinations (the device reports no kernel): {len(skipped)}")
    out += [f"- {s}" for s in skipped]
    if failed:
        out.append("")
        out.append(f"Failures: {len(failed)}")
        out += [f"- {f}" for f in failed[:50]]
    text = "\n".join(out) + "\n"
    print(text)
    if a.markdown:
        open(a.markdown, "w").write(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
