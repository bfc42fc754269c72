#!/usr/bin/env python3
"""Per-kernel device time of the last forward step in an `ncu --csv --metrics
gpu__time_duration.sum` log (stdin): the step is the launches from the last embed kernel on
(every forward step starts with it). Prints kernels grouped by name, their count, total and
mean microseconds, and the step's total: the device time without launch gaps."""
import csv
import sys
from collections import OrderedDict

rows = [r for r in csv.reader(l for l in sys.stdin if l.startswith('"'))]
if not rows:
    sys.exit("no ncu CSV rows on stdin")
head, body = rows[0], rows[1:]
name_i, unit_i, val_i = head.index("Kernel Name"), head.index("Metric Unit"), head.index("Metric Value")
scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
def short(name):
    """The kernel's own name: 'void mlxcel::gpu::(anonymous namespace)::embed_kernel<bf16>(...)'
    -> 'embed_kernel'."""
    n = name.replace("(anonymous namespace)::", "")
    n = n[5:] if n.startswith("void ") else n
    for stop in "<(":
        n = n.split(stop)[0]
    return n.split("::")[-1].strip()


launches = [(short(r[name_i]), float(r[val_i].replace(",", "")) * scale.get(r[unit_i], 1.0))
            for r in body]
start = max(i for i, (n, _) in enumerate(launches) if n == "embed_kernel")
step = launches[start:]
groups = OrderedDict()
for key, us in step:
    c, t = groups.get(key, (0, 0.0))
    groups[key] = (c + 1, t + us)
total = sum(us for _, us in step)
print(f"last step: {len(step)} launches, {total:.1f} us of kernel time")
for k, (c, t) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
    print(f"{k:40s} {c:5d} {t:9.1f} us {t / c:7.2f} us/launch {100 * t / total:5.1f} %")
