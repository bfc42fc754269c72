#pragma once
// MLX packing (MLX_FORMATS.md §1.2): each packed row is an LSB-first little-endian bitstream;
// element j occupies stream bits [j*bits, (j+1)*bits), bit b being bit b%8 of byte b/8. 3/5/6-bit
// values straddle bytes and words. The byte view makes the rule independent of host endianness.
#include <cstdint>

namespace mlxcel::quant {

inline std::uint32_t get_code(const std::uint8_t* row, std::int64_t j, int bits) {
  const std::int64_t o = j * bits;
  const std::uint8_t* p = row + (o >> 3);
  const int s = static_cast<int>(o & 7);
  // bits <= 8 and s <= 7, so the value lies within two bytes.
  std::uint32_t v = p[0];
  if (s + bits > 8) v |= static_cast<std::uint32_t>(p[1]) << 8;
  return (v >> s) & ((1u << bits) - 1u);
}

// ORs `code` into a zero-initialized packed row.
inline void put_code(std::uint8_t* row, std::int64_t j, int bits, std::uint32_t code) {
  const std::int64_t o = j * bits;
  std::uint8_t* p = row + (o >> 3);
  const int s = static_cast<int>(o & 7);
  const std::uint32_t v = code << s;
  p[0] |= static_cast<std::uint8_t>(v & 0xffu);
  if (s + bits > 8) p[1] |= static_cast<std::uint8_t>(v >> 8);
}

}  // namespace mlxcel::quant
