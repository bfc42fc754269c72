#pragma once
// The one place that names CUDA or HIP APIs and intrinsics. Every GPU source in src/backend/gpu/
// is written against the gpu* names below and compiles unchanged with nvcc (CUDA) or clang -x hip
// (HIP). The build defines exactly one of MLXCEL_GPU_CUDA / MLXCEL_GPU_HIP.
#if defined(MLXCEL_GPU_CUDA) == defined(MLXCEL_GPU_HIP)
#error "compat.h needs exactly one of MLXCEL_GPU_CUDA or MLXCEL_GPU_HIP"
#endif

#if defined(MLXCEL_GPU_HIP)
// HIP 5.2 (Debian) lacks the *_sync shuffles; we use the mask-less forms, which are the native
// HIP operations on the whole wave.
#include <hip/hip_runtime.h>

using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuEvent_t = hipEvent_t;
using gpuGraph_t = hipGraph_t;
using gpuGraphExec_t = hipGraphExec_t;
using gpuDeviceProp_t = hipDeviceProp_t;
constexpr gpuError_t gpuSuccess = hipSuccess;
constexpr gpuError_t gpuErrorNotReady = hipErrorNotReady;
#define gpuGetErrorString hipGetErrorString
#define gpuGetErrorName hipGetErrorName
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuSetDevice hipSetDevice
#define gpuGetDevice hipGetDevice
#define gpuMemGetInfo hipMemGetInfo
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuHostAlloc(p, n) hipHostMalloc((p), (n), 0)
#define gpuFreeHost hipHostFree
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuEventDefault hipEventDefault
#define gpuEventRecord hipEventRecord
#define gpuEventQuery hipEventQuery
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuEventDestroy hipEventDestroy
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuDriverGetVersion hipDriverGetVersion
#define gpuRuntimeGetVersion hipRuntimeGetVersion
#define gpuStreamBeginCapture hipStreamBeginCapture
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define gpuGraphInstantiate(exec, graph) hipGraphInstantiate((exec), (graph), nullptr, nullptr, 0)
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphExecDestroy hipGraphExecDestroy
#define gpuGraphDestroy hipGraphDestroy
#define MLXCEL_GPU_VENDOR "rocm"

// Wave width per target, from the gfx arch macros (the wavefront-size macro is deprecated and
// missing on some gfx115x toolchains): GCN/CDNA (gfx9) are wave64, RDNA (gfx10+) wave32.
#if defined(__GFX9__) || defined(__GFX8__)
#define MLXCEL_WARP_SIZE 64
#else
#define MLXCEL_WARP_SIZE 32
#endif

template <typename T>
__device__ __forceinline__ T gpu_shfl_xor(T v, int lane_mask, int width = MLXCEL_WARP_SIZE) {
  return __shfl_xor(v, lane_mask, width);
}
template <typename T>
__device__ __forceinline__ T gpu_shfl(T v, int src_lane, int width = MLXCEL_WARP_SIZE) {
  return __shfl(v, src_lane, width);
}

// Programmatic dependent launch is CUDA's (sm_90+); on HIP a launch is always fully ordered
// after the previous one, so the grid-dependency calls are no-ops.
__device__ __forceinline__ void gpu_grid_wait() {}
__device__ __forceinline__ void gpu_grid_release() {}
template <typename... P, typename... A>
inline void gpu_launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t smem,
                       gpuStream_t st, bool /*pdl*/, A&&... args) {
  kernel<<<grid, block, smem, st>>>(static_cast<A&&>(args)...);
}

#else  // MLXCEL_GPU_CUDA
#include <cuda_runtime.h>

using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuEvent_t = cudaEvent_t;
using gpuGraph_t = cudaGraph_t;
using gpuGraphExec_t = cudaGraphExec_t;
using gpuDeviceProp_t = cudaDeviceProp;
constexpr gpuError_t gpuSuccess = cudaSuccess;
constexpr gpuError_t gpuErrorNotReady = cudaErrorNotReady;
#define gpuGetErrorString cudaGetErrorString
#define gpuGetErrorName cudaGetErrorName
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuSetDevice cudaSetDevice
#define gpuGetDevice cudaGetDevice
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuHostAlloc(p, n) cudaMallocHost((p), (n))
#define gpuFreeHost cudaFreeHost
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuEventDefault cudaEventDefault
#define gpuEventRecord cudaEventRecord
#define gpuEventQuery cudaEventQuery
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuEventDestroy cudaEventDestroy
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define gpuDriverGetVersion cudaDriverGetVersion
#define gpuRuntimeGetVersion cudaRuntimeGetVersion
#define gpuStreamBeginCapture cudaStreamBeginCapture
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define gpuGraphInstantiate(exec, graph) cudaGraphInstantiate((exec), (graph), 0)
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphExecDestroy cudaGraphExecDestroy
#define gpuGraphDestroy cudaGraphDestroy
#define MLXCEL_GPU_VENDOR "cuda"

