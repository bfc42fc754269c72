#pragma once
// Device helpers shared by the op kernels: activation loads/stores with the one rounding each op
// applies to its output, MLX weight-format decoding (MLX_FORMATS.md) and host-side dtype
// dispatch. Vendor-neutral: everything vendor-specific comes from compat.h.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backend/backend.h"
#include "backend/gpu/compat.h"
#include "backend/gpu/runtime.h"
#include "core/dtype.h"
#include "core/error.h"

namespace mlxcel::gpu {

// Rounding targets as kernel arguments: the checkpoint's activation dtype of backend::*Args::round.
enum RoundCode : int { kRoundNone = 0, kRoundBf16 = 1, kRoundF16 = 2 };
// An integer switch from the environment (measuring knobs), `fallback` when unset or empty.
inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

inline int round_code(DType t) {
  return t == DType::kBF16 ? kRoundBf16 : t == DType::kF16 ? kRoundF16 : kRoundNone;
}

__device__ __forceinline__ float rnd(float v, int r) {
  if (r == kRoundBf16) return bf16(v).to_float();
  if (r == kRoundF16) return f16(v).to_float();
  return v;
}

template <typename T>
__device__ __forceinline__ void store(T* p, std::int64_t i, float v, int r) {
  p[i] = from_f32<T>(rnd(v, r));
}

// Scales / biases of affine weights: F32, BF16 or F16 (code 0, 1, 2).
inline int float_code(DType t) { return t == DType::kBF16 ? 1 : t == DType::kF16 ? 2 : 0; }
__device__ __forceinline__ float load_code(const void* p, int code, std::int64_t i) {
  if (code == 1) return static_cast<const bf16*>(p)[i].to_float();
  if (code == 2) return static_cast<const f16*>(p)[i].to_float();
  return static_cast<const float*>(p)[i];
}
// Elements i and i + 1 (i even, so the two are one aligned 4- or 8-byte word) in one load: a
// paired (scale, bias) of backend::Matrix::scale_step 2.
__device__ __forceinline__ void load_code_pair(const void* p, int code, std::int64_t i, float& a,
                                               float& b) {
  if (code == 0) {
    const float2 v = *reinterpret_cast<const float2*>(static_cast<const float*>(p) + i);
    a = v.x, b = v.y;
    return;
  }
  const std::uint32_t w =
      *reinterpret_cast<const std::uint32_t*>(static_cast<const std::uint16_t*>(p) + i);
  if (code == 1) {
    a = __uint_as_float(w << 16), b = __uint_as_float(w & 0xFFFF0000u);
  } else {
    a = f16::from_bits(static_cast<std::uint16_t>(w & 0xFFFFu)).to_float();
    b = f16::from_bits(static_cast<std::uint16_t>(w >> 16)).to_float();
  }
}

// --- Weight formats -------------------------------------------------------------------------
// One kernel instance per format: dense in a float dtype, affine 2..8 bits, and the fp modes.
enum WFmt : int {
  kDenseF32 = 0,
  kDenseF16,
  kDenseBf16,
  kAffine2,
  kAffine3,
  kAffine4,
  kAffine5,
  kAffine6,
  kAffine8,
  kMxfp4,
  kMxfp8,
  kNvfp4,
  kWFmtCount
};

__host__ __device__ constexpr bool fmt_dense(int f) { return f <= kDenseBf16; }
__host__ __device__ constexpr bool fmt_affine(int f) { return f >= kAffine2 && f <= kAffine8; }
__host__ __device__ constexpr int fmt_bits(int f) {
  return f == kAffine2   ? 2
         : f == kAffine3 ? 3
         : f == kAffine4 ? 4
         : f == kAffine5 ? 5
         : f == kAffine6 ? 6
         : f == kAffine8 ? 8
         : f == kMxfp4   ? 4
         : f == kMxfp8   ? 8
         : f == kNvfp4   ? 4
                         : 0;
}

// The kernel format of a matrix, or -1 when no kernel exists (supports() answers from this).
inline int wfmt_of(backend::QMode mode, DType w_dtype, int bits, int group_size,
                   DType scales_dtype) {
  using backend::QMode;
  auto float_dtype = [](DType t) {
    return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
  };
  switch (mode) {
    case QMode::kNone:
      return w_dtype == DType::kF32    ? kDenseF32
             : w_dtype == DType::kF16  ? kDenseF16
             : w_dtype == DType::kBF16 ? kDenseBf16
                                       : -1;
    case QMode::kAffine:
      if (!float_dtype(scales_dtype) || (group_size != 32 && group_size != 64 && group_size != 128))
        return -1;
      switch (bits) {
        case 2:
          return kAffine2;
        case 3:
          return kAffine3;
        case 4:
          return kAffine4;
        case 5:
          return kAffine5;
        case 6:
          return kAffine6;
        case 8:
          return kAffine8;
        default:
          return -1;
      }
    case QMode::kMxfp4:
      return bits == 4 && group_size == 32 ? kMxfp4 : -1;
    case QMode::kMxfp8:
      return bits == 8 && group_size == 32 ? kMxfp8 : -1;
    case QMode::kNvfp4:
      return bits == 4 && group_size == 16 ? kNvfp4 : -1;
  }
  return -1;
}

// FP4 E2M1 without a lookup table (a local array would live in scratch on AMD targets).
__device__ __forceinline__ float e2m1(std::uint32_t c) {
  const std::uint32_t e = (c >> 1) & 3u, m = c & 1u;
  const float mag = e == 0
                        ? 0.5f * static_cast<float>(m)
                        : (1.0f + 0.5f * static_cast<float>(m)) * static_cast<float>(1u << (e - 1));
  return (c & 8u) ? -mag : mag;
}
// Codes MLX decodes to inf / NaN (E8M0 255, E4M3 0x7F / 0xFF) count as 0, as the CPU kernels do.
__device__ __forceinline__ float e8m0_scale(std::uint32_t s) {
  return s == 0xFFu ? 0.0f : fp8_e8m0_to_float(static_cast<std::uint8_t>(s));
}
__device__ __forceinline__ float e4m3_value(std::uint32_t s) {
  return (s & 0x7Fu) == 0x7Fu ? 0.0f : fp8_e4m3_to_float(static_cast<std::uint8_t>(s));
}

// A weight matrix [n, k] as the kernels see it (backend::Matrix without host-only fields).
struct WView {
  const void* w = nullptr;
  const void* scales = nullptr;
  const void* biases = nullptr;
  int scales_code = 0;
  int scale_step = 1;  // backend::Matrix::scale_step: 2 where scales and biases are paired
  int group_size = 0;
  std::int64_t n = 0, k = 0;
  std::size_t expert_stride_w = 0, expert_stride_s = 0;
};

// Whether m's scale layout is one the kernels read: the checkpoint's (scale_step 1) or affine
// (scale, bias) pairs with biases one element after scales (scale_step 2).
inline bool paired_scales_ok(const backend::Matrix& m) {
  if (m.scale_step == 1) return true;
  return m.scale_step == 2 && m.mode == backend::QMode::kAffine && m.scales &&
         m.biases == static_cast<const char*>(m.scales) + dtype_size(m.scales_dtype);
}

inline WView wview(const backend::Matrix& m) {
  WView v;
  v.w = m.w;
  v.scales = m.scales;
  v.biases = m.biases;
  v.scales_code = float_code(m.scales_dtype);
  v.scale_step = m.scale_step;
  v.group_size = m.group_size;
  v.n = m.n;
  v.k = m.k;
  v.expert_stride_w = m.expert_stride_w;
  v.expert_stride_s = m.expert_stride_s;
  return v;
}

// The 32 weights W[n, 32u .. 32u + 31] as fp32 (dense: zero beyond k). MLX packs codes
// LSB-first into uint32 words, so 32 codes of `bits` bits are exactly `bits` words.
template <int F>
__device__ __forceinline__ void decode_unit(const void* w, const void* scales, const void* biases,
                                            int scales_code, int scale_step, int group_size,
                                            std::int64_t k, std::int64_t n, std::int64_t u,
                                            float (&v)[32]) {
  if constexpr (fmt_dense(F)) {
    using T =
        std::conditional_t<F == kDenseF32, float, std::conditional_t<F == kDenseF16, f16, bf16>>;
    const T* row = static_cast<const T*>(w) + n * k;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const std::int64_t idx = u * 32 + j;
      v[j] = idx < k ? to_f32(row[idx]) : 0.0f;
    }
  } else {
    constexpr int B = fmt_bits(F);
    const std::uint32_t* row = static_cast<const std::uint32_t*>(w) + n * (k * B / 32) + u * B;
    std::uint32_t wd[B];
#pragma unroll
    for (int i = 0; i < B; ++i) wd[i] = row[i];
    float s0, s1, b0 = 0.0f, b1 = 0.0f;
    if constexpr (fmt_affine(F)) {
      const std::int64_t g = (n * (k / group_size) + (u * 32) / group_size) * scale_step;
      if (scale_step == 2) {  // paired: scale and bias in one load
        load_code_pair(scales, scales_code, g, s0, b0);
      } else {
        s0 = load_code(scales, scales_code, g);
        b0 = load_code(biases, scales_code, g);
      }
      s1 = s0, b1 = b0;
    } else if constexpr (F == kNvfp4) {
      const auto* s = static_cast<const std::uint8_t*>(scales) + n * (k / 16) + 2 * u;
      s0 = e4m3_value(s[0]);
      s1 = e4m3_value(s[1]);
    } else {
      s0 = s1 = e8m0_scale(static_cast<const std::uint8_t*>(scales)[n * (k / 32) + u]);
    }
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int bit = j * B, wi = bit >> 5, sh = bit & 31;
      std::uint32_t c = wd[wi] >> sh;
      if (sh + B > 32) c |= wd[wi + 1] << (32 - sh);
      c &= (1u << B) - 1u;
      const float s = j < 16 ? s0 : s1;
      if constexpr (fmt_affine(F)) {
        v[j] = s * static_cast<float>(c) + (j < 16 ? b0 : b1);
      } else if constexpr (F == kMxfp8) {
        v[j] = s * e4m3_value(c);
      } else {
        v[j] = s * e2m1(c);
      }
    }
  }
}

