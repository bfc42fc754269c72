// Golden cases of MLX_FORMATS.md §7 (values stated by the spec from MLX's source and tests), and
// mlxcel's defined behaviour on adversarial scales. The bulk conformance against live MLX is in
// tests/python/test_quant_*.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/packing.h"
#include "quant/qmm.h"
#include "quant/quantize.h"

using namespace mlxcel;

namespace {
Tensor u32(const std::vector<std::uint32_t>& v, const Shape& s) {
  Tensor t = Tensor::empty(DType::kU32, s);
  std::memcpy(t.raw(), v.data(), v.size() * 4);
  return t;
}
Tensor u8(const std::vector<std::uint8_t>& v, const Shape& s) {
  Tensor t = Tensor::empty(DType::kU8, s);
  std::memcpy(t.raw(), v.data(), v.size());
  return t;
}
}  // namespace

TEST(QuantGolden, AllZeroGroupScalesAndExactZero) {
  struct Case {
    DType dt;
    std::uint32_t scale_bits;
  } cases[] = {{DType::kBF16, 0xB3D7}, {DType::kF16, 0x8002}};
  for (const auto& c : cases) {
    Tensor w = Tensor::from_f32(std::vector<float>(2 * 64, 0.0f), {2, 64}, c.dt);
    QuantizedTensor q = quantize(w, {QuantMode::kAffine, 4, 64});
    EXPECT_EQ(q.scales.data<std::uint16_t>()[0], c.scale_bits) << dtype_name(c.dt);
    EXPECT_EQ(q.biases.data<std::uint16_t>()[0], 0u);
    for (int i = 0; i < q.weight.numel(); ++i) EXPECT_EQ(q.weight.data<std::uint32_t>()[i], 0u);
    Tensor d = dequantize(q.weight, q.scales, &q.biases, {QuantMode::kAffine, 4, 64});
    for (float v : d.to_f32()) EXPECT_EQ(v, 0.0f);
  }
  Tensor w = Tensor::from_f32(std::vector<float>(64, 0.0f), {1, 64}, DType::kF32);
  QuantizedTensor q = quantize(w, {QuantMode::kAffine, 4, 64});
  EXPECT_EQ(q.scales.data<float>()[0], -1e-7f);
}

TEST(QuantGolden, ConstantGroupDequantizesExactly) {
  for (float c : {0.37f, -1.5f, 1234.5f}) {
    Tensor w = Tensor::from_f32(std::vector<float>(32, c), {1, 32}, DType::kF32);
    QuantizedTensor q = quantize(w, {QuantMode::kAffine, 3, 32});
    EXPECT_EQ(q.biases.data<float>()[0], c);
    for (float v : dequantize(q.weight, q.scales, &q.biases, {QuantMode::kAffine, 3, 32}).to_f32()) EXPECT_EQ(v, c);
  }
}

TEST(QuantGolden, ThreeBitElementsStraddleBytesAndWords) {
  // Element 10 = word0 bits 30-31 plus word1 bit 0; element 2 = byte0 bits 6-7 plus byte1 bit 0.
  std::vector<std::uint32_t> words(3, 0);  // 32 elements * 3 bits = 96 bits
  words[0] = 0xC0000000u;
  words[1] = 0x1u;
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(words.data());
  EXPECT_EQ(quant::get_code(bytes, 10, 3), 7u);
  EXPECT_EQ(quant::get_code(bytes, 9, 3), 0u);
  EXPECT_EQ(quant::get_code(bytes, 11, 3), 0u);
  std::vector<std::uint32_t> w2(3, 0);
  w2[0] = 0x1C0u;  // bits 6, 7, 8
  EXPECT_EQ(quant::get_code(reinterpret_cast<const std::uint8_t*>(w2.data()), 2, 3), 7u);
  // Through dequantize, scale 1 and bias 0: element 10 is 7, its neighbours 0.
  Tensor s = Tensor::from_f32({1.0f}, {1, 1}, DType::kF32), b = Tensor::from_f32({0.0f}, {1, 1}, DType::kF32);
  std::vector<float> d = dequantize(u32(words, {1, 3}), s, &b, {QuantMode::kAffine, 3, 32}).to_f32();
  for (int j = 0; j < 32; ++j) EXPECT_EQ(d[j], j == 10 ? 7.0f : 0.0f) << j;
  // put_code writes the same stream.
  std::vector<std::uint8_t> row(12, 0);
  quant::put_code(row.data(), 10, 3, 7);
  EXPECT_EQ(0, std::memcmp(row.data(), words.data(), 12));
}

