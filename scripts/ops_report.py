#!/usr/bin/env python3
"""Summarize a tests/backend_ops report (MLXCEL_OPS_REPORT=FILE: one line per case, tab-separated
signature, normalized error, bound, ok|FAIL, and a hash of the device output's bits; error -1
marks a skipped combination) as Markdown: per op and activation dtype, the cases run, the worst
error and its bound, failures and skips. With --same-bits OTHER.tsv (a report of the same binary
under other MLXCEL_GPU_* switches) it lists the cases whose output bits differ between the two
and exits 1 if any do: a fusion that claims the unfused launches' bits is checked this way.

usage: ops_report.py REPORT.tsv [--markdown OUT] [--same-bits OTHER.tsv]
"""
import argparse
import collections
import sys


def hashes(path):
    """signature -> the output hashes of its cases, in order (a signature may repeat)."""
    h = collections.defaultdict(list)
    for line in open(path):
        parts = line.rstrip("\n").split("\t")
        if len(parts) == 5 and float(parts[1]) >= 0:
            h[parts[0]].append(parts[4])
    return h


def same_bits(a_path, b_path):
    a, b = hashes(a_path), hashes(b_path)
    common = [s for s in a if s in b]
    differ = [s for s in common if a[s] != b[s]]
    only = sorted(set(a) ^ set(b))
    print(f"{len(common)} signatures in both reports, {len(differ)} with other output bits, "
          f"{len(only)} in one report only")
    for s in differ[:50]:
        print(f"- differs: {s}")
    for s in only[:20]:
        print(f"- in one report only: {s}")
    return 1 if differ or not common else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--markdown")
    ap.add_argument("--same-bits")
    a = ap.parse_args()
    if a.same_bits:
        return same_bits(a.report, a.same_bits)
    rows = collections.OrderedDict()
    skipped, failed = [], []
    for line in open(a.report):
        parts = line.rstrip("\n").split("\t")
        if len(parts) not in (4, 5):
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
