#!/usr/bin/env bash
# Session 22, third call: bench_gemv_access with candidate fixes of the x and scale loads
# (levels 4-7: x-pf, x-il, s-il+x-il, s-il; the source names each).
# Run 43: gate_up load 24.6 -> mma 26.4 -> mma+s 32.5 -> mma+s+x 41.8 us per launch back to
# back (the real kernel: 38.8 under ncu), lm_head 94 -> 98 -> 125 -> 153: the scale and x loads,
# not DRAM, are the GEMV's loss. Predictions: if x's cost is its exposed L1 latency, x-pf takes
# back most of its ~9 us on gate_up; if it is L1 wavefronts (4 lines per x load), x-il does;
# s-il takes back ~half the scales' ~6 us (half the scale loads and lines).
RUN=44
BUDGET_S=${BUDGET_S:-200}
source dev/h200_lib.sh
gemv_access
pack
