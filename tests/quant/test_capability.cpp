#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "quant/capability.h"
#include "quant/fp8_block.h"
#include "quant/quantize.h"

using namespace mlxcel;

namespace {
Tensor random_f32(const Shape& s, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(shape_numel(s)));
  for (auto& x : v) x = n(rng);
  return Tensor::from_f32(v, s, DType::kF32);
}
std::vector<float> deq(const QuantizedTensor& q, const QuantParams& p) {
  return dequantize(q.weight, q.scales, q.biases.defined() ? &q.biases : nullptr, p, DType::kF32).to_f32();
}
}  // namespace

TEST(Capability, CpuIsNativeForEveryMode) {
  for (const auto& row : capability_table()) {
    if (row.backend == BackendKind::kCpu) {
      EXPECT_EQ(row.route.kind, RouteKind::kNative) << row.params.str();
    }
  }
}

TEST(Capability, GpuRoutesAreStated) {
  Route r = route(BackendKind::kRocm, {QuantMode::kAffine, 3, 64});
  EXPECT_EQ(r.kind, RouteKind::kConvert);
  EXPECT_EQ(r.target, (QuantParams{QuantMode::kAffine, 8, 64}));
  EXPECT_TRUE(r.lossless);
  r = route(BackendKind::kCuda, default_params(QuantMode::kNvfp4));
  EXPECT_EQ(r.kind, RouteKind::kConvert);
  EXPECT_EQ(r.target, (QuantParams{QuantMode::kAffine, 8, 32}));
  EXPECT_FALSE(r.lossless);
  EXPECT_EQ(route(BackendKind::kCuda, {QuantMode::kAffine, 4, 128}).kind, RouteKind::kNative);
  EXPECT_EQ(route(BackendKind::kRocm, default_params(QuantMode::kMxfp4)).kind, RouteKind::kNative);
}

TEST(Capability, RejectionNamesTensorModeBackendAndRemedy) {
  try {
    route_or_throw(BackendKind::kCuda, {QuantMode::kAffine, 7, 64}, "model.layers.0.mlp.up_proj.weight");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUnsupported);
    const std::string m = e.what();
    for (const char* want : {"model.layers.0.mlp.up_proj.weight", "affine 7-bit gs 64", "cuda", "mlx_lm.convert"}) {
      EXPECT_NE(m.find(want), std::string::npos) << m;
    }
  }
}

TEST(Capability, AffineWidenIsExact) {
  for (int bits : {1, 2, 3, 4, 5, 6}) {
    const QuantParams from{QuantMode::kAffine, bits, 64}, to{QuantMode::kAffine, 8, 64};
    QuantizedTensor q = quantize(random_f32({8, 256}, 10 + bits), from);
    QuantizedTensor c = convert_weight(q.weight, q.scales, &q.biases, from, to);
    EXPECT_EQ(deq(q, from), deq(c, to)) << bits;
  }
}

TEST(Capability, Mxfp4ToAffine8IsExact) {
  const QuantParams from = default_params(QuantMode::kMxfp4), to{QuantMode::kAffine, 8, 32};
  QuantizedTensor q = quantize(random_f32({16, 256}, 3, 0.01f), from);
  QuantizedTensor c = convert_weight(q.weight, q.scales, nullptr, from, to, DType::kF32);
  EXPECT_EQ(deq(q, from), deq(c, to));
  QuantizedTensor cb = convert_weight(q.weight, q.scales, nullptr, from, to, DType::kBF16);
  EXPECT_EQ(dequantize(q.weight, q.scales, nullptr, from, DType::kF32).to_f32(), deq(cb, to));
}

TEST(Capability, Nvfp4ToAffine8IsWithinTwoSteps) {
  const QuantParams from = default_params(QuantMode::kNvfp4), to{QuantMode::kAffine, 8, 32};
  QuantizedTensor q = quantize(random_f32({8, 128}, 4), from);
  QuantizedTensor c = convert_weight(q.weight, q.scales, nullptr, from, to, DType::kF32);
  std::vector<float> a = deq(q, from), b = deq(c, to);
  for (std::size_t g = 0; g < a.size() / 32; ++g) {
    float lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < 32; ++j) lo = std::min(lo, a[g * 32 + j]), hi = std::max(hi, a[g * 32 + j]);
    const float step = (hi - lo) / 255.0f;
    for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(a[g * 32 + j] - b[g * 32 + j]), 2.0f * step + 1e-7f);
  }
}

TEST(Fp8Block, DequantizeExactWithRaggedBlocks) {
  const std::int64_t R = 130, C = 224;  // ragged: 2 x 2 blocks of 128
  Tensor w = Tensor::empty(DType::kF8E4M3, {R, C});
  for (std::int64_t i = 0; i < R * C; ++i) w.data<std::uint8_t>()[i] = static_cast<std::uint8_t>((i * 37) % 256 & 0xF7);
  Tensor s = Tensor::from_f32({0.5f, 2.0f, 0.125f, 3.0f}, {2, 2}, DType::kF32);
  Tensor d = dequantize_fp8_block(w, s, {128, 128}, DType::kF32);
  const float sv[4] = {0.5f, 2.0f, 0.125f, 3.0f};
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t j = 0; j < C; ++j)
      ASSERT_EQ(d.data<float>()[i * C + j],
                fp8_e4m3_to_float(w.data<std::uint8_t>()[i * C + j]) * sv[(i / 128) * 2 + j / 128]);
  EXPECT_THROW(dequantize_fp8_block(w, Tensor::from_f32({1, 1}, {1, 2}, DType::kF32), {128, 128}), Error);
  QuantizedTensor q = requantize_fp8_block_to_mxfp8(w, s, {128, 128});
  EXPECT_EQ(q.weight.shape(), (Shape{R, C / 4}));
  EXPECT_EQ(q.scales.shape(), (Shape{R, C / 32}));
}
