// percentile_clipping on the CPU against a float64 model: the squared norm of
// fp32, fp16 and bf16 gradients (empty, ragged, large enough for threads),
// every slot seeded at step 1, slot step % 100 after (wrapping past 100), the
// other slots untouched; and the bad arguments, named.
#include <cmath>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "lowbit/ops/optim.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

constexpr int64_t kHistory = PercentileClippingArgs::kHistory;

// The squared norm of g's values (as stored in its dtype), in float64.
double model_norm2(const Tensor& g) {
  double s = 0.0;
  for (float v : to_floats(g.ref())) s += static_cast<double>(v) * v;
  return s;
}

void record(const Tensor& g, Tensor& vec, int64_t step) {
  PercentileClippingArgs a;
  a.grad = g.ref();
  a.gnorm_vec = vec.ref();
  a.step = step;
  run(a);
}

TEST(PercentileClipping, RecordsTheSquaredNormInItsSlot) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1001}, int64_t{200003}}) {
      std::vector<float> init(kHistory);
      for (int64_t i = 0; i < kHistory; ++i) init[i] = -1.0f - static_cast<float>(i);  // marks untouched slots
      Tensor vec = host_tensor(init);
      std::vector<float> want = init;
      for (int64_t step : {1, 2, 3, 99, 100, 101, 257}) {
        const Tensor g = random_floats({n}, dtype, 0.5f + static_cast<float>(step % 7));
        record(g, vec, step);
        const float norm2 = static_cast<float>(model_norm2(g));
        if (step == 1) {
          for (float& v : want) v = norm2;
        } else {
          want[step % kHistory] = norm2;
        }
        const std::vector<float> got = to_floats(vec.ref());
        for (int64_t i = 0; i < kHistory; ++i) {
          // float64 sums in another order: the same fp32 but for a tie's last bit.
          ASSERT_NEAR(got[i], want[i], std::fabs(want[i]) * 1.2e-7)
              << dtype_name(dtype) << " n=" << n << " step=" << step << " slot " << i;
        }
        want = got;  // the next step starts from the op's bits
      }
    }
  }
}

TEST(PercentileClipping, BadArgumentsSayWhatIsWrong) {
  const Tensor g = random_floats({10}, DType::f32), vec = Tensor::empty({kHistory}, DType::f32);
  const Tensor short_vec = Tensor::empty({kHistory - 1}, DType::f32), vec16 = Tensor::empty({kHistory}, DType::f16);
  const Tensor gi = Tensor::empty({10}, DType::i32);
  auto args = [&] {
    PercentileClippingArgs a;
    a.grad = g.ref();
    a.gnorm_vec = vec.ref();
    a.step = 1;
    return a;
  };
  const std::string op = "percentile_clipping";
  {
    auto a = args();
    a.grad = gi.ref();
    expect_error([&] { run(a); }, ErrorCode::unsupported_dtype, {op, "grad dtype must be one of", "int32"});
  }
  {
    auto a = args();
    a.gnorm_vec = short_vec.ref();
    expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op, "gnorm_vec", "100"});
  }
  {
    auto a = args();
    a.gnorm_vec = vec16.ref();
    expect_error([&] { run(a); }, ErrorCode::unsupported_dtype, {op, "gnorm_vec dtype must be float32"});
  }
  {
    auto a = args();
    a.gnorm_vec = {};
    expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op, "gnorm_vec"});
  }
  {
    auto a = args();
    a.step = 0;
    expect_error([&] { run(a); }, ErrorCode::invalid_argument, {op, "step must be at least 1", "got 0"});
  }
}

}  // namespace
