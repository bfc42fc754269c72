#!/usr/bin/env bash
# Fault injection on a real GPU (issue: faults are values): an out-of-bounds kernel, a kernel
# that never ends and an impossible allocation must each end the process with a clean Error
# naming the device and the operation, in under 10 s, never a crash (signal) or a hang.
#   scripts/gpu_faults.sh [MLXCEL_BINARY]     (MLXCEL_GPU_WATCHDOG_SECS=3 is set for the spin case)
set -uo pipefail
bin=${1:-build/cuda/bin/mlxcel}
fails=0
for fault in oob spin oom; do
  t0=$EPOCHREALTIME
  out=$(MLXCEL_GPU_WATCHDOG_SECS=${MLXCEL_GPU_WATCHDOG_SECS:-3} timeout 20 "$bin" selftest --device gpu --inject-fault "$fault" 2>&1)
  rc=$?
  secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
  want="device_fault"
  [ "$fault" = oom ] && want="out_of_memory"
  verdict=ok
  if [ $rc -ne 3 ] || ! grep -q -- "-> $want error" <<<"$out" || awk -v s="$secs" 'BEGIN { exit !(s >= 10) }'; then
    verdict=FAIL
    fails=$((fails + 1))
  fi
  printf '%-5s rc=%d %s s %s: %s\n' "$fault" "$rc" "$secs" "$verdict" "$(tail -1 <<<"$out")"
done
echo "gpu_faults: $((3 - fails)) passed, $fails failed"
[ $fails -eq 0 ]
