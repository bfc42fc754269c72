// RMSNorm conformance: the CPU reference against a double-precision oracle written here, and the
// GPU kernel against the CPU reference, over odd sizes (1, 31, 32, 33, 4097, ...), strided rows
// and every float dtype. Bounds are in units of the output dtype's rounding step.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/rms_norm.h"
#include "backend/gpu/rms_norm.h"
#include "backend/gpu/runtime.h"
#include "gpu_test_util.h"

using namespace mlxcel;

namespace {

struct Case {
  std::int64_t rows, cols, stride_pad;
};
const Case kCases[] = {{1, 1, 0},   {3, 31, 0}, {2, 32, 5},    {5, 33, 0},  {1, 64, 0},
                       {7, 255, 1}, {2, 1000, 0}, {3, 4097, 3}, {1, 8192, 0}, {33, 127, 0}};
const DType kTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

double unit_roundoff(DType t) {
  switch (t) {
    case DType::kBF16: return std::ldexp(1.0, -8);
    case DType::kF16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -24);
  }
}

std::vector<std::uint8_t> make_data(DType t, std::int64_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n) * dtype_size(t));
  for (std::int64_t i = 0; i < n; ++i) {
    float v = dist(rng);
    switch (t) {
      case DType::kF32: reinterpret_cast<float*>(out.data())[i] = v; break;
      case DType::kBF16: reinterpret_cast<bf16*>(out.data())[i] = bf16(v); break;
      case DType::kF16: reinterpret_cast<f16*>(out.data())[i] = f16(v); break;
      default: break;
    }
  }
  return out;
}

double get(DType t, const std::vector<std::uint8_t>& buf, std::int64_t i) {
  switch (t) {
    case DType::kF32: return reinterpret_cast<const float*>(buf.data())[i];
    case DType::kBF16: return reinterpret_cast<const bf16*>(buf.data())[i].to_float();
    case DType::kF16: return reinterpret_cast<const f16*>(buf.data())[i].to_float();
    default: return 0;
  }
}

// Max error in units of |oracle| * u + tiny, so results are comparable across dtypes.
double max_ulps(DType t, const std::vector<std::uint8_t>& got, const std::vector<double>& want) {
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    double g = get(t, got, static_cast<std::int64_t>(i));
    if (!std::isfinite(g)) return 1e30;
    // Below the smallest normal the rounding step is fixed (f16 subnormals: 2^-24).
    double floor_mag = t == DType::kF16 ? std::ldexp(1.0, -14) : std::ldexp(1.0, -126);
    double denom = std::max(std::fabs(want[i]), floor_mag) * unit_roundoff(t);
    worst = std::max(worst, std::fabs(g - want[i]) / denom);
  }
  return worst;
}

std::vector<double> oracle(DType t, const std::vector<std::uint8_t>& x,
                           const std::vector<std::uint8_t>& w, const Case& c, float eps) {
  std::int64_t stride = c.cols + c.stride_pad;
  std::vector<double> y(static_cast<std::size_t>(c.rows * c.cols));
  for (std::int64_t r = 0; r < c.rows; ++r) {
    double ss = 0;
    for (std::int64_t k = 0; k < c.cols; ++k) ss += get(t, x, r * stride + k) * get(t, x, r * stride + k);
    double inv = 1.0 / std::sqrt(ss / c.cols + eps);
    for (std::int64_t k = 0; k < c.cols; ++k)
      y[r * c.cols + k] = get(t, x, r * stride + k) * inv * get(t, w, k);
  }
  return y;
}

}  // namespace

TEST(RmsNormConformance, CpuReferenceMatchesOracle) {
  std::mt19937 rng(42);
  const float eps = 1e-5f;
  for (DType t : kTypes) {
    for (const Case& c : kCases) {
      std::int64_t stride = c.cols + c.stride_pad;
      auto x = make_data(t, c.rows * stride, rng, 2.0f);
      auto w = make_data(t, c.cols, rng, 1.0f);
      std::vector<std::uint8_t> y(static_cast<std::size_t>(c.rows * c.cols) * dtype_size(t));
      cpu::rms_norm_ref(x.data(), w.data(), y.data(), c.rows, c.cols, stride, eps, t);
      // One rounding of the output plus fp32 intermediates: within 1.5 units of roundoff for
      // bf16/f16 (half an ulp each way plus fp32 error), and a few ulp for f32.
      double bound = t == DType::kF32 ? 16.0 : 1.5;
      EXPECT_LE(max_ulps(t, y, oracle(t, x, w, c, eps)), bound)
          << dtype_name(t) << " rows=" << c.rows << " cols=" << c.cols;
    }
  }
}

