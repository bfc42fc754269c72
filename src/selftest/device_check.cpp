#include "selftest/device_check.h"

#include <algorithm>
#include <cmath>

#include "quant/quantize.h"

namespace mlxcel::selftest {

void* DeviceMem::raw(backend::Backend& be, const void* src, std::size_t bytes) {
  bufs.push_back(std::make_unique<backend::DeviceBuffer>(
      be.allocate(backend::MemoryKind::kWorkspace, std::max<std::size_t>(bytes, 4))));
  if (bytes) be.copy(bufs.back()->data(), src, bytes, backend::CopyKind::kHostToDevice);
  return bufs.back()->data();
}

backend::Act DeviceMem::act(backend::Backend& be, DType act_dtype, const std::vector<float>& vals,
                            std::int64_t rows, std::int64_t cols, std::int64_t pad) {
  const DType st = be.activation_storage(act_dtype);
  const std::int64_t stride = cols + pad;
  std::vector<std::uint8_t> host(static_cast<std::size_t>(rows * stride) * dtype_size(st));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      quant::store_float(host.data(), st, r * stride + c, vals[r * cols + c]);
  return backend::Act{raw(be, host.data(), host.size()), st, rows, cols, stride};
}

std::vector<float> read_act(backend::Backend& be, const backend::Act& a) {
  be.synchronize();
  std::vector<std::uint8_t> host(static_cast<std::size_t>(a.rows * a.stride) * dtype_size(a.dtype));
  if (a.rows) be.copy(host.data(), a.data, host.size(), backend::CopyKind::kDeviceToHost);
  std::vector<float> out(static_cast<std::size_t>(a.rows * a.cols));
  for (std::int64_t r = 0; r < a.rows; ++r)
    for (std::int64_t c = 0; c < a.cols; ++c)
      out[r * a.cols + c] = quant::load_float(host.data(), a.dtype, r * a.stride + c);
  return out;
}

std::vector<float> randn(std::mt19937& rng, std::size_t n, float sd, DType t) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = quant::round_to(t, d(rng));
  return v;
}

double normalized_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num = std::max(num, std::fabs(static_cast<double>(got[i]) - want[i]));
    den = std::max(den, std::fabs(static_cast<double>(want[i])));
  }
  return num / std::max(den, 1e-6);
}

double rounding_steps(DType act, double n) {
  const double u = act == DType::kBF16  ? std::ldexp(1.0, -8)
                   : act == DType::kF16 ? std::ldexp(1.0, -11)
                                        : 2e-6;
  return n * u;
}

}  // namespace mlxcel::selftest
