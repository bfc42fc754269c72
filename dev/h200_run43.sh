#!/usr/bin/env bash
# Session 22, second call: bench_gemv_access with the GEMV's other per-chunk work added step by
# step (mma: code decode + 32 mma; mma+s: + the 4 scale / bias word loads and their fold;
# mma+s+x: + the 8 x loads of the lane's group and their PRMT), timed alone and back to back.
# Run 42: row-quad tiled mma 30.9 us event-timed for gate_up, ncu's real kernel 38.8 us.
# Prediction: the scale loads (4 scattered 4-byte loads per lane per chunk, 12.5 % more bytes)
# and the x loads (an L1 round trip inside each chunk, not prefetched) together account for most
# of that 8 us: mma+s+x within 10 % of the real kernel's 38.8 (gate_up) and 19.9 (down).
RUN=43
BUDGET_S=${BUDGET_S:-200}
source dev/h200_lib.sh
gemv_access
pack
