# ROCm backend: the same src/backend/gpu/*.cu sources compiled as HIP by clang (>= 17) against an
# AMD ROCm install (ROCM_PATH, /opt/rocm) or Debian's HIP packages (libamdhip64-dev,
# rocm-device-libs). CMake's HIP language needs hip-lang-config.cmake, which Debian does not ship,
# so GPU sources are compiled as C++ with -x hip (../shared/ROCM_BUILD.md).

if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "MLXCEL_GPU=rocm needs clang (>= 17) as the C++ compiler, found "
    "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}. Use the rocm preset "
    "(cmake --preset rocm) or -DCMAKE_CXX_COMPILER=clang++-19 (apt-get install clang-19).")
endif()
if(CMAKE_CXX_COMPILER_VERSION VERSION_LESS 17)
  message(FATAL_ERROR "clang ${CMAKE_CXX_COMPILER_VERSION} is too old for the rocm build: gfx1151 "
    "and gfx1201 need clang >= 17. Install clang-19 (Debian 12: apt-get install clang-19 lld-19 "
    "clang-tools-19) and configure with -DCMAKE_CXX_COMPILER=clang++-19.")
endif()

# --- Where HIP lives ---------------------------------------------------------------------------
if(NOT ROCM_PATH)
  if(DEFINED ENV{ROCM_PATH})
    set(ROCM_PATH $ENV{ROCM_PATH})
  elseif(EXISTS /opt/rocm/include/hip/hip_runtime.h)
    set(ROCM_PATH /opt/rocm)
  else()
    set(ROCM_PATH /usr)
  endif()
endif()
set(ROCM_PATH "${ROCM_PATH}" CACHE PATH "ROCm / HIP install prefix (/opt/rocm, or /usr for Debian)")
if(NOT EXISTS ${ROCM_PATH}/include/hip/hip_runtime.h)
  message(FATAL_ERROR "HIP headers not found: ${ROCM_PATH}/include/hip/hip_runtime.h is missing. "
    "On Debian 12: apt-get install libamdhip64-dev rocm-device-libs (scripts/setup.sh does); with "
    "an AMD ROCm install set -DROCM_PATH=/opt/rocm.")
endif()
find_library(MLXCEL_AMDHIP64 NAMES amdhip64 PATHS ${ROCM_PATH}/lib ${ROCM_PATH}/lib/x86_64-linux-gnu
  NO_DEFAULT_PATH)
if(NOT MLXCEL_AMDHIP64)
  find_library(MLXCEL_AMDHIP64 NAMES amdhip64)
endif()
if(NOT MLXCEL_AMDHIP64)
  message(FATAL_ERROR "libamdhip64 not found under ${ROCM_PATH}: apt-get install libamdhip64-dev")
endif()
get_filename_component(MLXCEL_HIP_LIBDIR ${MLXCEL_AMDHIP64} DIRECTORY)

# --- Targets -----------------------------------------------------------------------------------
# gfx targets clang-19 knows, by family. Anything else is a typo or a target we cannot build.
set(_known_gfx
  gfx900 gfx902 gfx904 gfx906 gfx908 gfx909 gfx90a gfx90c gfx940 gfx941 gfx942 gfx950
  gfx1010 gfx1011 gfx1012 gfx1013 gfx1030 gfx1031 gfx1032 gfx1033 gfx1034 gfx1035 gfx1036
  gfx1100 gfx1101 gfx1102 gfx1103 gfx1150 gfx1151 gfx1152 gfx1153 gfx1200 gfx1201)
foreach(t IN LISTS MLXCEL_ROCM_ARCHITECTURES)
  if(NOT t IN_LIST _known_gfx)
    string(REPLACE ";" " " _k "${_known_gfx}")
    message(FATAL_ERROR "MLXCEL_ROCM_ARCHITECTURES entry '${t}' is not a known gfx target. "
      "Known: ${_k}")
  endif()
endforeach()

# --- Device libraries --------------------------------------------------------------------------
# Debian's rocm-device-libs 5.2 lacks oclc_isa_version_NNNN.bc for gfx11/gfx12, and clang refuses
# a target whose ISA-version file is missing. Each file defines one constant, so we make a folder
# with links to every shipped bitcode file plus the missing ones, generated here.
set(_devlib_src "")
foreach(d ${ROCM_PATH}/amdgcn/bitcode ${ROCM_PATH}/lib/amdgcn/bitcode
          ${ROCM_PATH}/lib/x86_64-linux-gnu/amdgcn/bitcode /usr/lib/x86_64-linux-gnu/amdgcn/bitcode)
  if(EXISTS ${d}/ocml.bc)
    set(_devlib_src ${d})
    break()
  endif()
endforeach()
if(NOT _devlib_src)
  message(FATAL_ERROR "ROCm device libraries (ocml.bc) not found: apt-get install rocm-device-libs, "
    "or point ROCM_PATH at an AMD ROCm install")
