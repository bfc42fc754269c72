#pragma once
// Philox4x32-10, the counter-based random number generator of Salmon, Moraes, Dror and Shaw,
// "Parallel Random Numbers: As Easy as 1, 2, 3" (SC 2011), as specified there and in the
// Random123 library: a keyed bijection of a 128-bit counter, so the n-th random number is computed
// directly from (key, n) with no state carried between draws. Host and device code share this
// header (plain integer arithmetic, MLXCEL_HD functions), so a CPU and a GPU sampler draw the same
// numbers. Checked against Random123's known-answer vectors in tests/runtime/test_philox.cpp.
#include <cstdint>

#include "core/hd.h"

namespace mlxcel {

struct Philox4x32 {
  std::uint32_t v[4];
};

namespace philox_detail {

// Round multipliers and Weyl key increments of Philox4x32 (the paper's Table 2 / Random123's
// PHILOX_M4x32_0/1 and PHILOX_W32_0/1).
constexpr std::uint32_t kM0 = 0xD2511F53u;
constexpr std::uint32_t kM1 = 0xCD9E8D57u;
constexpr std::uint32_t kW0 = 0x9E3779B9u;  // golden ratio
constexpr std::uint32_t kW1 = 0xBB67AE85u;  // sqrt(3) - 1

MLXCEL_HDI void round(std::uint32_t c[4], const std::uint32_t k[2]) {
  const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c[0];
  const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c[2];
  const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32),
                      lo0 = static_cast<std::uint32_t>(p0);
  const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32),
                      lo1 = static_cast<std::uint32_t>(p1);
  const std::uint32_t c1 = c[1], c3 = c[3];
  c[0] = hi1 ^ c1 ^ k[0];
  c[1] = lo1;
  c[2] = hi0 ^ c3 ^ k[1];
  c[3] = lo0;
}

}  // namespace philox_detail

// Ten rounds, the key bumped by the Weyl constants between rounds.
MLXCEL_HDI Philox4x32 philox4x32_10(Philox4x32 counter, std::uint32_t key0, std::uint32_t key1) {
  std::uint32_t k[2] = {key0, key1};
  philox_detail::round(counter.v, k);
  for (int r = 1; r < 10; ++r) {
    k[0] += philox_detail::kW0;
    k[1] += philox_detail::kW1;
    philox_detail::round(counter.v, k);
  }
  return counter;
}

// 64 random bits for (seed, stream, position): the first two output words of the counter
// (position, stream) under key seed (the sampling op's draw, backend/sample_math.h).
MLXCEL_HDI std::uint64_t philox_u64(std::uint64_t seed, std::uint64_t stream, std::uint64_t position) {
  const Philox4x32 c = {
      {static_cast<std::uint32_t>(position), static_cast<std::uint32_t>(position >> 32),
       static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)}};
  const Philox4x32 x =
      philox4x32_10(c, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  return static_cast<std::uint64_t>(x.v[0]) << 32 | x.v[1];
}

// The sampler's draw: key = seed, counter = (position, stream), each 64-bit value split into
// (low word, high word). Returns a double in [0, 1) from the first 53 output bits, so it depends
// only on (seed, stream, position).
MLXCEL_HDI double philox_uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t position) {
  return static_cast<double>(philox_u64(seed, stream, position) >> 11) * 0x1.0p-53;
}

}  // namespace mlxcel
