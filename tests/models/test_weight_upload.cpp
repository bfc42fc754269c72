// The op layer's weight upload (ops::LinearWeight) on backends that copy weights and ask for
// paired affine scales (Backend::wants_paired_scales, the GPU backend's upload layout): the
// pairs hold exactly the checkpoint's scales and biases, expert strides and fused (concat)
// matrices follow them, other formats and in-place backends keep the checkpoint's two arrays,
// and a CPU kernel handed a paired matrix refuses it instead of reading it as two arrays.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "ops/ops.h"
#include "quant/quantize.h"

using namespace mlxcel;

namespace {

// A CPU backend that behaves like a discrete GPU's at upload: weights are copied (into host
// allocations it can read back) and affine scales are asked for in pairs.
class CopyingPairedBackend final : public cpu::CpuBackend {
 public:
  bool host_memory_is_device_memory() const override { return false; }
  bool wants_paired_scales() const override { return true; }
};

// A U32-packed [rows, k] affine 4-bit weight with scales / biases [rows, k / gs] in `dt`, every
// scale and bias distinct (so a swapped or shifted element cannot go unnoticed).
struct Affine {
  Tensor w, scales, biases;
};
Affine affine(std::vector<std::int64_t> lead, std::int64_t k, int gs, DType dt, float seed) {
  Affine a;
  Shape ws(lead.begin(), lead.end()), ss(lead.begin(), lead.end());
  ws.push_back(k / 8);
  ss.push_back(k / gs);
  a.w = Tensor::empty(DType::kU32, ws);
  auto* wp = static_cast<std::uint32_t*>(a.w.raw());
  for (std::int64_t i = 0; i < a.w.numel(); ++i)
    wp[i] = static_cast<std::uint32_t>(i * 2654435761u);
  a.scales = Tensor::empty(dt, ss);
  a.biases = Tensor::empty(dt, ss);
  for (std::int64_t i = 0; i < a.scales.numel(); ++i) {
    quant::store_float(a.scales.raw(), dt, i, seed + 0.25f * static_cast<float>(i));
    quant::store_float(a.biases.raw(), dt, i, -seed - 0.5f * static_cast<float>(i));
  }
  return a;
}

QuantParams affine4(int gs) {
  QuantParams q;
  q.mode = QuantMode::kAffine;
  q.bits = 4;
  q.group_size = gs;
  return q;
}

// Element i of the uploaded scales / biases as the kernels address them (i * scale_step).
float scale_at(const backend::Matrix& m, std::int64_t i) {
  return quant::load_float(m.scales, m.scales_dtype, i * m.scale_step);
}
float bias_at(const backend::Matrix& m, std::int64_t i) {
  return quant::load_float(m.biases, m.scales_dtype, i * m.scale_step);
}

void expect_same_scales(const backend::Matrix& m, const Tensor& scales, const Tensor& biases,
                        std::int64_t offset = 0) {
  for (std::int64_t i = 0; i < scales.numel(); ++i) {
    ASSERT_EQ(scale_at(m, i), quant::load_float(scales.raw(), scales.dtype(), offset + i)) << i;
    ASSERT_EQ(bias_at(m, i), quant::load_float(biases.raw(), biases.dtype(), offset + i)) << i;
  }
}

TEST(WeightUpload, AffineScalesArePairedWhereTheBackendAsks) {
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    CopyingPairedBackend be;
    // 1,536 x 576 with group size 64: 9 groups per row (odd), as real widths give.
    const Affine a = affine({1536}, 576, 64, dt, 1.0f);
    const auto lw = ops::LinearWeight::upload(be, "mlp.down_proj", a.w, a.scales, a.biases,
                                              affine4(64), 576, 1536);
    const backend::Matrix& m = lw.matrix();
    ASSERT_EQ(m.scale_step, 2) << dtype_name(dt);
    EXPECT_EQ(static_cast<const char*>(m.biases),
              static_cast<const char*>(m.scales) + dtype_size(dt));
    EXPECT_NE(m.scales, a.scales.raw());  // a copy, not the checkpoint's array
    expect_same_scales(m, a.scales, a.biases);
    EXPECT_EQ(std::memcmp(m.w, a.w.raw(), a.w.nbytes()), 0);
    EXPECT_EQ(lw.weight_bytes(), a.w.nbytes() + a.scales.nbytes() + a.biases.nbytes());
  }
}

