#!/usr/bin/env bash
# Bad build configurations must fail at configure time with a message that says what is wrong
# and what to do. Each case configures a throw-away build folder and greps the message.
set -uo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
expect_error() {
  local name=$1 pattern=$2
  shift 2
  local dir="$tmp/$name"
  if cmake -S . -B "$dir" -G Ninja -DMLXCEL_BUILD_TESTS=OFF -DMLXCEL_BUILD_BENCH=OFF "$@" \
      >"$dir.log" 2>&1; then
    echo "FAIL $name: configure succeeded"
    fail=$((fail + 1))
  elif grep -qE "$pattern" "$dir.log"; then
    echo "ok   $name: $(grep -m1 -oE "$pattern.{0,60}" "$dir.log")"
    pass=$((pass + 1))
  else
    echo "FAIL $name: message does not match '$pattern':"
    sed -n '1,40p' "$dir.log"
    fail=$((fail + 1))
  fi
}
expect_error both-backends "asks for more than one GPU backend" "-DMLXCEL_GPU=cuda;rocm"
expect_error unknown-backend "is not a backend" -DMLXCEL_GPU=metal
expect_error unknown-gfx "'gfx9999' is not a known gfx target" -DMLXCEL_GPU=rocm \
  -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_C_COMPILER=clang-19 -DMLXCEL_ROCM_ARCHITECTURES=gfx1151\;gfx9999
expect_error missing-hip "HIP headers not found" -DMLXCEL_GPU=rocm \
  -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_C_COMPILER=clang-19 -DROCM_PATH=/nonexistent/rocm
if command -v clang++-14 >/dev/null; then
  expect_error old-clang "clang 14[.0-9]* is too old" -DMLXCEL_GPU=rocm \
    -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14
else
  echo "FAIL old-clang: clang++-14 missing (scripts/setup.sh installs it for this test)"
  fail=$((fail + 1))
fi
expect_error gcc-for-rocm "needs clang \(>= 17\) as the C\+\+ compiler" -DMLXCEL_GPU=rocm \
  -DCMAKE_CXX_COMPILER=g++
expect_error bad-cuda-arch "is not a CUDA architecture" -DMLXCEL_GPU=cuda -DMLXCEL_CUDA_ARCHITECTURES=sm90
echo "configure errors: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