endif()
set(MLXCEL_DEVICE_LIBS ${CMAKE_BINARY_DIR}/rocm-device-libs)
file(MAKE_DIRECTORY ${MLXCEL_DEVICE_LIBS})
file(GLOB _bcs ${_devlib_src}/*.bc)
foreach(bc IN LISTS _bcs)
  get_filename_component(n ${bc} NAME)
  if(NOT EXISTS ${MLXCEL_DEVICE_LIBS}/${n})
    file(CREATE_LINK ${bc} ${MLXCEL_DEVICE_LIBS}/${n} SYMBOLIC)
  endif()
endforeach()
foreach(t IN LISTS MLXCEL_ROCM_ARCHITECTURES)
  # gfxMAJOR MINOR STEPPING: the last two characters are minor and stepping (hex letters a=10).
  string(REGEX MATCH "^gfx([0-9]+)([0-9a-f])([0-9a-f])$" _m "${t}")
  set(_major ${CMAKE_MATCH_1})
  set(_minor ${CMAKE_MATCH_2})
  math(EXPR _step "0x${CMAKE_MATCH_3}" OUTPUT_FORMAT DECIMAL)
  math(EXPR _v "${_major} * 1000 + ${_minor} * 100 + ${_step}")
  # The file is named after the target (gfx1151 -> oclc_isa_version_1151.bc); the constant inside
  # is major*1000 + minor*100 + stepping (11501), as in Debian's own files.
  string(SUBSTRING ${t} 3 -1 _suffix)
  set(_bc ${MLXCEL_DEVICE_LIBS}/oclc_isa_version_${_suffix}.bc)
  if(NOT EXISTS ${_bc})
    set(_ll ${MLXCEL_DEVICE_LIBS}/oclc_isa_version_${_suffix}.ll)
    file(WRITE ${_ll} "target triple = \"amdgcn-amd-amdhsa\"\n@__oclc_ISA_version = linkonce_odr protected local_unnamed_addr addrspace(4) constant i32 ${_v}, align 4\n")
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -target amdgcn-amd-amdhsa -nogpulib -c -emit-llvm
        ${_ll} -o ${_bc} RESULT_VARIABLE _rc ERROR_VARIABLE _err)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "could not generate ${_bc} for ${t}: ${_err}")
    endif()
    message(STATUS "mlxcel: generated device library oclc_isa_version_${_suffix}.bc (ISA ${_v}) for ${t}")
  endif()
endforeach()

# clang runs clang-offload-bundler while compiling HIP; it sits next to the real clang binary.
get_filename_component(_cxx_real ${CMAKE_CXX_COMPILER} REALPATH)
get_filename_component(_cxx_dir ${_cxx_real} DIRECTORY)
find_program(MLXCEL_OFFLOAD_BUNDLER clang-offload-bundler HINTS ${_cxx_dir} NO_DEFAULT_PATH)
if(NOT MLXCEL_OFFLOAD_BUNDLER)
  message(FATAL_ERROR "clang-offload-bundler not found next to ${_cxx_real}: apt-get install "
    "clang-tools-19")
endif()

set(MLXCEL_HIP_OFFLOAD_FLAGS "")
foreach(t IN LISTS MLXCEL_ROCM_ARCHITECTURES)
  list(APPEND MLXCEL_HIP_OFFLOAD_FLAGS --offload-arch=${t})
endforeach()
set(MLXCEL_HIP_COMPILE_FLAGS -x hip ${MLXCEL_HIP_OFFLOAD_FLAGS} --rocm-path=${ROCM_PATH}
  --rocm-device-lib-path=${MLXCEL_DEVICE_LIBS} -munsafe-fp-atomics
  -Wno-unused-result -Wno-pass-failed)
message(STATUS "mlxcel: HIP from ${ROCM_PATH}, ${MLXCEL_AMDHIP64}; targets ${MLXCEL_ROCM_ARCHITECTURES}")

# Applies the HIP compile settings to GPU sources of a target.
function(mlxcel_gpu_sources target)
  set_source_files_properties(${ARGN} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "${MLXCEL_HIP_COMPILE_FLAGS}")
  target_sources(${target} PRIVATE ${ARGN})
  target_compile_definitions(${target} PRIVATE MLXCEL_GPU_HIP=1 __HIP_PLATFORM_AMD__=1
    "MLXCEL_GPU_TARGETS=\"${MLXCEL_GPU_TARGETS_CSV}\"")
  target_include_directories(${target} SYSTEM PRIVATE ${ROCM_PATH}/include)
  target_link_libraries(${target} PUBLIC ${MLXCEL_AMDHIP64})
  target_link_options(${target} INTERFACE --hip-link ${MLXCEL_HIP_OFFLOAD_FLAGS}
    --rocm-path=${ROCM_PATH} --rocm-device-lib-path=${MLXCEL_DEVICE_LIBS} ${MLXCEL_HIP_RPATH_FLAG})
endfunction()
# The rpath is passed to the linker directly: CMake drops system folders such as Debian's
# /usr/lib/x86_64-linux-gnu from its own RPATH handling, and we want the HIP runtime the binary
# was built against to be found without LD_LIBRARY_PATH wherever ROCm lives.
set(MLXCEL_HIP_RPATH_FLAG "-Wl,-rpath,${MLXCEL_HIP_LIBDIR}")
