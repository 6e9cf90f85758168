// Shared bits of the GPU-only tests: the skip rule and the CUDA includes.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "lowbit/device.h"
#include "lowbit/tensor.h"

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

namespace lowbit::test {

// A tensor's bytes, copied to the host.
inline std::vector<unsigned char> bytes_of(const TensorRef& t) {
  const Tensor h = Tensor::copy_of(t, Device::cpu());
  const auto* b = h.ptr<const unsigned char>();
  return std::vector<unsigned char>(b, b + h.nbytes());
}

// `got` (the GPU's) equal to `want` (the CPU's) element by element, bit for bit; names the first few that differ.
inline void expect_same_bits(const TensorRef& want, const TensorRef& got, const std::string& what) {
  const std::vector<unsigned char> w = bytes_of(want), g = bytes_of(got);
  ASSERT_EQ(w.size(), g.size()) << what;
  const size_t elem = static_cast<size_t>(std::max(1, dtype_bits(want.dtype) / 8));
  int bad = 0;
  for (size_t i = 0; i < w.size() && bad < 5; i += elem) {
    if (!std::equal(w.begin() + i, w.begin() + i + elem, g.begin() + i)) {
      ADD_FAILURE() << what << ": element " << i / elem << " differs from the CPU's";
      ++bad;
    }
  }
}

// A contiguous view on GPU 0 of host tensor `src`, starting `offset` bytes
// into a buffer (any offset: a view that is not 16-byte aligned).
struct DeviceView {
  Tensor buffer;
  TensorRef ref;
};
inline DeviceView device_view(const Tensor& src, int64_t offset) {
  const Device gpu = Device::cuda(0);
  DeviceView d;
  d.buffer = Tensor::empty({static_cast<int64_t>(src.nbytes()) + offset}, DType::u8, gpu);
  const std::vector<int64_t> shape(src.sizes().begin(), src.sizes().end());
  d.ref = TensorRef::contiguous(static_cast<char*>(d.buffer.data()) + offset, src.dtype(), Shape(shape), gpu);
  copy(d.ref, src.ref());
  return d;
}

// A tensor on GPU 0 filled with 0xff bytes (NaN / -1), so an element a kernel leaves unwritten shows.
inline Tensor poisoned(const std::vector<int64_t>& shape, DType dtype) {
  Tensor t = Tensor::empty(Shape(shape), dtype, Device::cuda(0));
#if defined(LOWBIT_WITH_CUDA)
  EXPECT_EQ(cudaMemset(t.data(), 0xff, t.nbytes()), cudaSuccess);
#endif
  return t;
}

// got (the GPU's) against want (the CPU's) as floats, bit for bit, but for
// NaN: a NaN must meet a NaN, whatever its payload (fp32 arithmetic on the
// GPU may return the canonical NaN where the CPU keeps an operand's).
inline void expect_same_floats(const Tensor& want, const TensorRef& got, const std::string& what) {
  const std::vector<float> w = to_floats(want.ref()), g = to_floats(Tensor::copy_of(got, Device::cpu()).ref());
  ASSERT_EQ(w.size(), g.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < w.size() && bad < 5; ++i) {
    const bool same = std::isnan(w[i]) ? std::isnan(g[i]) : std::memcmp(&w[i], &g[i], 4) == 0;
    if (!same) {
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", the CPU's " << w[i];
      ++bad;
    }
  }
}

}  // namespace lowbit::test
