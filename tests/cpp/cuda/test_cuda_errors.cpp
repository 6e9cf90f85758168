// CUDA failures become lowbit::Error, and the device stays usable after them.
#include <string>

#include "cuda_test_util.h"
#include "lowbit/error.h"
#include "lowbit/ops/quant.h"
#include "lowbit/tensor.h"

namespace {

using namespace lowbit;

TEST(CudaErrors, DeviceCountNeverThrows) {
  int n = -1;
  EXPECT_NO_THROW(n = cuda_device_count());
  EXPECT_GE(n, 0);
  EXPECT_NO_THROW(synchronize(Stream{}));
}

TEST(CudaErrors, FailedAllocationIsOutOfMemory) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  try {
    (void)Tensor::empty({int64_t{1} << 50}, DType::u8, Device::cuda(0));  // 1 PB
    FAIL() << "a 1 PB allocation succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    const std::string m = e.what();
    EXPECT_NE(m.find("allocation of"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
  }
  // The failure is not sticky: an op right after runs and its launch check passes.
  const Tensor x = Tensor::empty({4096}, DType::f32, Device::cuda(0));
  Tensor out = Tensor::empty({4096}, DType::f8_e4m3, Device::cuda(0));
  Tensor scale = Tensor::empty({32}, DType::f32, Device::cuda(0));
  EXPECT_NO_THROW(
      run(ActQuantArgs{x.reshaped(std::vector<int64_t>{1, 4096}), out.reshaped(std::vector<int64_t>{1, 4096}),
                       scale.reshaped(std::vector<int64_t>{1, 32}), 128, false}));
  EXPECT_NO_THROW(synchronize(Stream{}));
}

TEST(CudaErrors, EmptyTensorsLaunchNothing) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  const Device gpu = Device::cuda(0);
  const Tensor x = Tensor::empty({0}, DType::f16, gpu);
  Tensor q = Tensor::empty({0}, DType::u8, gpu), a = Tensor::empty({0}, DType::f32, gpu);
  Tensor q4 = Tensor::empty({0}, DType::u8, gpu), y = Tensor::empty({0}, DType::bf16, gpu);
  const Tensor code = Tensor::empty({256}, DType::f32, gpu);
  EXPECT_NO_THROW(run(QuantizeBlockwiseArgs{x, code, q, a, 64}));
  EXPECT_NO_THROW(run(DequantizeBlockwiseArgs{q, code, a, {}, y, 64}));
  EXPECT_NO_THROW(run(Quantize4bitArgs{x, q4, a, 64, Quant4Type::fp4}));
  EXPECT_NO_THROW(run(Dequantize4bitArgs{q4, a, {}, y, 64, Quant4Type::fp4}));
  EXPECT_NO_THROW(synchronize(Stream{}));
}

}  // namespace
