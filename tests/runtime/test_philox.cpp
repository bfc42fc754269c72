#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/philox.h"

using namespace mlxcel;

// Known-answer vectors of Philox4x32-10 from the Random123 distribution (tests/kat_vectors):
// counter words, key words, expected output words.
TEST(Philox, Random123KnownAnswers) {
  struct Kat {
    Philox4x32 ctr;
    std::uint32_t k0, k1;
    Philox4x32 out;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& k : kats) {
    Philox4x32 r = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.out.v[i]) << "word " << i;
  }
}

TEST(Philox, UniformUsesFirst53BitsOfTheBlock) {
  // seed 0, stream 0, position 0 is the all-zero block above.
  const double expect =
      static_cast<double>((static_cast<std::uint64_t>(0x6627e8d5u) << 32 | 0xe169c58du) >> 11) *
      0x1.0p-53;
  EXPECT_EQ(philox_uniform(0, 0, 0), expect);
  // The 64-bit inputs are split low word first: position 2^32 is counter word 1.
  Philox4x32 c = {{0, 1, 7, 0}};
  Philox4x32 x = philox4x32_10(c, 5, 0);
  EXPECT_EQ(
      philox_uniform(5, 7, std::uint64_t{1} << 32),
      static_cast<double>((static_cast<std::uint64_t>(x.v[0]) << 32 | x.v[1]) >> 11) * 0x1.0p-53);
}

TEST(Philox, UniformIsUniformAndKeyed) {
  // Mean and variance of 20000 draws over positions: 1/2 and 1/12 within ~5 standard errors.
  const int n = 20000;
  double s = 0, s2 = 0;
  int same_as_other_seed = 0, same_as_other_stream = 0;
  for (int i = 0; i < n; ++i) {
    double u = philox_uniform(42, 3, static_cast<std::uint64_t>(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    s += u;
    s2 += u * u;
    same_as_other_seed += u == philox_uniform(43, 3, static_cast<std::uint64_t>(i));
    same_as_other_stream += u == philox_uniform(42, 4, static_cast<std::uint64_t>(i));
  }
  const double mean = s / n, var = s2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(var, 1.0 / 12, 0.005);
  EXPECT_EQ(same_as_other_seed, 0);
  EXPECT_EQ(same_as_other_stream, 0);
}
