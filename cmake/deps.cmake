# Third-party packages: header-only ones come from Debian's -dev packages, or,
# on machines that cannot install them (the GPU machine has no network), from
# headers carried in LOWBIT_DEPS_DIR/include (scripts/fetch-deps fills it).

function(lowbit_header_dep name header target)
  find_package(${name} QUIET CONFIG)
  if(TARGET ${target})
    return()
  endif()
  find_path(_dir ${header} PATHS ${LOWBIT_DEPS_DIR}/include /usr/include NO_DEFAULT_PATH)
  if(NOT _dir)
    message(FATAL_ERROR "lowbit: ${header} not found (apt-get install the package, or run scripts/fetch-deps)")
  endif()
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${_dir})
  unset(_dir CACHE)
endfunction()

lowbit_header_dep(dlpack dlpack/dlpack.h dlpack::dlpack)
lowbit_header_dep(nlohmann_json nlohmann/json.hpp nlohmann_json::nlohmann_json)
if(LOWBIT_BUILD_CLI OR LOWBIT_BUILD_BENCH)
  lowbit_header_dep(CLI11 CLI/CLI.hpp CLI11::CLI11)
endif()

# Highway (libhwy-dev), header-only: lowbit picks each kernel's target itself (src/cpu/hwy_targets.h), so
# nothing of libhwy is linked and the library needs no Highway at run time.
find_path(LOWBIT_HWY_INCLUDE hwy/highway.h PATHS ${LOWBIT_DEPS_DIR}/include /usr/include NO_DEFAULT_PATH)
if(NOT LOWBIT_HWY_INCLUDE)
  message(FATAL_ERROR "lowbit: hwy/highway.h not found (apt-get install libhwy-dev, or run scripts/fetch-deps)")
endif()
add_library(lowbit::hwy INTERFACE IMPORTED GLOBAL)
set_target_properties(lowbit::hwy PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${LOWBIT_HWY_INCLUDE})
