#!/usr/bin/env bash
# The test command (README, .ci/run). Runs, in order, and reports every stage:
#   gate   vendor API names only in the compat header / vendor folders
#   config bad build configurations fail at configure time with a clear message
#   cpu    build the cpu preset, run the C++ tests (ctest)
#   python tests against outside references (MLX, mlx-lm, HF tokenizers, jinja2, openai)
#   fuzz   bounded fuzz runs of the file parsers (when built)
#   rocm   compile + link for every MLXCEL_ROCM_ARCHITECTURES target, per-kernel resource
#          table, spill gate on hot kernels, --version / rpath checks
#   cuda   compile + link for sm_90 (when nvcc is present)
# Options: --quick (gate, cpu, python only), --stage NAME (one stage; repeatable).
set -uo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
stages=(gate config cpu python fuzz rocm cuda)
selected=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) selected=(gate cpu python) ;;
    --stage) selected+=("$2"); shift ;;
    *) echo "test.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ ${#selected[@]} -gt 0 ] && stages=("${selected[@]}")

passed=0
failed=0
failed_names=()
# Each stage's output is also kept in build/stage-logs/NAME.log; the tails of failed stages are
# printed again at the end, where a truncated CI log still shows them.
logs=build/stage-logs
mkdir -p "$logs"
run_stage() {
  local name=$1
  shift
  local t0=$SECONDS rc
  echo "=== stage $name"
  "$@" 2>&1 | tee "$logs/$name.log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    echo "=== stage $name: ok ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1))
    failed_names+=("$name")
    echo "=== stage $name: FAILED ($((SECONDS - t0)) s)"
  fi
}

stage_gate() { scripts/check_vendor_names.sh; }

stage_config() { tests/configure/run.sh; }

stage_cpu() {
  cmake --preset cpu >/dev/null && cmake --build --preset cpu -j"$JOBS" &&
    ctest --preset cpu -j"$JOBS" &&
    build/cpu/bin/mlxcel selftest --device cpu --quick > build/cpu/selftest.log &&
    tail -1 build/cpu/selftest.log
}

stage_python() {
  if [ ! -d tests/python ]; then echo "no python tests"; return 0; fi
  [ -x .venv/bin/python ] || { echo "no .venv: run scripts/setup.sh"; return 1; }
  MLXCEL_BUILD_DIR="$PWD/build/cpu" .venv/bin/python -m pytest -q -p no:cacheprovider tests/python
}

stage_fuzz() {
  if [ ! -x scripts/fuzz.sh ]; then echo "no fuzz targets"; return 0; fi
  scripts/fuzz.sh
}

stage_rocm() {
  cmake --preset rocm >/dev/null && cmake --build --preset rocm -j"$JOBS" || return 1
  local bin=build/rocm/bin/mlxcel
  "$bin" --version || return 1
  local want
  want=$(grep -E '^MLXCEL_ROCM_ARCHITECTURES' build/rocm/CMakeCache.txt | cut -d= -f2)
  "$bin" --version | grep -qF "gpu targets: $want" || { echo "--version lacks $want"; return 1; }
  readelf -d "$bin" | grep -E 'RUNPATH|RPATH' || { echo "no rpath in $bin"; return 1; }
  ldd "$bin" | grep amdhip64 || { echo "libamdhip64 not resolved"; return 1; }
  "$bin" devices || return 1
  python3 scripts/rocm_resources.py build/rocm --hot src/backend/gpu/hot_kernels.txt \
    --markdown build/rocm/resource_usage.md
}

stage_cuda() {
  if [ ! -x /usr/local/cuda/bin/nvcc ]; then echo "no CUDA toolkit: skipped"; return 0; fi
  cmake --preset cuda >/dev/null && cmake --build --preset cuda -j"$JOBS" &&
    build/cuda/bin/mlxcel --version && build/cuda/bin/mlxcel devices
}

for s in "${stages[@]}"; do
  run_stage "$s" "stage_$s"
done
echo
for s in "${failed_names[@]}"; do
  echo "=== the last 80 lines of failed stage $s ($logs/$s.log):"
  tail -n 80 "$logs/$s.log"
  echo
done
[ ${#failed_names[@]} -gt 0 ] && echo "failed stages: ${failed_names[*]}"
echo "stages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
