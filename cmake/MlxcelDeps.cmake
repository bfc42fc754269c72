# Third-party libraries, all from Debian packages (scripts/setup.sh installs them). Static archives
# are preferred where the H200 image lacks the shared library (DESIGN.md "Where things run").
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 QUIET)
if(NOT nlohmann_json_FOUND)
  message(FATAL_ERROR "nlohmann-json3-dev is missing: run scripts/setup.sh (apt-get install nlohmann-json3-dev)")
endif()

function(mlxcel_static_library name header lib package)
  find_path(${name}_INCLUDE_DIR ${header})
  find_library(${name}_LIBRARY NAMES lib${lib}.a ${lib})
  if(NOT ${name}_INCLUDE_DIR OR NOT ${name}_LIBRARY)
    message(FATAL_ERROR "${package} is missing (${header} / lib${lib}): run scripts/setup.sh")
  endif()
  add_library(mlxcel::${name} UNKNOWN IMPORTED GLOBAL)
  set_target_properties(mlxcel::${name} PROPERTIES
    IMPORTED_LOCATION ${${name}_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${${name}_INCLUDE_DIR})
endfunction()

mlxcel_static_library(pcre2 pcre2.h pcre2-8 libpcre2-dev)
set_property(TARGET mlxcel::pcre2 APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS PCRE2_CODE_UNIT_WIDTH=8 PCRE2_STATIC)
mlxcel_static_library(utf8proc utf8proc.h utf8proc libutf8proc-dev)
set_property(TARGET mlxcel::utf8proc APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS UTF8PROC_STATIC)

if(MLXCEL_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(MLXCEL_BUILD_BENCH)
  find_package(benchmark QUIET)
  if(NOT benchmark_FOUND)
    message(STATUS "mlxcel: Google Benchmark not found, bench/ is skipped (apt-get install libbenchmark-dev)")
    set(MLXCEL_BUILD_BENCH OFF)
  endif()
endif()
