#!/usr/bin/env bash
# Session 20, fourth call: evidence for the next GEMV change, no code change. Runs 35-36 found
# that more L2 requests (prefetch, 256-byte fetch hints) slow the decode GEMV; the hypothesis is
# that its code loads waste the L1 / L2 request path (each 16-byte warp load touches 16 rows x 4
# sectors, half of each). ncu counters for the first layer's four GEMVs (qkv, o, gate_up, down)
# of a one-token step, default build: requests and sectors at L1 and L2, DRAM bytes, stalls.
# Prediction: L1 global-load sectors per request ~64 (16 rows x 4), L2 read sectors ~2x the DRAM
# sectors (each sector requested by both loads of a pair), stalls dominated by long scoreboard
# and lg_throttle rather than math.
RUN=38
BUDGET_S=${BUDGET_S:-200}
source dev/h200_lib.sh
unxz_to .gpu/mlxcel.xz .gpu/mlxcel
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$R/steps.log"
timeout 120 .gpu/mlxcel synth --like llama-3.1-8b --quant affine4 --group-size 64 --no-tokenizer \
  --force "$S/llama-3.1-8b" > "$R/synth-llama-3.1-8b.log" 2>&1
log "synth rc=$?"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
M=$M,l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum,lts__t_requests_srcunit_tex_op_read.sum
M=$M,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum
M=$M,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active
M=$M,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
M=$M,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio
M=$M,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio
M=$M,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio
M=$M,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio
M=$M,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
M=$M,smsp__issue_active.avg.pct_of_peak_sustained_active
timeout 200 ncu --clock-control none -k "regex:qgemv_mma_gpl_kernel" --launch-skip 0 \
  --launch-count 4 --metrics "$M" --csv .gpu/mlxcel bench -m "$S/llama-3.1-8b" -p 1 -g 2 -r 1 \
  --device gpu > "$R/ncu-gemv-counters.csv" 2> "$R/ncu-gemv-counters.err"
log "ncu rc=$?"
python3 - "$R/ncu-gemv-counters.csv" <<'PY' | tee "$R/ncu-gemv-counters.txt"
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
h = rows[0]; ii, gi, mi, vi = h.index("ID"), h.index("Grid Size"), h.index("Metric Name"), h.index("Metric Value")
by = {}
for r in rows[1:]:
    by.setdefault((r[ii], r[gi]), {})[r[mi]] = r[vi]
for (i, g), m in by.items():
    print("launch", i, "grid", g)
    for k, v in m.items():
        print("  %-78s %s" % (k, v))
PY
pack
log "end"
