#pragma once
// Activations and gated MLPs on the CPU, f32 inside, one rounding to the output dtype.
//   silu(x)      = x * sigmoid(x)                                  (nn.silu)
//   gelu(x)      = 0.5 * x * (1 + erf(x / sqrt(2)))                (nn.gelu)
//   gelu_tanh(x) = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
//                  (nn.gelu_approx, what mlx-lm's gemma3 MLP uses); computed as
//                  x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3)), the same function.
//   swiglu(g, u) = silu(g) * u,  geglu(g, u) = gelu_tanh(g) * u.
// Buffers are contiguous; in-place (y == x) is allowed.
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "core/dtype.h"

namespace mlxcel::cpu {

enum class ActKind : std::uint8_t { kSilu = 0, kGelu = 1, kGeluTanh = 2 };

void activation_ref(ActKind kind, const void* x, void* y, DType dtype, std::int64_t n);
void activation(ActKind kind, const void* x, void* y, DType dtype, std::int64_t n,
                CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);

// y = act(gate) * up; kSilu gives SwiGLU, kGeluTanh gives GeGLU (gemma), kGelu the erf form.
void gated_activation_ref(ActKind kind, const void* gate, const void* up, void* y, DType dtype,
                          std::int64_t n);
void gated_activation(ActKind kind, const void* gate, const void* up, void* y, DType dtype,
                      std::int64_t n, CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);

// Scalar f32 definitions the kernels and tests share.
float silu_f32(float x);
float gelu_f32(float x);
float gelu_tanh_f32(float x);
float act_f32(ActKind kind, float x);

}  // namespace mlxcel::cpu
