#!/usr/bin/env bash
# Shared preamble of the H200 calls from run 18 on (issue 12): source it from dev/h200_runNN.sh
# after setting RUN=NN. Binaries are built here and carried in `.gpu` (see docs/development.md).
#   log MSG                           timestamped line into $R/steps.log and stdout
#   pack                              tars $R (and the CSV) into $OUT/resultsNN.tgz
#   run_tests [ENV...]                .gpu/test_backend_ops, its verdict logged (report: $R/tests-*.tsv)
#   same_bits "ENV_A" "ENV_B"         two run_tests' reports compared for identical output bits
#   synth_all                         affine4 g64 checkpoints of the three benchmark shapes
#   b TAG BINARY MODEL BATCH REPEAT [ENV...]   one `mlxcel bench` pp512/tg128 into $CSV
#   prof TAG BINARY MODEL BATCH [ENV...]       per-op device time (MLXCEL_GPU_PROFILE=1)
#   ncu_step TAG MODEL BATCH [ENV...]          every kernel of a short bench under ncu (clock and
#                                     cache control off), one decode step's times summarized
#   gemv_access                       bench_gemv_access (carried in .gpu) into $R/gemv-access.txt
#   llama_peers NAME...               llama.cpp's llama-bench (built here from .gpu/llama.tar.xz)
#                                     on Q4_0 GGUFs of the named shapes (qwen3-0.6b, llama-3.1-8b,
#                                     qwen3-30b-a3b), JSON into $R/llama-bench-NAME.json
set -u
OUT=${OUT:-$PWD/out}
R=$OUT/r
S=/tmp/mlxcel-synth
CSV=$OUT/bench.csv
mkdir -p "$R" "$S"
t0=$SECONDS
export MLXCEL_REQUIRE_GPU=1
# unxz_to FILE.xz OUT: a binary carried xz-compressed in .gpu, unpacked and made executable.
unxz_to() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2" && chmod +x "$2"; }
log() { echo "[$((SECONDS - t0))s] $*" | tee -a "$R/steps.log"; }
# Late optional steps give way to the call's 600 s limit (BUDGET_S seconds of the script's own).
late() { [ $((SECONDS - t0)) -gt "${BUDGET_S:-470}" ] && { log "skipped (time): $*"; return 0; }; return 1; }
pack() { cp "$CSV" "$R/" 2>/dev/null; tar -C "$OUT" -czf "$OUT/results${RUN}.tgz" r; }
run_tests() {
  local tag=tests-$(echo "$*" | tr -c 'A-Za-z0-9=_\n' '_')
  rm -f "$R/$tag.tsv"
  env MLXCEL_OPS_REPORT="$R/$tag.tsv" "$@" timeout 150 .gpu/test_backend_ops --gtest_color=no \
    > "$R/$tag.log" 2>&1
  log "test_backend_ops $* rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$R/$tag.log" | tr '\n' ' ')"
  grep -E "Failure|differs|actual|max err" "$R/$tag.log" | head -10
}
# same_bits "ENV_A" "ENV_B": whether run_tests under the two switch sets gave every case the same
# output bits (their reports' hashes; scripts/ops_report.py --same-bits).
same_bits() {
  local a=tests-$(echo "$1" | tr -c 'A-Za-z0-9=_\n' '_') b=tests-$(echo "$2" | tr -c 'A-Za-z0-9=_\n' '_')
  log "same bits [$1] vs [$2]: $(python3 scripts/ops_report.py "$R/$a.tsv" --same-bits "$R/$b.tsv" 2>&1 | head -8 | tr '\n' ' ')"
}
synth_all() {
  for shape in qwen3-0.6b llama-3.1-8b qwen3-30b-a3b; do
    timeout 120 .gpu/mlxcel synth --like $shape --quant affine4 --group-size 64 --no-tokenizer \
      --force "$S/$shape" > "$R/synth-$shape.log" 2>&1
    log "synth $shape rc=$?"
  done
}
b() {
  local tag=$1 bin=$2 model=$3 batch=$4 rep=$5
  shift 5
  late "bench $tag" && return
  env "$@" timeout 150 "$bin" bench -m "$S/$model" -p 512 -g 128 -r "$rep" --batch "$batch" \
    --device gpu --csv "$CSV" > "$R/bench-$tag.log" 2>&1
  log "bench $tag rc=$? $(grep -E '^\| (pp|tg)' "$R/bench-$tag.log" | tr -s ' ' | tr '\n' ' ')"
}
prof() {
  local tag=$1 bin=$2 model=$3 batch=$4
  shift 4
  env MLXCEL_GPU_PROFILE=1 "$@" timeout 150 "$bin" bench -m "$S/$model" -p 512 -g 128 -r 1 \
    --batch "$batch" --device gpu > "$R/prof-$tag.log" 2>&1
  log "profile $tag rc=$?"
  sed -n '/device time per op/,$p' "$R/prof-$tag.log" | head -14
}
#   ncu_k TAG REGEX SKIP PROMPT GEN [ENV...]  ncu --set full of one 8B kernel launch: summary and
#                                     the top SASS lines by stall samples (dev/ncu_top_sass.py)
ncu_k() {
  local tag=$1 re=$2 skip=$3 pp=$4 gen=$5
  shift 5
  late "ncu $tag" && return
  command -v ncu > /dev/null || { log "ncu missing"; return; }
  env "$@" timeout 150 ncu --set full --import-source no -k "regex:$re" --launch-skip "$skip" \
    --launch-count 1 -o "$R/ncu-$tag" -f .gpu/mlxcel bench -m "$S/llama-3.1-8b" -p "$pp" \
    -g "$gen" -r 1 --device gpu > "$R/ncu-$tag.log" 2>&1
  log "ncu $tag rc=$?"
  ncu -i "$R/ncu-$tag.ncu-rep" --page details --print-summary none 2>/dev/null |
    grep -E "_kernel|Duration|Grid Size|Registers Per|Executed Instructions  |Issued Warp|Achieved Occ|DRAM Throughput|L1/TEX Hit|Mem Busy|Max Bandwidth" |
    head -14 | tee "$R/ncu-$tag-summary.txt"
  ncu -i "$R/ncu-$tag.ncu-rep" --page source --print-source sass --csv > "$R/sass-$tag.csv" \
    2> "$R/sass-$tag.err"
  python3 dev/ncu_top_sass.py 16 < "$R/sass-$tag.csv" 2>&1 | head -20 | tee -a "$R/ncu-$tag-summary.txt" 
  rm -f "$R/ncu-$tag.ncu-rep"
}
ncu_step() {
  local tag=$1 model=$2 batch=$3
  shift 3
  late "ncu step $tag" && return
  env "$@" timeout 200 ncu --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum --csv .gpu/mlxcel bench -m "$S/$model" -p 64 -g 2 -r 1 \
    --batch "$batch" --device gpu > "$R/ncu-step-$tag.csv" 2> "$R/ncu-step-$tag.err"
  log "ncu step $tag rc=$?"
  python3 dev/ncu_step_times.py < "$R/ncu-step-$tag.csv" 2>&1 | tee "$R/step-times-$tag.txt" | head -16
}
#   ncu_counters TAG REGEX COUNT [ENV...]  run 38's counter set (DRAM, L1 / L2 requests, issue,
#                                     stalls) for the first COUNT launches matching REGEX of a
#                                     one-token 8B step; per-launch table in $R/ncu-counters-TAG.txt
ncu_counters() {
  local tag=$1 re=$2 count=$3
  shift 3
  late "ncu counters $tag" && return
  local M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
  M=$M,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
  M=$M,l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum,lts__t_requests_srcunit_tex_op_read.sum
  M=$M,lts__t_sectors_srcunit_tex_op_read.sum,smsp__inst_executed.sum
  M=$M,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
  M=$M,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
  M=$M,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio
  M=$M,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio
  M=$M,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
  M=$M,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio
  M=$M,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio
  M=$M,smsp__issue_active.avg.pct_of_peak_sustained_active
  env "$@" timeout 200 ncu --clock-control none -k "regex:$re" --launch-skip 0 \
    --launch-count "$count" --metrics "$M" --csv .gpu/mlxcel bench -m "$S/llama-3.1-8b" -p 1 -g 2 \
    -r 1 --device gpu > "$R/ncu-counters-$tag.csv" 2> "$R/ncu-counters-$tag.err"
  log "ncu counters $tag rc=$?"
  python3 - "$R/ncu-counters-$tag.csv" <<'PY' | tee "$R/ncu-counters-$tag.txt" | grep -E "launch|duration|inst_exec|issue_active|warps_active|registers"
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
}
gemv_access() {
  unxz_to .gpu/bench_gemv_access.xz .gpu/bench_gemv_access
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$R/steps.log"
  timeout 200 .gpu/bench_gemv_access > "$R/gemv-access.txt" 2>&1
  log "bench_gemv_access rc=$?"
}
# The peers' recipe (../shared/peers/PEERS.md): llama-cpp-python 0.3.36's vendored llama.cpp
# (commit 0c1e570) repacked without docs, tests, UI, other backends and all vocab files but two
# (.gpu/llama.tar.xz), built here for sm_90 (llama-bench only); Q4_0 models with the real shapes
# from ../shared/peers/synth_gguf.py (carried as .gpu/synth_gguf.py); pp512 / tg128, flash
# attention, 3 repeats.
llama_peers() {
  local L=/tmp/llama G=/tmp/gguf
  mkdir -p "$L" "$G"
  if [ ! -x "$L/llama.cpp/b/bin/llama-bench" ]; then
    python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
      .gpu/llama.tar.xz "$L"
    (cd "$L/llama.cpp" && cmake -S . -B b -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF > "$R/llama-cmake.log" 2>&1 &&
      cmake --build b --target llama-bench -j16 > "$R/llama-build.log" 2>&1) &
    local build=$!
  fi
  export PYTHONPATH=$L/llama.cpp/gguf-py
  local name shape vocab
  for name in "$@"; do
    case $name in
      qwen3-0.6b) shape=qwen3_0p6b vocab=qwen2 ;;
      llama-3.1-8b) shape=llama31_8b vocab=llama-bpe ;;
      qwen3-30b-a3b) shape=qwen3_30b_a3b vocab=qwen2 ;;
    esac
    [ -s "$G/$name.gguf" ] || timeout 200 python3 .gpu/synth_gguf.py "$shape" \
      "$L/llama.cpp/models/ggml-vocab-$vocab.gguf" "$G/$name.gguf" > "$R/gguf-$name.log" 2>&1
    log "gguf $name rc=$? $(tail -1 "$R/gguf-$name.log")"
  done
  [ -n "${build:-}" ] && { wait "$build"; log "llama.cpp build rc=$? $(tail -1 "$R/llama-build.log" 2>/dev/null)"; }
  for name in "$@"; do
    timeout 150 "$L/llama.cpp/b/bin/llama-bench" -m "$G/$name.gguf" -p 512 -n 128 -ngl 99 -fa 1 \
      -r 3 -o json > "$R/llama-bench-$name.json" 2> "$R/llama-bench-$name.err"
    log "llama-bench $name rc=$? $(python3 -c "import json,sys; print(' '.join('p%s n%s %.1f' % (r['n_prompt'], r['n_gen'], r['avg_ts']) for r in json.load(open(sys.argv[1]))))" "$R/llama-bench-$name.json" 2>&1 | tail -1)"
  done
}