TEST(RmsNormConformance, GpuMatchesCpuReference) {
  MLXCEL_REQUIRE_GPU_OR_SKIP();
  gpu::Stream stream(0);
  std::mt19937 rng(7);
  const float eps = 1e-6f;
  for (DType t : kTypes) {
    for (const Case& c : kCases) {
      std::int64_t stride = c.cols + c.stride_pad;
      auto x = make_data(t, c.rows * stride, rng, 3.0f);
      auto w = make_data(t, c.cols, rng, 1.0f);
      std::size_t ybytes = static_cast<std::size_t>(c.rows * c.cols) * dtype_size(t);
      std::vector<std::uint8_t> y_ref(ybytes), y_gpu(ybytes);
      cpu::rms_norm_ref(x.data(), w.data(), y_ref.data(), c.rows, c.cols, stride, eps, t);

      gpu::DeviceBuffer dx(x.size()), dw(w.size()), dy(ybytes);
      gpu::copy_to_device(dx.data(), x.data(), x.size(), stream);
      gpu::copy_to_device(dw.data(), w.data(), w.size(), stream);
      gpu::rms_norm(dx.data(), dw.data(), dy.data(), c.rows, c.cols, stride, eps, t, stream);
      gpu::copy_to_host(y_gpu.data(), dy.data(), ybytes, stream);

      std::vector<double> ref(static_cast<std::size_t>(c.rows * c.cols));
      for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = get(t, y_ref, static_cast<std::int64_t>(i));
      // Both round once from fp32; a different summation order can flip one rounding: <= 1 ulp
      // (2 units of roundoff) for bf16/f16, a few ulp for f32.
      double bound = t == DType::kF32 ? 64.0 : 2.01;
      EXPECT_LE(max_ulps(t, y_gpu, ref), bound)
          << dtype_name(t) << " rows=" << c.rows << " cols=" << c.cols;
    }
  }
}

TEST(AddRmsNormConformance, FusedEqualsUnfusedOnCpuAndGpu) {
  std::mt19937 rng(11);
  const float eps = 1e-5f;
  bool have_gpu = test::gpu_available();
  if (!have_gpu && test::require_gpu()) FAIL() << "GPU required";
  for (DType t : kTypes) {
    for (const Case& c : kCases) {
      std::int64_t n = c.rows * c.cols;
      auto x = make_data(t, n, rng, 1.0f);
      auto r = make_data(t, n, rng, 1.0f);
      auto w = make_data(t, c.cols, rng, 1.0f);
      std::size_t bytes = static_cast<std::size_t>(n) * dtype_size(t);
      std::vector<std::uint8_t> y(bytes), h(bytes), y2(bytes);
      cpu::add_rms_norm_ref(x.data(), r.data(), w.data(), y.data(), h.data(), c.rows, c.cols, eps, t);
      // Unfused twin: explicit add rounded to t, then rms_norm.
      for (std::int64_t i = 0; i < n; ++i) {
        double s = get(t, x, i) + get(t, r, i);
        switch (t) {
          case DType::kF32: EXPECT_EQ(reinterpret_cast<float*>(h.data())[i], static_cast<float>(s)); break;
          case DType::kBF16: EXPECT_EQ(reinterpret_cast<bf16*>(h.data())[i].bits, bf16(static_cast<float>(s)).bits); break;
          case DType::kF16: EXPECT_EQ(reinterpret_cast<f16*>(h.data())[i].bits, f16(static_cast<float>(s)).bits); break;
          default: break;
        }
      }
      cpu::rms_norm_ref(h.data(), w.data(), y2.data(), c.rows, c.cols, c.cols, eps, t);
      ASSERT_EQ(y, y2) << "cpu fused != unfused " << dtype_name(t) << " cols=" << c.cols;
      if (!have_gpu) continue;
      gpu::Stream stream(0);
      gpu::DeviceBuffer dx(bytes), dr(bytes), dw(w.size()), dy(bytes), dh(bytes);
      gpu::copy_to_device(dx.data(), x.data(), bytes, stream);
      gpu::copy_to_device(dr.data(), r.data(), bytes, stream);
      gpu::copy_to_device(dw.data(), w.data(), w.size(), stream);
      gpu::add_rms_norm(dx.data(), dr.data(), dw.data(), dy.data(), dh.data(), c.rows, c.cols, eps, t, stream);
      std::vector<std::uint8_t> gy(bytes), gh(bytes);
      gpu::copy_to_host(gy.data(), dy.data(), bytes, stream);
      gpu::copy_to_host(gh.data(), dh.data(), bytes, stream);
      EXPECT_EQ(gh, h) << "gpu residual sum must be bit-exact " << dtype_name(t);
      std::vector<double> ref(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) ref[i] = get(t, y, i);
      EXPECT_LE(max_ulps(t, gy, ref), t == DType::kF32 ? 64.0 : 2.01) << dtype_name(t) << " cols=" << c.cols;
    }
  }
}
