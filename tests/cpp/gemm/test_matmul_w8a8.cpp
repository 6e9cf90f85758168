// Matmul with A_dtype int8 (BitBLAS' W8A8): the exact int32 product A · Wᵀ
// of int8 A and an int8 weight, through int8_linear_matmul on every backend;
// ragged M and batched A, an empty A; the config's rules refused by name.
#include <cstdint>
#include <string>
#include <vector>

#include "../cuda/cuda_test_util.h"
#include "harness/harness.h"
#include "lowbit/ops/gemm.h"

namespace lowbit::test {
namespace {

MatmulConfig w8a8(int64_t N, int64_t K) {
  MatmulConfig c;
  c.N = N;
  c.K = K;
  c.A_dtype = DType::i8;
  c.W_dtype = WeightType::int8;
  c.accum_dtype = DType::i32;
  c.out_dtype = DType::i32;
  return c;
}

// The int64 product of A [M, K] and W [N, K] (every value fits int32 at these K).
std::vector<int64_t> exact(const Tensor& A, const Tensor& W, int64_t M, int64_t N, int64_t K) {
  const int8_t* a = A.ptr<const int8_t>();
  const int8_t* w = W.ptr<const int8_t>();
  std::vector<int64_t> out(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      int64_t s = 0;
      for (int64_t k = 0; k < K; ++k) s += int64_t{a[m * K + k]} * w[n * K + k];
      out[static_cast<size_t>(m * N + n)] = s;
    }
  }
  return out;
}

void expect_exact(const Tensor& out, const std::vector<int64_t>& want, const std::string& what) {
  const Tensor h = out.to(Device::cpu());
  ASSERT_EQ(h.dtype(), DType::i32) << what;
  ASSERT_EQ(h.numel(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(h.ptr<const int32_t>()[i], want[i]) << what << ": element " << i;
  }
}

void check_on(Device device) {
  for (const auto& [N, K] : std::vector<std::pair<int64_t, int64_t>>{{48, 96}, {130, 272}, {7, 16}}) {
    const Matmul mm(w8a8(N, K), device);
    const Tensor W = random_int8({N, K});
    const PackedWeight packed = mm.transform_weight(W.to(device));
    for (const int64_t M : {1, 5, 64, 129}) {
      const Tensor A = random_int8({M, K});
      const std::string what = "W8A8 " + device.str() + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                               " K=" + std::to_string(K);
      expect_exact(mm.forward(A.to(device), packed), exact(A, W, M, N, K), what);
    }
    // Batched A [2, 3, K]: the leading dims stay.
    const Tensor A = random_int8({2, 3, K});
    const Tensor out = mm.forward(A.to(device), packed);
    ASSERT_EQ(out.ndim(), 3);
    expect_exact(out, exact(A, W, 6, N, K), "W8A8 batched " + device.str());
  }
}

TEST(MatmulW8A8, TheExactInt32ProductOnTheCpu) { check_on(Device::cpu()); }

TEST(MatmulW8A8, TheExactInt32ProductOnCuda) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
  check_on(Device::cuda(0));
}

TEST(MatmulW8A8, ConfigRules) {
  const ErrorCode bad = ErrorCode::invalid_argument, dtype = ErrorCode::unsupported_dtype;
  MatmulConfig c = w8a8(8, 32);
  c.W_dtype = WeightType::int4;
  expect_error([&] { check(c); }, bad, {"matmul: W_dtype must be int8", "W8A8", "(got int4)"});
  c = w8a8(8, 32), c.accum_dtype = DType::f32;
  expect_error([&] { check(c); }, dtype, {"matmul: accum_dtype must be int32 (got float32)"});
  c = w8a8(8, 32), c.out_dtype = DType::f16;
  expect_error([&] { check(c); }, dtype, {"matmul: out_dtype must be int32 (got float16)"});
  c = w8a8(8, 32), c.with_scaling = true;
  expect_error([&] { check(c); }, bad, {"matmul: A_dtype int8 takes no scaling", "with_scaling true"});
  c = w8a8(8, 40);
  expect_error([&] { check(c); }, bad, {"matmul: A_dtype int8 needs K a multiple of 16", "got K = 40"});
  // The explicit MatmulArgs path takes float A only.
  const Matmul mm(w8a8(8, 32));
  const PackedWeight W = mm.transform_weight(random_int8({8, 32}));
  const Tensor A = random_int8({2, 32});
  Tensor out = Tensor::empty({2, 8}, DType::i32);
  expect_error([&] { run(mm.args(A, W.ref(), out)); }, bad, {"matmul: A int8 (W8A8) runs through Matmul::forward"});
}

}  // namespace
}  // namespace lowbit::test