TEST(WeightUpload, StackedExpertsStrideOverTheirPairs) {
  CopyingPairedBackend be;
  const std::int64_t E = 3, n = 40, k = 256;
  const Affine a = affine({E, n}, k, 32, DType::kBF16, 2.0f);
  const auto lw = ops::LinearWeight::upload_stacked(be, "switch_mlp.up_proj", a.w, a.scales,
                                                    a.biases, affine4(32), k, n);
  const backend::Matrix& m = lw.matrix();
  ASSERT_EQ(m.scale_step, 2);
  EXPECT_EQ(m.expert_stride_s, 2 * a.scales.nbytes() / E);
  for (std::int64_t e = 0; e < E; ++e) {
    const backend::Matrix me = m.expert(e);
    for (std::int64_t i = 0; i < n * (k / 32); ++i) {
      ASSERT_EQ(scale_at(me, i),
                quant::load_float(a.scales.raw(), DType::kBF16, e * n * (k / 32) + i));
      ASSERT_EQ(bias_at(me, i),
                quant::load_float(a.biases.raw(), DType::kBF16, e * n * (k / 32) + i));
    }
  }
}

TEST(WeightUpload, FusedPartsArePairedInRowOrder) {
  CopyingPairedBackend be;
  const Affine q = affine({64}, 128, 64, DType::kBF16, 1.0f),
               kk = affine({32}, 128, 64, DType::kBF16, 7.0f);
  const auto lq =
      ops::LinearWeight::upload(be, "q_proj", q.w, q.scales, q.biases, affine4(64), 128, 64);
  const auto lk =
      ops::LinearWeight::upload(be, "k_proj", kk.w, kk.scales, kk.biases, affine4(64), 128, 32);
  const std::array<const ops::LinearWeight*, 2> parts{&lq, &lk};
  const auto fused = ops::LinearWeight::concat(be, "qk", parts);
  ASSERT_TRUE(fused.has_value());
  const backend::Matrix& m = fused->matrix();
  ASSERT_EQ(m.scale_step, 2);
  ASSERT_EQ(m.n, 96);
  for (std::int64_t i = 0; i < 64 * 2; ++i) {
    ASSERT_EQ(scale_at(m, i), quant::load_float(q.scales.raw(), DType::kBF16, i));
    ASSERT_EQ(bias_at(m, i), quant::load_float(q.biases.raw(), DType::kBF16, i));
  }
  for (std::int64_t i = 0; i < 32 * 2; ++i) {
    ASSERT_EQ(scale_at(m, 128 + i), quant::load_float(kk.scales.raw(), DType::kBF16, i));
    ASSERT_EQ(bias_at(m, 128 + i), quant::load_float(kk.biases.raw(), DType::kBF16, i));
  }
}

TEST(WeightUpload, OtherFormatsAndInPlaceBackendsKeepTwoArrays) {
  // mxfp4 has no biases: nothing to pair.
  CopyingPairedBackend be;
  Tensor w = Tensor::empty(DType::kU32, {16, 8});
  Tensor s = Tensor::empty(DType::kU8, {16, 2});
  QuantParams mx;
  mx.mode = QuantMode::kMxfp4;
  mx.bits = 4;
  mx.group_size = 32;
  const auto lm = ops::LinearWeight::upload(be, "mx", w, s, Tensor(), mx, 64, 16);
  EXPECT_EQ(lm.matrix().scale_step, 1);
  EXPECT_EQ(lm.matrix().biases, nullptr);
  // The CPU uses the checkpoint's tensors in place and never asks for pairs.
  cpu::CpuBackend cpu;
  EXPECT_FALSE(cpu.wants_paired_scales());
  const Affine a = affine({48}, 192, 64, DType::kBF16, 3.0f);
  const auto lc =
      ops::LinearWeight::upload(cpu, "o_proj", a.w, a.scales, a.biases, affine4(64), 192, 48);
  EXPECT_EQ(lc.matrix().scale_step, 1);
  EXPECT_EQ(lc.matrix().scales, a.scales.raw());
  EXPECT_EQ(lc.matrix().biases, a.biases.raw());
}

TEST(WeightUpload, CpuKernelsRefuseAPairedMatrix) {
  CopyingPairedBackend be;
  const Affine a = affine({48}, 192, 64, DType::kBF16, 1.0f);
  const auto lw =
      ops::LinearWeight::upload(be, "o_proj", a.w, a.scales, a.biases, affine4(64), 192, 48);
  std::vector<float> x(192, 0.5f), y(48, 0.0f);
  const backend::Act xa{x.data(), DType::kF32, 1, 192, 192}, ya{y.data(), DType::kF32, 1, 48, 48};
  cpu::CpuBackend cpu;
  try {
    cpu.linear(backend::LinearArgs(xa, lw.matrix(), nullptr, ya, DType::kBF16));
    FAIL() << "a paired matrix was read by the CPU's linear";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kInternal);
    EXPECT_NE(std::string(e.what()).find("paired scales"), std::string::npos) << e.what();
  }
}

}  // namespace
