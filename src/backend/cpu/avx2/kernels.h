#pragma once
// Entry points of the AVX2 inner kernels (implemented in backend/cpu/avx2/*.cpp). The callers in
// backend/cpu/*.cpp only reach them after checking isa_supported(CpuIsa::kAvx2).
#include <cstdint>

#include "backend/cpu/dot_kernels.h"
#include "core/dtype.h"

namespace mlxcel::cpu::avx2 {

// Row-stable dense and quantized dot kernels (backend/cpu/dot_kernels.h): a.mr rows of x
// against a.nrows rows of W, every output's chain fixed by x row and W row alone.
void dot_rows(const DotArgs& a);
void qdot_rows(const QDotArgs& a);

// Row kernels over f32 scratch or typed rows (T erased by dtype).
void convert_to_f32(const void* src, DType t, float* dst, std::int64_t n);
void convert_from_f32(const float* src, DType t, void* dst, std::int64_t n);
float dot_f32(const float* a, const float* b, std::int64_t n);
void axpy_f32(float alpha, const float* x, float* y, std::int64_t n);  // y += alpha * x
void scale_f32(float alpha, float* y, std::int64_t n);
float max_f32(const float* x, std::int64_t n);
// y[i] = exp(x[i] - sub), returns the sum of y.
float exp_sub_sum_f32(const float* x, float sub, float* y, std::int64_t n);

// Activations on typed rows, f32 inside. kind: see backend/cpu/activations.h (ActKind).
void activation_rows(int kind, const void* x, void* y, DType t, std::int64_t n);
void gated_rows(int kind, const void* gate, const void* up, void* y, DType t, std::int64_t n);
void binary_rows(int kind, const void* a, const void* b, void* y, DType t, std::int64_t n,
                 float alpha);

// RMSNorm rows: y = x * rsqrt(mean(x^2) + eps) * w.
void rms_norm_row(const void* x, const void* w, void* y, DType t, std::int64_t cols, float eps);

// Affine 4/8-bit row decode: out[j] = q_j * scale_g + bias_g (unfused); scales/biases in `sdt`,
// indexed from group0 (the row's first group).
void decode_affine_row(const std::uint32_t* w, const void* scales, const void* biases, DType sdt,
                       std::int64_t group0, int bits, int group_size, std::int64_t k, float* out);

// MLX CPU quantized-matmul chains for one 8-row tile (backend/cpu/qmatmul_mlx.cpp): wt is the
// lane-interleaved tile [k][8], st the fp-mode group scales [k / group_size][8] or nullptr for
// affine; out[8].
void qmm_mlx_tile(const float* wt, const float* st, const float* x, std::int64_t k,
                  int group_size, DType act, float* out);

}  // namespace mlxcel::cpu::avx2
