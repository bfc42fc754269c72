#!/usr/bin/env python3
"""Top SASS instructions by warp-stall samples from `ncu -i REP --page source --print-source sass
--csv` output (stdin): address, samples, the stall columns that dominate, the instruction."""
import csv
import sys

rows = list(csv.reader(sys.stdin))
hdr_i = next(i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r))
hdr = [c.strip() for c in rows[hdr_i]]
data = [r for r in rows[hdr_i + 1:] if len(r) == len(hdr)]
col = {c: i for i, c in enumerate(hdr)}
samp = next(c for c in hdr if c.startswith("Warp Stall Sampling (All"))
def num(v):
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return 0.0
total = sum(num(r[col[samp]]) for r in data) or 1.0
stall_cols = [c for c in hdr if c.startswith("stall_") or "Stall" in c and c != samp]
print(f"{len(data)} instructions, {total:.0f} samples; columns: {', '.join(hdr[:12])} ...")
for r in sorted(data, key=lambda r: -num(r[col[samp]]))[:int(sys.argv[1]) if len(sys.argv) > 1 else 30]:
    s = num(r[col[samp]])
    top = sorted(((num(r[col[c]]), c) for c in stall_cols), reverse=True)[:2]
    why = " ".join(f"{c}={v:.0f}" for v, c in top if v > 0)
    addr = r[col["Address"]] if "Address" in col else ""
    print(f"{100 * s / total:5.1f}% {addr:>6} {r[col['Source']].strip()[:60]:60} {why}")
