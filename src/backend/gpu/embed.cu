// Token embedding (dense or quantized table rows, as mx.dequantize / QuantizedEmbedding give
// them) and row gathers. Same source for CUDA and HIP.
#include "backend/gpu/common.cuh"
#include "backend/gpu/kernels.h"

namespace mlxcel::gpu {
namespace {

constexpr int kThreads = 256;

// Element j of an MLX-packed row (LSB-first bitstream, values may straddle words).
__device__ __forceinline__ std::uint32_t code_at(const std::uint32_t* row, std::int64_t j,
                                                 int bits) {
  const std::uint64_t bit = static_cast<std::uint64_t>(j) * static_cast<std::uint64_t>(bits);
  const std::uint64_t wi = bit >> 5, sh = bit & 31;
  std::uint64_t v = row[wi] >> sh;
  if (sh + static_cast<std::uint64_t>(bits) > 32)
    v |= static_cast<std::uint64_t>(row[wi + 1]) << (32 - sh);
  return static_cast<std::uint32_t>(v & ((1ull << bits) - 1));
}

struct EmbedParams {
  const std::int32_t* ids;
  WView t;
  int mode;  // backend::QMode
  int bits;
  int w_code;  // dense table dtype (float_code)
  float scale;
  void* out;
  std::int64_t out_stride;
  int round;
};

template <typename T>
__global__ void embed_kernel(EmbedParams p) {
  wait_previous_kernel();
  const std::int64_t i = blockIdx.x;
  const std::int64_t id = p.ids[i];
  const std::int64_t dim = p.t.k;
  T* o = static_cast<T*>(p.out) + i * p.out_stride;
  const auto mode = static_cast<backend::QMode>(p.mode);
  const std::uint32_t* row = static_cast<const std::uint32_t*>(p.t.w) + id * (dim * p.bits / 32);
  for (std::int64_t k = threadIdx.x; k < dim; k += blockDim.x) {
    float v;
    if (mode == backend::QMode::kNone) {
      v = load_code(p.t.w, p.w_code, id * dim + k);
    } else if (mode == backend::QMode::kAffine) {
      // mx.dequantize rounds scale * q and then + bias to the scales dtype.
      const std::int64_t g = (id * (dim / p.t.group_size) + k / p.t.group_size) * p.t.scale_step;
      const int sc = p.t.scales_code;
      const int r = sc == 1 ? kRoundBf16 : sc == 2 ? kRoundF16 : kRoundNone;
      const float s = load_code(p.t.scales, sc, g), b = load_code(p.t.biases, sc, g);
      v = rnd(rnd(s * static_cast<float>(code_at(row, k, p.bits)), r) + b, r);
    } else {
      const std::int64_t g = id * (dim / p.t.group_size) + k / p.t.group_size;
      const std::uint32_t sb = static_cast<const std::uint8_t*>(p.t.scales)[g];
      const float s = mode == backend::QMode::kNvfp4 ? e4m3_value(sb) : e8m0_scale(sb);
      const std::uint32_t c = code_at(row, k, p.bits);
      v = s * (mode == backend::QMode::kMxfp8 ? e4m3_value(c) : e2m1(c));
    }
    if (p.scale != 1.0f) v = rnd(v * p.scale, p.round);
    o[k] = from_f32<T>(v);
  }
}

template <typename T>
__global__ void gather_rows_kernel(const T* src, std::int64_t src_stride, const std::int32_t* rows,
                                   T* dst, std::int64_t dst_stride, std::int64_t cols) {
  wait_previous_kernel();
  const std::int64_t i = blockIdx.x;
  const T* s = src + static_cast<std::int64_t>(rows[i]) * src_stride;
  T* d = dst + i * dst_stride;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) d[c] = s[c];
}

}  // namespace

namespace kernels {

void embed(const backend::EmbedArgs& a, const Stream& s) {
  if (a.n <= 0) return;
  const backend::Matrix& t = a.table;
  if (!weight_format_supported(t.mode, t.w_dtype, t.bits, t.group_size, t.scales_dtype))
    throw_error(ErrorCategory::kUnsupported, std::string("embed: no GPU kernel for table format ") +
                                                 backend::qmode_name(t.mode) +
                                                 "; run with --device cpu");
  MLXCEL_CHECK(paired_scales_ok(t), ErrorCategory::kInternal,
               "embed: paired scales need an affine table with biases one element after scales");
  EmbedParams p;
  p.ids = a.ids;
  p.t = wview(t);
  p.mode = static_cast<int>(t.mode);
  p.bits = t.mode == backend::QMode::kNone ? 32 : t.bits;
  p.w_code = float_code(t.w_dtype);
  p.scale = a.scale;
  p.out = a.out.data;
  p.out_stride = a.out.stride;
  p.round = round_code(a.round);
  dispatch_act(a.out.dtype, "embed", [&](auto tag) {
    using T = decltype(tag);
    launch_kernel(embed_kernel<T>, static_cast<unsigned>(a.n), kThreads, 0, s, p);
  });
  check_launch("embed", s.device());
}

void gather_rows(const backend::GatherRowsArgs& a, const Stream& s) {
  if (a.n <= 0) return;
  MLXCEL_CHECK(a.src.dtype == a.dst.dtype, ErrorCategory::kInternal, "gather_rows: dtypes differ");
  dispatch_act(a.src.dtype, "gather_rows", [&](auto tag) {
    using T = decltype(tag);
    launch_kernel(gather_rows_kernel<T>, static_cast<unsigned>(a.n), kThreads, 0, s,
        static_cast<const T*>(a.src.data), a.src.stride, a.rows, static_cast<T*>(a.dst.data),
        a.dst.stride, a.src.cols);
  });
  check_launch("gather_rows", s.device());
}

}  // namespace kernels
}  // namespace mlxcel::gpu
