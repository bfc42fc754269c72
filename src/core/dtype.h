#pragma once
// Element types. bf16/f16/fp8/fp4 are our own types with exact round-to-nearest-even
// conversions, usable in host and GPU code, so no kernel depends on a vendor half header.
// Decodings follow MLX (MLX_FORMATS.md §2): E4M3 0x7F/0xFF decode to ±480 (MLX CPU/Metal),
// E8M0 255 decodes to +inf.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/hd.h"

namespace mlxcel {

enum class DType : std::uint8_t {
  kBool = 0,
  kU8 = 1,
  kI8 = 2,
  kU16 = 3,
  kI16 = 4,
  kU32 = 5,
  kI32 = 6,
  kU64 = 7,
  kI64 = 8,
  kF16 = 9,
  kBF16 = 10,
  kF32 = 11,
  kF64 = 12,
  kF8E4M3 = 13,  // safetensors F8_E4M3 (e4m3fn)
  kF8E8M0 = 14,  // safetensors F8_E8M0 (power-of-two scale)
  kF8E5M2 = 15,
};

// Size in bytes of one element.
std::size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // safetensors spelling: "BF16", "F8_E4M3", ...
bool dtype_is_float(DType t);
// Parses a safetensors dtype string; returns false if unknown.
bool parse_dtype(std::string_view s, DType* out);

namespace detail {
MLXCEL_HDI std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
MLXCEL_HDI float bits_f32(std::uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

// bfloat16: upper 16 bits of an IEEE binary32.
struct bf16 {
  std::uint16_t bits = 0;
  bf16() = default;
  MLXCEL_HD explicit bf16(float f) : bits(from_float(f)) {}
  MLXCEL_HDI static bf16 from_bits(std::uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
  MLXCEL_HDI static std::uint16_t from_float(float f) {
    std::uint32_t u = detail::f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
    std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return static_cast<std::uint16_t>((u + rounding) >> 16);
  }
  MLXCEL_HDI float to_float() const { return detail::bits_f32(static_cast<std::uint32_t>(bits) << 16); }
  MLXCEL_HD explicit operator float() const { return to_float(); }
};

// IEEE binary16.
struct f16 {
  std::uint16_t bits = 0;
  f16() = default;
  MLXCEL_HD explicit f16(float f) : bits(from_float(f)) {}
  MLXCEL_HDI static f16 from_bits(std::uint16_t b) {
    f16 h;
    h.bits = b;
    return h;
  }
  MLXCEL_HDI static std::uint16_t from_float(float f) {
    std::uint32_t u = detail::f32_bits(f);
    std::uint32_t sign = (u >> 16) & 0x8000u;
    std::uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
    if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf (>= 65520)
    if (a < 0x38800000u) {
      // Result is subnormal or zero: value = a_float; scale to units of 2^-24 and round RNE.
      if (a < 0x33000000u) return static_cast<std::uint16_t>(sign);  // < 2^-25 rounds to 0
      std::uint32_t e = a >> 23;                                      // biased exponent, 102..112
      std::uint32_t m = (a & 0x7fffffu) | 0x800000u;                  // 24-bit significand
      std::uint32_t shift = 126u - e;                                 // 14..24
      std::uint32_t q = m >> shift;
      std::uint32_t rem = m & ((1u << shift) - 1u);
      std::uint32_t half = 1u << (shift - 1u);
      if (rem > half || (rem == half && (q & 1u))) ++q;
      return static_cast<std::uint16_t>(sign | q);
    }
    // Normal: rebias exponent 127 -> 15 and round the 13 dropped mantissa bits RNE.
    std::uint32_t r = a - 0x38000000u;
    std::uint32_t q = r >> 13;
    std::uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  MLXCEL_HDI float to_float() const {
    // f16 -> f32 is exact, so the GPUs' one-instruction conversion gives the same value as the
    // bit arithmetic below. The branchy version, unrolled over a K/V tile, costs registers (on
    // gfx11 it pushed the attention kernels into scratch).
#if defined(__HIP_DEVICE_COMPILE__)
    return static_cast<float>(__builtin_bit_cast(_Float16, bits));
#elif defined(__CUDA_ARCH__)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
#endif
    std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
    std::uint32_t e = (bits >> 10) & 0x1fu;
    std::uint32_t m = bits & 0x3ffu;
    if (e == 0x1fu) return detail::bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
      // subnormal: m * 2^-24, exact in f32
      float v = static_cast<float>(m) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
    return detail::bits_f32(sign | ((e + 112u) << 23) | (m << 13));
  }
  MLXCEL_HD explicit operator float() const { return to_float(); }
};

// FP8 E4M3 (FN variant: no infinities, max finite 448 = 0x7E). 0x7F/0xFF decode to ±480 as in
// MLX's CPU and Metal backends (they are NaN in OCP; MLX's own encoder never emits them).
MLXCEL_HDI float fp8_e4m3_to_float(std::uint8_t b) {
  std::uint32_t s = b >> 7, e = (b >> 3) & 0xfu, m = b & 7u;
  float v;
  if (e == 0) {
    v = static_cast<float>(m) * 0.001953125f;  // m * 2^-9
  } else {
    v = detail::bits_f32(((e + 120u) << 23) | (m << 20));  // (1+m/8) * 2^(e-7)
  }
  return s ? -v : v;
}

// Round-to-nearest-even encoder, saturating to ±448 (0x7E); NaN and inf saturate too, as MLX's
// encoder does (MLX_FORMATS.md §2).
MLXCEL_HDI std::uint8_t float_to_fp8_e4m3(float f) {
  std::uint32_t u = detail::f32_bits(f);
  std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  std::uint32_t a = u & 0x7fffffffu;
  if (a >= 0x43e00000u) return static_cast<std::uint8_t>(sign | 0x7e);  // >= 448, inf, NaN
  if (a < 0x3c800000u) {
    // Below 2^-6: subnormal grid of 2^-9. Add 2^14 in fp32 so hardware rounding does RNE.
    float fa = detail::bits_f32(a) + 16384.0f;
    std::uint32_t q = detail::f32_bits(fa) - detail::f32_bits(16384.0f);
    return static_cast<std::uint8_t>(sign | q);
  }
  // Normal: rebias 127 -> 7, keep 3 mantissa bits with RNE on the 20 dropped bits.
  std::uint32_t r = a - 0x3c000000u;  // subtract (120 << 23)
  std::uint32_t q = r >> 20;
  std::uint32_t rem = r & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) ++q;
  if (q > 0x7eu) q = 0x7eu;
  return static_cast<std::uint8_t>(sign | q);
}

// E8M0: 2^(b-127); b = 0 -> 2^-127 (subnormal in f32); b = 255 -> +inf as MLX decodes it.
MLXCEL_HDI float fp8_e8m0_to_float(std::uint8_t b) {
  if (b == 0) return detail::bits_f32(0x00400000u);
  if (b == 255) return detail::bits_f32(0x7f800000u);
  return detail::bits_f32(static_cast<std::uint32_t>(b) << 23);
}

// FP4 E2M1: sign bit 3, magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}.
MLXCEL_HDI float fp4_e2m1_to_float(std::uint8_t code) {
  const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float v = mag[code & 7u];
  return (code & 8u) ? -v : v;
}

// Float conversions for template code.
template <typename T>
MLXCEL_HDI float to_f32(T v) {
  return static_cast<float>(v);
}
template <>
MLXCEL_HDI float to_f32<bf16>(bf16 v) {
  return v.to_float();
}
template <>
MLXCEL_HDI float to_f32<f16>(f16 v) {
  return v.to_float();
}
template <typename T>
MLXCEL_HDI T from_f32(float v) {
  return static_cast<T>(v);
}
template <>
MLXCEL_HDI bf16 from_f32<bf16>(float v) {
  return bf16(v);
}
template <>
MLXCEL_HDI f16 from_f32<f16>(float v) {
  return f16(v);
}

}  // namespace mlxcel