// Host-side dispatch over the activation storage dtypes.
template <typename Fn>
void dispatch_act(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::kF32:
      fn(float{});
      return;
    case DType::kBF16:
      fn(bf16{});
      return;
    case DType::kF16:
      fn(f16{});
      return;
    default:
      throw_error(ErrorCategory::kUnsupported, std::string(op) + ": activation dtype " +
                                                   std::string(dtype_name(t)) +
                                                   " has no GPU kernel (F32, BF16 or F16)");
  }
}

inline void check_launch(const char* op, int device) { GPU_CHECK(gpuGetLastError(), op, device); }

// Whether kernels on `device` go out as programmatic dependent launches (gpu_launch; in recorded
// decode graphs only): CUDA compute capability 9.0+, unless MLXCEL_GPU_PDL=0. Run 28 (H100):
// decode 8B 301 -> 330 tok/s, 0.6B 826 -> 942, 30B 268 -> 286. Every kernel launched through
// launch_kernel() calls gpu_grid_wait() before it reads or writes activations, caches or
// workspaces; only constant weights may be read before (the decode GEMVs load their first chunk
// there, overlapping the previous kernel's tail). On HIP the calls are no-ops and launches keep
// stream order.
inline bool pdl_enabled(int device) {
  static const bool on = env_int("MLXCEL_GPU_PDL", 1) != 0;
  static int cached[64] = {};  // 0 unknown, 1 yes, 2 no
  if (!on || device < 0 || device >= 64) return false;
  if (cached[device] == 0) cached[device] = device_cc_major(device) >= 9 ? 1 : 2;
  return cached[device] == 1;
}

// A kernel's first statement when it reads nothing before the previous kernel's results: waits
// for that kernel (a no-op unless launched as a programmatic dependent launch), then lets the
// next launch start its blocks.
__device__ __forceinline__ void wait_previous_kernel() {
  gpu_grid_wait();
  gpu_grid_release();
}

// kernel<<<grid, block, smem, s>>>(args...), as a programmatic dependent launch where enabled.
template <typename... P, typename... A>
void launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t smem,
                   const Stream& s, A&&... args) {
  gpu_launch(kernel, grid, block, smem, static_cast<gpuStream_t>(s.handle()),
             pdl_enabled(s.device()), static_cast<A&&>(args)...);
}

inline unsigned blocks_for(std::int64_t n, int per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

}  // namespace mlxcel::gpu
