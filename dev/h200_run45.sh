#!/usr/bin/env bash
# Session 22, fourth call: bench_gemv_access rerun without the shared-memory occupancy cap.
# Runs 43-44 capped every row at 2 blocks per SM through 112 KB of shared memory per block,
# which left ~32 KB of L1 for the scale and x loads that the real GEMV (4 KB of shared
# memory) hits in a ~200 KB L1. Run 44 at 2 blocks per SM: gate_up mma+s+x 41.9, x-pf 37.7,
# s-il+x-il 37.0 us; with a 74 KB cap (same 2 blocks) s-il+x-il 33.4. Prediction: uncapped,
# mma+s+x drops toward the real kernel's 38.8 (ncu) and s-il+x-il stays 10-15 % below it.
RUN=45
BUDGET_S=${BUDGET_S:-200}
source dev/h200_lib.sh
gemv_access
pack
