# CUDA backend: nvcc compiles src/backend/gpu/*.cu as CUDA. The runtime is linked statically so
# the build folder runs on a machine that has only the driver (the H200 image).
set(CMAKE_CUDA_ARCHITECTURES "${MLXCEL_CUDA_ARCHITECTURES}")
foreach(arch IN LISTS MLXCEL_CUDA_ARCHITECTURES)
  if(NOT arch MATCHES "^[0-9]+[af]?(-real|-virtual)?$")
    message(FATAL_ERROR "MLXCEL_CUDA_ARCHITECTURES entry '${arch}' is not a CUDA architecture "
      "(examples: 80;86;89;90;100;120)")
  endif()
endforeach()
if(NOT CMAKE_CUDA_COMPILER)
  find_program(_nvcc nvcc PATHS /usr/local/cuda/bin)
  if(NOT _nvcc)
    message(FATAL_ERROR "MLXCEL_GPU=cuda needs the CUDA toolkit (nvcc); install it or set CMAKE_CUDA_COMPILER")
  endif()
  set(CMAKE_CUDA_COMPILER ${_nvcc})
endif()
enable_language(CUDA)
# CMake 3.25 does not know nvcc's C++20 dialect flag (nvcc >= 12 has it); teach it.
set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} -Xcudafe --diag_suppress=177")

# Applies the CUDA compile settings to GPU sources of a target.
function(mlxcel_gpu_sources target)
  set_source_files_properties(${ARGN} PROPERTIES LANGUAGE CUDA)
  target_sources(${target} PRIVATE ${ARGN})
  target_compile_definitions(${target} PRIVATE MLXCEL_GPU_CUDA=1
    "MLXCEL_GPU_TARGETS=\"${MLXCEL_GPU_TARGETS_CSV}\"")
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wno-unused-parameter>)
  target_link_libraries(${target} PUBLIC CUDA::cudart_static)
endfunction()
