// Conversions of our own bf16/f16/fp8/fp4 types, checked against independent references:
// the compiler's _Float16 for binary16, and brute-force nearest-grid-value searches for bf16 and
// E4M3, so the tested code never checks itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"

using namespace mlxcel;

namespace {
float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

TEST(DType, F16DecodeAllCodesMatchesCompiler) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    _Float16 h;
    std::uint16_t b16 = static_cast<std::uint16_t>(b);
    std::memcpy(&h, &b16, 2);
    float want = static_cast<float>(h);
    float got = f16::from_bits(b16).to_float();
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
    } else {
      ASSERT_EQ(std::memcmp(&want, &got, 4), 0) << "code " << b;
    }
  }
}

TEST(DType, F16EncodeMatchesCompilerOnRandomAndTies) {
  std::mt19937 rng(1234);
  std::vector<float> vals;
  for (int i = 0; i < 2000000; ++i) vals.push_back(bits_to_float(rng()));
  // Exact ties and neighbours around every f16 value (normal and subnormal).
  for (std::uint32_t b = 0; b < 0x7c00; ++b) {
    float a = f16::from_bits(static_cast<std::uint16_t>(b)).to_float();
    float c = f16::from_bits(static_cast<std::uint16_t>(b + 1)).to_float();
    float mid = static_cast<float>((static_cast<double>(a) + c) / 2);
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), a}) {
      vals.push_back(v);
      vals.push_back(-v);
    }
  }
  vals.push_back(65504.0f);
  vals.push_back(65519.99f);
  vals.push_back(65520.0f);
  vals.push_back(std::numeric_limits<float>::infinity());
  for (float v : vals) {
    _Float16 h = static_cast<_Float16>(v);
    std::uint16_t want;
    std::memcpy(&want, &h, 2);
    std::uint16_t got = f16(v).bits;
    if (std::isnan(v)) {
      EXPECT_EQ(got & 0x7c00, 0x7c00);
      EXPECT_NE(got & 0x3ff, 0);
    } else {
      ASSERT_EQ(got, want) << "value " << v;
    }
  }
}

// Reference bf16 rounding: pick the nearer of the two bf16 neighbours in double, ties to even.
std::uint16_t bf16_reference(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  std::uint16_t lo = static_cast<std::uint16_t>(u >> 16);
  if ((u & 0xffffu) == 0) return lo;
  std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);
  double dl = std::fabs(static_cast<double>(bf16::from_bits(lo).to_float()) - v);
  double dh = std::fabs(static_cast<double>(bf16::from_bits(hi).to_float()) - v);
  if ((hi & 0x7f80) == 0x7f80 && (lo & 0x7f80) != 0x7f80) {
    // rounding past the largest finite value: IEEE rounds to inf once beyond the midpoint
    dh = std::fabs(std::ldexp(1.0, 128) - std::fabs(static_cast<double>(v)));
  }
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(DType, BF16EncodeRoundsToNearestEven) {
  std::mt19937 rng(99);
  for (int i = 0; i < 2000000; ++i) {
    float v = bits_to_float(rng());
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(bf16(v).to_float()));
      continue;
    }
    ASSERT_EQ(bf16(v).bits, bf16_reference(v)) << v;
  }
  // exact ties: halfway between two bf16 values
  EXPECT_EQ(bf16(bits_to_float(0x3f808000u)).bits, 0x3f80);  // tie, even stays
  EXPECT_EQ(bf16(bits_to_float(0x3f818000u)).bits, 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(bf16(bits_to_float(0x7f7fffffu)).bits, 0x7f80);  // max float rounds to inf
}

TEST(DType, E4M3DecodeMatchesFormula) {
  for (int b = 0; b < 256; ++b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
    if (s) v = -v;
    EXPECT_EQ(fp8_e4m3_to_float(static_cast<std::uint8_t>(b)), static_cast<float>(v)) << b;
  }
  // Spec golden cases (MLX_FORMATS.md §7), and MLX's ±480 for 0x7F/0xFF.
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(fp8_e4m3_to_float(0x7f), 480.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0xff), -480.0f);
}

TEST(DType, E4M3EncodeIsNearestEvenAndSaturates) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(-12.0f, 9.5f);
  for (int i = 0; i < 200000; ++i) {
    float v = std::ldexp(1.0f, static_cast<int>(std::floor(mag(rng)))) * (1.0f + (rng() % 1000) / 1000.0f);
    if (rng() & 1) v = -v;
    std::uint8_t got = float_to_fp8_e4m3(v);
    // brute force over the finite codes of the same sign (0x00..0x7E)
    double best = 1e30;
    int best_code = -1;
    for (int c = 0; c <= 0x7e; ++c) {
      double d = std::fabs(std::fabs(static_cast<double>(v)) - fp8_e4m3_to_float(static_cast<std::uint8_t>(c)));
      if (d < best || (d == best && (c & 1) == 0)) {
        best = d;
        best_code = c;
      }
    }
    int want = best_code | (v < 0 ? 0x80 : 0);
    ASSERT_EQ(got, want) << v;
  }
  EXPECT_EQ(float_to_fp8_e4m3(1e6f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(-1e6f), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7e);
}

TEST(DType, E8M0AndE2M1) {
  EXPECT_EQ(fp8_e8m0_to_float(127), 1.0f);
  EXPECT_EQ(fp8_e8m0_to_float(130), 8.0f);
  EXPECT_EQ(fp8_e8m0_to_float(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isinf(fp8_e8m0_to_float(255)));
  const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) {
    float want = (c & 8) ? -mags[c & 7] : mags[c & 7];
    EXPECT_EQ(fp4_e2m1_to_float(static_cast<std::uint8_t>(c)), want);
  }
}

TEST(DType, NamesRoundTrip) {
  for (auto t : {DType::kBF16, DType::kF16, DType::kF32, DType::kU32, DType::kU8, DType::kI32,
                 DType::kI64, DType::kF8E4M3, DType::kF8E8M0}) {
    DType back;
    ASSERT_TRUE(parse_dtype(dtype_name(t), &back));
    EXPECT_EQ(back, t);
  }
  DType dummy;
  EXPECT_FALSE(parse_dtype("F7", &dummy));
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
}
