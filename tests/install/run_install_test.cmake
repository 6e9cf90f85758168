# Driven by the install.find_package test (cmake -P): install, check the
# installed layout, then configure, build and run the consumer project.
cmake_minimum_required(VERSION 3.25)

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${what} failed (exit ${rc}): ${ARGN}")
  endif()
endfunction()

file(REMOVE_RECURSE ${PREFIX} ${CONSUMER_BUILD_DIR})
set(config_args)
if(BUILD_TYPE)
  set(config_args --config ${BUILD_TYPE})
endif()
step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX} ${config_args})

# The layout a user relies on.
foreach(pattern include/lowbit/tensor.h include/lowbit/ops/quant.h include/lowbit/c/lowbit.h
                */liblowbit.so */liblowbit.a */cmake/lowbit/lowbitConfig.cmake
                */cmake/lowbit/lowbitConfigVersion.cmake */cmake/lowbit/lowbitTargets.cmake)
  file(GLOB_RECURSE found ${PREFIX}/${pattern})
  if(NOT found AND NOT EXISTS ${PREFIX}/${pattern})
    message(FATAL_ERROR "install test: nothing matching ${pattern} under ${PREFIX}")
  endif()
endforeach()

set(configure_args -S ${CONSUMER_SOURCE_DIR} -B ${CONSUMER_BUILD_DIR} -G ${GENERATOR}
                   -DCMAKE_PREFIX_PATH=${PREFIX} -DCMAKE_C_COMPILER=${C_COMPILER}
                   -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DLOWBIT_EXPECTED_VERSION=${EXPECTED_VERSION})
if(BUILD_TYPE)
  list(APPEND configure_args -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
endif()
if(CUDA_ROOT)
  list(APPEND configure_args -DCUDAToolkit_ROOT=${CUDA_ROOT})
endif()
step("configuring the consumer" ${CMAKE_COMMAND} ${configure_args})
step("building the consumer" ${CMAKE_COMMAND} --build ${CONSUMER_BUILD_DIR} ${config_args})
foreach(exe consumer_shared consumer_static consumer_c)
  file(GLOB_RECURSE path ${CONSUMER_BUILD_DIR}/${exe} ${CONSUMER_BUILD_DIR}/${exe}.exe)
  if(NOT path)
    message(FATAL_ERROR "install test: ${exe} was not built in ${CONSUMER_BUILD_DIR}")
  endif()
  list(GET path 0 path)
  step("running ${exe}" ${path})
endforeach()
message(STATUS "install test: installed, found, linked and ran (shared, static, C)")