TEST(QuantGolden, FiveAndSixBitStraddling) {
  // 5-bit element 1 = byte0 bits 5-7 plus byte1 bits 0-1; 6-bit element 1 = byte0 bits 6-7 plus byte1 bits 0-3.
  std::uint8_t b5[5] = {0xE0, 0x03, 0, 0, 0};
  EXPECT_EQ(quant::get_code(b5, 1, 5), 31u);
  EXPECT_EQ(quant::get_code(b5, 0, 5), 0u);
  std::uint8_t b6[3] = {0xC0, 0x0F, 0};
  EXPECT_EQ(quant::get_code(b6, 1, 6), 63u);
  EXPECT_EQ(quant::get_code(b6, 2, 6), 0u);
}

TEST(QuantGolden, Mxfp4Byte0x37WithScale127) {
  std::vector<std::uint32_t> w(4, 0);
  w[0] = 0x37;  // low nibble 7 (+6.0) first, high nibble 3 (+1.5)
  Tensor d = dequantize(u32(w, {1, 4}), u8({127}, {1, 1}), nullptr, {QuantMode::kMxfp4, 4, 32}, DType::kF32);
  EXPECT_EQ(d.data<float>()[0], 6.0f);
  EXPECT_EQ(d.data<float>()[1], 1.5f);
  EXPECT_EQ(d.data<float>()[2], 0.0f);
}

TEST(QuantGolden, E4M3Codes) {
  std::vector<std::uint32_t> w(8, 0);
  w[0] = 0x7Eu | (0x01u << 8) | (0x08u << 16) | (0xFEu << 24);
  Tensor d = dequantize(u32(w, {1, 8}), u8({127}, {1, 1}), nullptr, {QuantMode::kMxfp8, 8, 32}, DType::kF32);
  EXPECT_EQ(d.data<float>()[0], 448.0f);
  EXPECT_EQ(d.data<float>()[1], std::ldexp(1.0f, -9));
  EXPECT_EQ(d.data<float>()[2], std::ldexp(1.0f, -6));
  EXPECT_EQ(d.data<float>()[3], -448.0f);
}

TEST(QuantAdversarial, InvalidScaleBytesGiveZeroNotNaN) {
  // E8M0 255 (+inf in MLX) and E4M3 0x7F / 0xFF (NaN in MLX) decode their group to 0 in every op.
  std::vector<std::uint32_t> w(8, 0x22222222u);
  Tensor x = Tensor::from_f32(std::vector<float>(64, 1.0f), {1, 64}, DType::kF32);
  {
    Tensor wq = u32(std::vector<std::uint32_t>(16, 0x11223344u), {1, 16});
    Tensor s = u8({255, 127}, {1, 2});
    std::vector<float> d = dequantize(wq, s, nullptr, {QuantMode::kMxfp8, 8, 32}, DType::kF32).to_f32();
    for (int j = 0; j < 32; ++j) EXPECT_EQ(d[j], 0.0f);
    EXPECT_NE(d[32], 0.0f);
    Tensor y = quantized_matmul(x, wq, s, nullptr, true, {QuantMode::kMxfp8, 8, 32});
    EXPECT_TRUE(std::isfinite(y.data<float>()[0]));
  }
  {
    Tensor wq = u32(w, {1, 8});
    Tensor s = u8({0x7F, 0xFF, 0x38, 0x38}, {1, 4});
    std::vector<float> d = dequantize(wq, s, nullptr, {QuantMode::kNvfp4, 4, 16}, DType::kF32).to_f32();
    for (int j = 0; j < 32; ++j) EXPECT_EQ(d[j], 0.0f);
    for (int j = 32; j < 64; ++j) EXPECT_EQ(d[j], 1.0f);
  }
  // E4M3 elements 0x7F / 0xFF in mxfp8 weights decode to 0 as well.
  Tensor wq = u32(std::vector<std::uint32_t>(8, 0x7F7FFF38u), {1, 8});
  std::vector<float> d = dequantize(wq, u8({127}, {1, 1}), nullptr, {QuantMode::kMxfp8, 8, 32}, DType::kF32).to_f32();
  EXPECT_EQ(d[0], 1.0f);
  EXPECT_EQ(d[1], 0.0f);
  EXPECT_EQ(d[2], 0.0f);
  EXPECT_EQ(d[3], 0.0f);
}

