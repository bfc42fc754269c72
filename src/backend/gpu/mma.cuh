#pragma once
// Matrix-unit helpers shared by qgemv_mma.cu and gemm_mma.cu. CUDA: mma.sync m16n8k16 with bf16
// / f16 inputs and fp32 accumulation (sm_80+), ldmatrix, and the device check. HIP: the check for
// RDNA3's WMMA (gemm_mma.cu's AMD kernel).
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "backend/gpu/common.cuh"

namespace mlxcel::gpu {

#if defined(MLXCEL_GPU_CUDA)

// d += A (16x16, row) . B (16x8, col), fp32 accumulation.
template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                    std::uint32_t b1) {
#if __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, bf16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#else
  __trap();  // the host never launches this below sm_80 (mma_capable)
#endif
}

// Four 8x8 b16 matrices from shared memory: lane l gives the address of row l % 8 of matrix
// l / 8 and receives, of each matrix i, row l / 4's elements 2 (l % 4) and 2 (l % 4) + 1 in r[i].
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* smem) {
#if __CUDA_ARCH__ >= 800
  const auto a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#else
  (void)smem;
  r[0] = r[1] = r[2] = r[3] = 0;
  __trap();
#endif
}

// Tensor-core mma.sync with bf16 needs compute capability 8.0; cached per device.
inline bool mma_capable(int device) {
  static int cached[64] = {};  // 0 unknown, 1 yes, 2 no
  if (device < 0 || device >= 64) return false;
  if (cached[device] == 0) cached[device] = device_cc_major(device) >= 8 ? 1 : 2;
  return cached[device] == 1;
}

#else  // MLXCEL_GPU_HIP

// RDNA3 / RDNA3.5 wave32 WMMA (gfx11xx); cached per device.
inline bool wmma_capable(int device) {
  static int cached[64] = {};  // 0 unknown, 1 yes, 2 no
  if (device < 0 || device >= 64) return false;
  if (cached[device] == 0) cached[device] = device_is_gfx11(device) ? 1 : 2;
  return cached[device] == 1;
}

#endif  // MLXCEL_GPU_CUDA

}  // namespace mlxcel::gpu
