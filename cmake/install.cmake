# `cmake --install`: the public headers, liblowbit.so and liblowbit.a, and a
# CMake package so that a consumer writes
#   find_package(lowbit 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE lowbit::lowbit)   # or lowbit::lowbit_static
#
# lowbit and lowbit_static are built from $<TARGET_OBJECTS:lowbit_objects>,
# not by linking the object library, so lowbit_objects (and its private
# dlpack / nlohmann-json usage) never appears in the exported link
# interface; the exported targets carry only OpenMP (and cudart when built
# with CUDA), which lowbitConfig.cmake finds again.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# lowbit_version() returns the C header's LOWBIT_VERSION_STRING: it must
# match project(VERSION), or the library would misreport itself.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/lowbit/c/lowbit.h _lowbit_version_line
     REGEX "^#define LOWBIT_VERSION_STRING ")
string(REGEX MATCH "\"([^\"]*)\"" _lowbit_version_match "${_lowbit_version_line}")
if(NOT CMAKE_MATCH_1 STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "lowbit: include/lowbit/c/lowbit.h says version '${CMAKE_MATCH_1}' but project() says "
                      "'${PROJECT_VERSION}'; update LOWBIT_VERSION_* in the header")
endif()

set(LOWBIT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/lowbit CACHE STRING
    "Where the lowbit CMake package (lowbitConfig.cmake) is installed, relative to the prefix")

install(TARGETS lowbit lowbit_static EXPORT lowbitTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/lowbit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(EXPORT lowbitTargets NAMESPACE lowbit:: FILE lowbitTargets.cmake DESTINATION ${LOWBIT_INSTALL_CMAKEDIR})

# Where this build found <dlpack/dlpack.h>: the C ABI header includes it, and
# machines without a dlpack package (the GPU machine) carry the header in
# LOWBIT_DEPS_DIR, so the package remembers it as a fallback.
get_target_property(LOWBIT_DLPACK_INCLUDE_DIR dlpack::dlpack INTERFACE_INCLUDE_DIRECTORIES)
if(NOT LOWBIT_DLPACK_INCLUDE_DIR)
  set(LOWBIT_DLPACK_INCLUDE_DIR "")
endif()

# The template lives here rather than in a separate .in file so that the
# whole install story is this one file.
set(_lowbit_config_in ${PROJECT_BINARY_DIR}/cmake/lowbitConfig.cmake.in)
file(WRITE ${_lowbit_config_in} [=[
# lowbit @PROJECT_VERSION@: targets lowbit::lowbit (shared) and lowbit::lowbit_static.
@PACKAGE_INIT@

set(lowbit_WITH_CUDA @LOWBIT_WITH_CUDA@)

include(CMakeFindDependencyMacro)
find_dependency(OpenMP)
if(lowbit_WITH_CUDA)
  find_dependency(CUDAToolkit)
endif()

include("${CMAKE_CURRENT_LIST_DIR}/lowbitTargets.cmake")

# <lowbit/c/lowbit.h> includes <dlpack/dlpack.h> (header-only): use the
# consumer's dlpack package, else the headers lowbit was built with. C++
# users who never include the C header do not need it.
if(NOT TARGET dlpack::dlpack)
  find_package(dlpack CONFIG QUIET)
endif()
if(NOT TARGET dlpack::dlpack)
  find_path(lowbit_DLPACK_INCLUDE_DIR dlpack/dlpack.h HINTS "@LOWBIT_DLPACK_INCLUDE_DIR@")
  if(lowbit_DLPACK_INCLUDE_DIR)
    add_library(dlpack::dlpack INTERFACE IMPORTED)
    set_target_properties(dlpack::dlpack PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${lowbit_DLPACK_INCLUDE_DIR}")
  endif()
endif()
if(TARGET dlpack::dlpack)
  set_property(TARGET lowbit::lowbit lowbit::lowbit_static APPEND PROPERTY INTERFACE_LINK_LIBRARIES dlpack::dlpack)
elseif(NOT lowbit_FIND_QUIETLY)
  message(STATUS "lowbit: dlpack/dlpack.h not found; <lowbit/c/lowbit.h> needs it (apt-get install libdlpack-dev)")
endif()

check_required_components(lowbit)
]=])
configure_package_config_file(${_lowbit_config_in} ${PROJECT_BINARY_DIR}/cmake/lowbitConfig.cmake
                              INSTALL_DESTINATION ${LOWBIT_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/lowbitConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/lowbitConfig.cmake ${PROJECT_BINARY_DIR}/cmake/lowbitConfigVersion.cmake
        DESTINATION ${LOWBIT_INSTALL_CMAKEDIR})
