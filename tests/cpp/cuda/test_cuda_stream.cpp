// Ops run on the stream they are given, never on the default stream: with a
// non-blocking stream held back by a host callback, the op's output must stay
// untouched until the stream is released, then match the CPU backend.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "cuda_test_util.h"
#include "lowbit/code_maps.h"
#include "lowbit/ops/quant.h"

namespace {

using namespace lowbit;

#if defined(LOWBIT_WITH_CUDA)
// Holds the stream until released, or 20 s at most (so a mistake fails instead of hanging).
void CUDART_CB wait_for_release(void* flag) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!static_cast<std::atomic<bool>*>(flag)->load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}
#endif

TEST(CudaStream, OpsAreOrderedOnTheGivenStream) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  constexpr int64_t n = (1 << 22) + 5, bs = 256, nb = (n + bs - 1) / bs;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.001f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 97));
  const Tensor xh = Tensor::copy_of(TensorRef::contiguous(x.data(), DType::f32, {n}), Device::cpu());
  const std::vector<float> code = create_dynamic_map();
  const Tensor code_h =
      Tensor::copy_of(TensorRef::contiguous(const_cast<float*>(code.data()), DType::f32, {256}), Device::cpu());
  // CPU backend: the expected codes, absmax and round trip.
  Tensor q_want = Tensor::empty({n}, DType::u8), a_want = Tensor::empty({nb}, DType::f32);
  run(QuantizeBlockwiseArgs{xh, code_h, q_want, a_want, bs});
  Tensor y_want = Tensor::empty({n}, DType::f32);
  run(DequantizeBlockwiseArgs{q_want, code_h, a_want, {}, y_want, bs});

  const Device gpu = Device::cuda(0);
  const Tensor xd = xh.to(gpu), code_d = code_h.to(gpu);
  Tensor q = Tensor::empty({n}, DType::u8, gpu), a = Tensor::empty({nb}, DType::f32, gpu);
  Tensor y = Tensor::empty({n}, DType::f32, gpu);

  // Load the kernels first: CUDA's lazy module loading synchronizes, which
  // would wait for the held stream forever.
  run(QuantizeBlockwiseArgs{xd, code_d, q, a, bs});
  run(DequantizeBlockwiseArgs{q, code_d, a, {}, y, bs});
  LOWBIT_ASSERT_CUDA(cudaMemset(y.data(), 0xff, y.nbytes()));  // NaN poison
  LOWBIT_ASSERT_CUDA(cudaMemset(q.data(), 0, q.nbytes()));
  LOWBIT_ASSERT_CUDA(cudaDeviceSynchronize());
  uint32_t* probe = nullptr;
  LOWBIT_ASSERT_CUDA(cudaMallocHost(&probe, 2 * sizeof(uint32_t)));

  cudaStream_t s = nullptr, side = nullptr;
  LOWBIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  LOWBIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  static std::atomic<bool> release;  // static: the callback may outlive a failed assertion
  release = false;
  LOWBIT_ASSERT_CUDA(cudaLaunchHostFunc(s, wait_for_release, &release));
  // Enqueued behind the callback: nothing may run yet.
  run(QuantizeBlockwiseArgs{xd, code_d, q, a, bs}, nullptr, Stream{s});
  run(DequantizeBlockwiseArgs{q, code_d, a, {}, y, bs}, nullptr, Stream{s});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  LOWBIT_ASSERT_CUDA(cudaMemcpyAsync(probe, y.data(), sizeof(uint32_t), cudaMemcpyDeviceToHost, side));
  LOWBIT_ASSERT_CUDA(cudaMemcpyAsync(probe + 1, static_cast<char*>(y.data()) + (n - 1) * 4, sizeof(uint32_t),
                                     cudaMemcpyDeviceToHost, side));
  LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(side));
  EXPECT_EQ(probe[0], 0xffffffffu) << "dequantize_blockwise ran before its stream was released";
  EXPECT_EQ(probe[1], 0xffffffffu) << "dequantize_blockwise ran before its stream was released";
  release = true;
  LOWBIT_ASSERT_CUDA(cudaStreamSynchronize(s));
  const Tensor qh = q.to(Device::cpu()), ah = a.to(Device::cpu()), yh = y.to(Device::cpu());
  EXPECT_EQ(std::memcmp(qh.data(), q_want.data(), q_want.nbytes()), 0);
  EXPECT_EQ(std::memcmp(ah.data(), a_want.data(), a_want.nbytes()), 0);
  EXPECT_EQ(std::memcmp(yh.data(), y_want.data(), y_want.nbytes()), 0);
  cudaFreeHost(probe);
  cudaStreamDestroy(side);
  cudaStreamDestroy(s);
#endif
}

}  // namespace
