# Writes build_info.cpp (version, git commit, backend, GPU targets) at build time so the commit is
# current after every rebuild; the file is rewritten only when its content changes.
if(MLXCEL_GPU_KIND STREQUAL "cuda")
  set(MLXCEL_GPU_TARGET_LIST "${MLXCEL_CUDA_ARCHITECTURES}")
elseif(MLXCEL_GPU_KIND STREQUAL "rocm")
  set(MLXCEL_GPU_TARGET_LIST "${MLXCEL_ROCM_ARCHITECTURES}")
else()
  set(MLXCEL_GPU_TARGET_LIST "")
endif()
# ";" would split the shell command; the script turns "," back into ";".
string(REPLACE ";" "," MLXCEL_GPU_TARGETS_CSV "${MLXCEL_GPU_TARGET_LIST}")
set(MLXCEL_BUILD_INFO_CPP ${CMAKE_BINARY_DIR}/generated/build_info.cpp)
add_custom_target(mlxcel_build_info
  COMMAND ${CMAKE_COMMAND}
    -DOUT=${MLXCEL_BUILD_INFO_CPP}
    -DSRC=${CMAKE_SOURCE_DIR}
    -DVERSION=${PROJECT_VERSION}
    -DBACKEND=${MLXCEL_GPU_KIND}
    "-DTARGETS=${MLXCEL_GPU_TARGETS_CSV}"
    -DCOMPILER=${CMAKE_CXX_COMPILER_ID}-${CMAKE_CXX_COMPILER_VERSION}
    -DBUILD_TYPE=${CMAKE_BUILD_TYPE}
    -P ${CMAKE_SOURCE_DIR}/cmake/write_build_info.cmake
  BYPRODUCTS ${MLXCEL_BUILD_INFO_CPP}
  COMMENT "build info"
  VERBATIM)