#define MLXCEL_WARP_SIZE 32

template <typename T>
__device__ __forceinline__ T gpu_shfl_xor(T v, int lane_mask, int width = MLXCEL_WARP_SIZE) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask, width);
}
template <typename T>
__device__ __forceinline__ T gpu_shfl(T v, int src_lane, int width = MLXCEL_WARP_SIZE) {
  return __shfl_sync(0xffffffffu, v, src_lane, width);
}

// Programmatic dependent launch (sm_90+). A kernel launched with pdl may start while the stream's
// previous kernel is still running; gpu_grid_wait() blocks until that kernel has finished and
// its writes are visible, so nothing the previous kernels write may be read (or anything they
// read be written) before it. gpu_grid_release() lets the next such launch start its own blocks.
// Both are no-ops in a kernel launched without pdl and on older targets.
__device__ __forceinline__ void gpu_grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void gpu_grid_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// pdl applies only while `st` is being recorded into a graph (the decode steps): run 28 measured
// eager prefill 8 % slower with it (8B pp512 5,952 -> 5,478 tok/s on an H100) and replayed
// decode 7-14 % faster. Errors surface through gpuGetLastError, as for a <<<>>> launch.
template <typename... P, typename... A>
inline void gpu_launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t smem,
                       gpuStream_t st, bool pdl, A&&... args) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (pdl && (cudaStreamIsCapturing(st, &capture) != cudaSuccess ||
              capture != cudaStreamCaptureStatusActive))
    pdl = false;
  if (!pdl) {
    kernel<<<grid, block, smem, st>>>(static_cast<A&&>(args)...);
    return;
  }
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<A&&>(args)...);
}
#endif

#include <string>

#include "core/error.h"

namespace mlxcel::gpu {

// Throws a device_fault Error naming the runtime call, the op and the device.
inline void check(gpuError_t err, const char* call, const char* op, int device) {
  if (err == gpuSuccess) return;
  std::string msg = std::string(MLXCEL_GPU_VENDOR ":") + std::to_string(device) + ": " + call +
                    " failed in " + op + ": " + gpuGetErrorName(err) + " (" +
                    gpuGetErrorString(err) + ")";
  throw_error(ErrorCategory::kDeviceFault, msg);
}

}  // namespace mlxcel::gpu

#define GPU_CHECK(call, op, device) ::mlxcel::gpu::check((call), #call, (op), (device))

// Vendor-specific device facts, kept here so runtime.cu stays vendor-neutral.
namespace mlxcel::gpu {
inline std::string device_arch_name(const gpuDeviceProp_t& p) {
#if defined(MLXCEL_GPU_HIP)
  std::string a = p.gcnArchName;  // "gfx1151:sramecc-:xnack-"
  auto colon = a.find(':');
  return colon == std::string::npos ? a : a.substr(0, colon);
#else
  return "sm_" + std::to_string(p.major) + std::to_string(p.minor);
#endif
}
// The compute capability's major number of `device` (NVIDIA; -1 when the query fails). AMD
// targets answer 0: no feature keyed on it exists there.
inline int device_cc_major(int device) {
#if defined(MLXCEL_GPU_HIP)
  (void)device;
  return 0;
#else
  int major = -1;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess
             ? major
             : -1;
#endif
}
// One wave of `kernel` on `device`: the blocks of `threads` threads and `smem` bytes of dynamic
// shared memory resident per SM / CU at once, times the SM / CU count (0 when a query fails).
template <typename Kernel>
int resident_blocks(Kernel kernel, int threads, std::size_t smem, int device) {
  int per = 0, units = 0;
#if defined(MLXCEL_GPU_HIP)
  const bool ok =
      hipOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, threads, smem) == hipSuccess &&
      hipDeviceGetAttribute(&units, hipDeviceAttributeMultiprocessorCount, device) == hipSuccess;
#else
  const bool ok =
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, threads, smem) == cudaSuccess &&
      cudaDeviceGetAttribute(&units, cudaDevAttrMultiProcessorCount, device) == cudaSuccess;
#endif
  if (!ok) {
    (void)gpuGetLastError();
    return 0;
  }
  return per * units;
}
// True when `device` is an RDNA3 / RDNA3.5 GPU (gfx11xx: gfx1100, gfx1151, ...), whose wave32
// WMMA instructions (v_wmma_f32_16x16x16_{f16,bf16}) the matrix-unit GEMM uses. NVIDIA: false.
inline bool device_is_gfx11(int device) {
#if defined(MLXCEL_GPU_HIP)
  gpuDeviceProp_t p;
  if (gpuGetDeviceProperties(&p, device) != gpuSuccess) return false;
  return device_arch_name(p).rfind("gfx11", 0) == 0;
#else
  (void)device;
  return false;
#endif
}
inline std::string runtime_name() {
#if defined(MLXCEL_GPU_HIP)
  return "HIP";
#else
  return "CUDA";
#endif
}
}  // namespace mlxcel::gpu
