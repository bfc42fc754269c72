#pragma once
// Marks functions usable from host and GPU code. __host__/__device__ are language keywords that
// CUDA and HIP share, so this is not a vendor API name.
#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define MLXCEL_HD __host__ __device__
#define MLXCEL_GPU_COMPILE 1
#else
#define MLXCEL_HD
#endif
#define MLXCEL_HDI MLXCEL_HD inline