TEST(QuantAdversarial, CheckScalesRejectsWithTensorAndGroup) {
  auto expect_throw = [](const Tensor& s, const Tensor* b, QuantParams p, const std::string& want) {
    try {
      check_scales(s, b, p, "model.layers.3.mlp.up_proj");
      FAIL() << "expected rejection";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kBadInput);
      const std::string m = e.what();
      EXPECT_NE(m.find("model.layers.3.mlp.up_proj"), std::string::npos) << m;
      EXPECT_NE(m.find(want), std::string::npos) << m;
    }
  };
  expect_throw(u8({1, 2, 3, 255}, {2, 2}), nullptr, {QuantMode::kMxfp4, 4, 32}, "row 1, group 1");
  expect_throw(u8({1, 0x7F}, {1, 2}), nullptr, {QuantMode::kNvfp4, 4, 16}, "0x7F");
  expect_throw(u8({0xFF, 1}, {1, 2}), nullptr, {QuantMode::kNvfp4, 4, 16}, "0xFF");
  Tensor fs = Tensor::from_f32({1.0f, INFINITY}, {1, 2}, DType::kBF16);
  Tensor fb = Tensor::from_f32({0.0f, 0.0f}, {1, 2}, DType::kBF16);
  expect_throw(fs, &fb, {QuantMode::kAffine, 4, 64}, "non-finite");
  Tensor ns = Tensor::from_f32({1.0f, 1.0f}, {1, 2}, DType::kF16);
  Tensor nb = Tensor::from_f32({NAN, 0.0f}, {1, 2}, DType::kF16);
  expect_throw(ns, &nb, {QuantMode::kAffine, 4, 64}, "biases");
  EXPECT_NO_THROW(check_scales(u8({0, 127, 254}, {1, 3}), nullptr, {QuantMode::kMxfp8, 8, 32}, "ok"));
  EXPECT_NO_THROW(check_scales(u8({0x7E, 0xFE, 0}, {1, 3}), nullptr, {QuantMode::kNvfp4, 4, 16}, "ok"));
}

TEST(QuantAdversarial, QuantizeNonFiniteInputsTerminates) {
  std::vector<float> v(64, 1.0f);
  v[0] = NAN;
  v[40] = INFINITY;
  Tensor w = Tensor::from_f32(v, {1, 64}, DType::kF32);
  for (QuantParams p : {QuantParams{QuantMode::kAffine, 4, 32}, default_params(QuantMode::kMxfp4),
                        default_params(QuantMode::kMxfp8), default_params(QuantMode::kNvfp4)}) {
    QuantizedTensor q = quantize(w, p);
    EXPECT_EQ(q.weight.dim(-1), 64 * p.bits / 32);
    if (p.mode != QuantMode::kAffine) {
      for (int i = 0; i < q.scales.numel(); ++i) EXPECT_FALSE(quant::fp_scale_invalid(p.mode, q.scales.data<std::uint8_t>()[i]));
    }
  }
}

TEST(QuantParamsTest, ValidationAndShapes) {
  EXPECT_TRUE(params_valid({QuantMode::kAffine, 5, 128}));
  EXPECT_FALSE(params_valid({QuantMode::kAffine, 7, 64}));
  EXPECT_FALSE(params_valid({QuantMode::kAffine, 4, 16}));
  EXPECT_FALSE(params_valid({QuantMode::kMxfp4, 4, 16}));
  EXPECT_FALSE(params_valid({QuantMode::kNvfp4, 8, 16}));
  EXPECT_THROW(check_params({QuantMode::kAffine, 7, 64}, "x"), Error);
  EXPECT_EQ(packed_weight_shape({3, 8, 256}, {QuantMode::kAffine, 3, 64}), (Shape{3, 8, 24}));
  EXPECT_EQ(scales_shape({8, 256}, {QuantMode::kNvfp4, 4, 16}), (Shape{8, 16}));
  Tensor w = Tensor::empty(DType::kU32, {4, 32});
  Tensor s = Tensor::empty(DType::kBF16, {4, 4});
  Tensor b = Tensor::empty(DType::kBF16, {4, 4});
  EXPECT_NO_THROW(check_quantized_shapes(w, s, &b, {QuantMode::kAffine, 4, 64}, "t"));
  EXPECT_THROW(check_quantized_shapes(w, s, &b, {QuantMode::kAffine, 4, 32}, "t"), Error);
  EXPECT_THROW(check_quantized_shapes(w, s, nullptr, {QuantMode::kAffine, 4, 64}, "t"), Error);
  Tensor s8 = Tensor::empty(DType::kU8, {4, 8});
  EXPECT_NO_THROW(check_quantized_shapes(w, s8, nullptr, {QuantMode::kMxfp4, 4, 32}, "t"));
  EXPECT_THROW(check_quantized_shapes(w, s8, &b, {QuantMode::kMxfp4, 4, 32}, "t"), Error);
}
