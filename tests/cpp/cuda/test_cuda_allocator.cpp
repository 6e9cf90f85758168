// Stream-ordered allocation: results and scratch come from the CUDA
// allocator in force, for the op's stream, and go back to the allocator that
// gave them, on that stream; a failed allocation is out_of_memory with a
// message; the default pool keeps memory for reuse and trims on request.
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "harness/harness.h"
#include "lowbit/allocator.h"
#include "lowbit/ops/quant.h"

namespace {

using namespace lowbit;

#if defined(LOWBIT_WITH_CUDA)

// An allocator that records every call and serves from cudaMallocAsync.
struct Recorder {
  std::mutex mutex;
  std::map<void*, void*> live;  // pointer -> stream it was made for
  int allocations = 0, deallocations = 0, wrong_stream = 0;
  bool fail = false;

  static void* allocate(void* ctx, size_t bytes, int /*device*/, void* stream) {
    auto* r = static_cast<Recorder*>(ctx);
    if (r->fail) return nullptr;
    void* p = nullptr;
    if (cudaMallocAsync(&p, bytes, static_cast<cudaStream_t>(stream)) != cudaSuccess) return nullptr;
    std::lock_guard<std::mutex> lock(r->mutex);
    r->live[p] = stream;
    ++r->allocations;
    return p;
  }
  static void deallocate(void* ctx, void* p, size_t /*bytes*/, int /*device*/, void* stream) {
    auto* r = static_cast<Recorder*>(ctx);
    std::lock_guard<std::mutex> lock(r->mutex);
    auto it = r->live.find(p);
    if (it == r->live.end() || it->second != stream) ++r->wrong_stream;
    if (it != r->live.end()) r->live.erase(it);
    ++r->deallocations;
    (void)cudaFreeAsync(p, static_cast<cudaStream_t>(stream));
  }
  CudaAllocator allocator() { return CudaAllocator{&Recorder::allocate, &Recorder::deallocate, this}; }
};

// Restores the default allocator however the test ends.
struct DefaultAllocatorAfter {
  ~DefaultAllocatorAfter() { set_cuda_allocator(CudaAllocator{}); }
};

#endif

TEST(CudaAllocator, OpsAllocateFromTheAllocatorInForceOnTheirStream) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  const DefaultAllocatorAfter restore;
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const Tensor x = test::random_floats({5000}, DType::f16).to(Device::cuda(0));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  Recorder rec;
  set_cuda_allocator(rec.allocator());
  EXPECT_TRUE(cuda_allocator().present());
  {
    auto [packed, state] = quantize_4bit(x, 64, Quant4Type::nf4, /*compress_statistics=*/true, Stream{s});
    EXPECT_GE(rec.allocations, 5);  // packed, absmax, offset, nested absmax and its absmax, code
    const Tensor back = dequantize_4bit(packed, state, DType::f32, Stream{s});
    // The allocator changes while tensors are alive: each goes back to the one that gave it.
    set_cuda_allocator(CudaAllocator{});
    EXPECT_FALSE(cuda_allocator().present());
    const Tensor again = dequantize_4bit(packed, state, DType::f32, Stream{s});
    const int before = rec.allocations;
    const Tensor third = dequantize_4bit(packed, state, DType::f32, Stream{s});
    EXPECT_EQ(rec.allocations, before) << "the default pool must serve once the allocator is reset";
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(test::to_floats(back), test::to_floats(again));
  }
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(rec.allocations, rec.deallocations);
  EXPECT_TRUE(rec.live.empty());
  EXPECT_EQ(rec.wrong_stream, 0) << "memory went back on another stream than the one it was made for";
  cudaStreamDestroy(s);
#endif
}

TEST(CudaAllocator, FailedAllocationIsOutOfMemoryWithAMessage) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  const DefaultAllocatorAfter restore;
  const Tensor x = test::random_floats({8, 128}, DType::f32).to(Device::cuda(0));
  Recorder rec;
  rec.fail = true;
  set_cuda_allocator(rec.allocator());
  try {
    (void)act_quant(x);
    FAIL() << "act_quant returned with no memory to allocate";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda: allocation of"), std::string::npos) << e.what();
  }
#endif
}

TEST(CudaAllocator, DefaultPoolReusesAndTrims) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  EXPECT_FALSE(cuda_allocator().present());
  void* first = nullptr;
  {
    const Tensor t = Tensor::empty({1 << 20}, DType::f32, Device::cuda(0));
    first = t.data();
  }
  {
    // Freed on the same stream: the pool hands the same block back.
    const Tensor t = Tensor::empty({1 << 20}, DType::f32, Device::cuda(0));
    EXPECT_EQ(t.data(), first);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_NO_THROW(empty_cuda_cache(0));
#endif
}

}  // namespace
