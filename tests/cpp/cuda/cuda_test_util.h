// Shared bits of the GPU-only tests: the skip rule and the CUDA includes.
#pragma once

#include <gtest/gtest.h>

#include "lowbit/device.h"

#if defined(LOWBIT_WITH_CUDA)
#include <cuda_runtime.h>
#endif

// Skips the test (with the message the GPU check script looks for) on
// machines without a CUDA device or builds without the CUDA backend.
#define LOWBIT_REQUIRE_CUDA_DEVICE()                                          \
  do {                                                                        \
    if (::lowbit::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

#if defined(LOWBIT_WITH_CUDA)
#define LOWBIT_ASSERT_CUDA(call)                                                         \
  do {                                                                                   \
    const cudaError_t lowbit_e_ = (call);                                                \
    ASSERT_EQ(lowbit_e_, cudaSuccess) << #call << ": " << cudaGetErrorString(lowbit_e_); \
  } while (0)
#endif
