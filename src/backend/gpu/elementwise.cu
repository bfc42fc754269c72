// Elementwise ops over strided activation rows: add and the gated activations (SwiGLU, GeGLU),
// each rounding as the CPU backend does. Same source for CUDA and HIP.
#include "backend/backend.h"
#include "backend/gpu/activation.cuh"
#include "backend/gpu/common.cuh"
#include "backend/gpu/kernels.h"

namespace mlxcel::gpu {
namespace {

constexpr int kThreads = 256;

struct Rows {
  std::int64_t rows, cols, a_stride, b_stride, y_stride;
};

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* y, Rows r, int round) {
  wait_previous_kernel();
  const std::int64_t n = r.rows * r.cols;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = i / r.cols, c = i % r.cols;
    store(y, row * r.y_stride + c,
          to_f32(a[row * r.a_stride + c]) + to_f32(b[row * r.b_stride + c]), round);
  }
}

template <typename T>
__global__ void gated_kernel(const T* g, const T* u, T* y, Rows r, int act, int round) {
  wait_previous_kernel();
  const std::int64_t n = r.rows * r.cols;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = i / r.cols, c = i % r.cols;
    y[row * r.y_stride + c] =
        gated_value(act, g[row * r.a_stride + c], u[row * r.b_stride + c], round);
  }
}

unsigned grid_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 ? b : 65535);
}

}  // namespace

namespace kernels {

void add(const backend::AddArgs& a, const Stream& s) {
  const std::int64_t n = a.y.rows * a.y.cols;
  if (n == 0) return;
  MLXCEL_CHECK(a.a.dtype == a.y.dtype && a.b.dtype == a.y.dtype, ErrorCategory::kInternal,
               "gpu add: dtypes differ");
  const Rows r{a.y.rows, a.y.cols, a.a.stride, a.b.stride, a.y.stride};
  dispatch_act(a.y.dtype, "add", [&](auto tag) {
    using T = decltype(tag);
    launch_kernel(add_kernel<T>, grid_for(n), kThreads, 0, s,
        static_cast<const T*>(a.a.data), static_cast<const T*>(a.b.data), static_cast<T*>(a.y.data),
        r, round_code(a.round));
  });
  check_launch("add", s.device());
}

void gated_activation(const backend::GatedActivationArgs& a, const Stream& s) {
  const std::int64_t n = a.out.rows * a.out.cols;
  if (n == 0) return;
  MLXCEL_CHECK(a.g.dtype == a.out.dtype && a.u.dtype == a.out.dtype, ErrorCategory::kInternal,
               "gpu gated_activation: dtypes differ");
  const Rows r{a.out.rows, a.out.cols, a.g.stride, a.u.stride, a.out.stride};
  dispatch_act(a.out.dtype, "gated_activation", [&](auto tag) {
    using T = decltype(tag);
    launch_kernel(gated_kernel<T>, grid_for(n), kThreads, 0, s,
        static_cast<const T*>(a.g.data), static_cast<const T*>(a.u.data),
        static_cast<T*>(a.out.data), r, static_cast<int>(a.act), round_code(a.round));
  });
  check_launch("gated_activation", s.device());
}

}  // namespace kernels
}  // namespace mlxcel::gpu
