// histogram_scatter_add_2d on the CPU: against sums written out in order
// (repeated cells included), a non-square histogram (rows strided by its
// second extent), an empty source, and every check with its message; an
// index out of range adds nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "lowbit/ops/quant.h"

namespace {

using namespace lowbit;
using namespace lowbit::test;

Tensor int_tensor(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i32);
  for (size_t i = 0; i < v.size(); ++i) t.ptr<int32_t>()[i] = v[i];
  return t;
}

TEST(HistogramScatterAdd2d, AddsEachSourceToItsCell) {
  const int64_t rows = 3, cols = 5, n = 2000;
  Tensor h = random_floats({rows, cols}, DType::f32);
  std::vector<float> want = to_floats(h.ref());
  std::vector<int32_t> i1(n), i2(n);
  const Tensor src = random_floats({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) {
    i1[i] = static_cast<int32_t>(rng()() % rows);
    i2[i] = static_cast<int32_t>(rng()() % cols);
    want[static_cast<size_t>(i1[i] * cols + i2[i])] += src.ptr<float>()[i];  // the CPU's order: index order
  }
  const Tensor t1 = int_tensor(i1), t2 = int_tensor(i2);
  run(HistogramScatterAdd2dArgs{h.ref(), t1.ref(), t2.ref(), src.ref()});
  EXPECT_EQ(to_floats(h.ref()), want);
}

TEST(HistogramScatterAdd2d, IndicesOfAnyShapeAndAnEmptySource) {
  const Tensor hist = Tensor::empty({2, 3}, DType::f32);
  std::fill_n(hist.ptr<float>(), 6, 0.0f);
  const Tensor i1 = int_tensor({1, 0, 1, 1}), i2 = int_tensor({2, 1, 2, 0});
  const Tensor src = host_tensor({1.0f, 2.0f, 3.0f, 4.0f});
  const TensorRef i1_2d = TensorRef::contiguous(i1.data(), DType::i32, {2, 2}, Device::cpu());
  run(HistogramScatterAdd2dArgs{hist.ref(), i1_2d, i2.ref(), src.ref()});
  EXPECT_EQ(to_floats(hist.ref()), (std::vector<float>{0, 2, 0, 4, 0, 4}));
  const Tensor none = Tensor::empty({0}, DType::i32), nothing = Tensor::empty({0}, DType::f32);
  run(HistogramScatterAdd2dArgs{hist.ref(), none.ref(), none.ref(), nothing.ref()});
  EXPECT_EQ(to_floats(hist.ref()), (std::vector<float>{0, 2, 0, 4, 0, 4}));
}

TEST(HistogramScatterAdd2d, BadArgumentsSayWhatIsWrong) {
  const std::string op = "histogram_scatter_add_2d";
  const Tensor hist = Tensor::empty({4, 3}, DType::f32), flat = Tensor::empty({12}, DType::f32);
  std::fill_n(hist.ptr<float>(), 12, 0.0f);
  const Tensor i1 = int_tensor({0, 3, 1}), i2 = int_tensor({2, 0, 1}), src = host_tensor({1, 2, 3});
  const Tensor src2 = host_tensor({1, 2}), i64 = Tensor::empty({3}, DType::i64), h16 = Tensor::empty({4, 3}, DType::f16);
  const Tensor src16 = Tensor::empty({3}, DType::f16);
  auto args = [&] { return HistogramScatterAdd2dArgs{hist.ref(), i1.ref(), i2.ref(), src.ref()}; };
  auto expect = [&](HistogramScatterAdd2dArgs a, ErrorCode code, std::vector<std::string> parts) {
    parts.insert(parts.begin(), op);
    expect_error([&] { run(a); }, code, parts);
  };
  {
    auto a = args();
    a.histogram = flat.ref();
    expect(a, ErrorCode::invalid_argument, {"histogram must be 2-D", "[12]"});
  }
  {
    auto a = args();
    a.histogram = h16.ref();
    expect(a, ErrorCode::unsupported_dtype, {"histogram", "float16"});
  }
  {
    auto a = args();
    a.index1 = i64.ref();
    expect(a, ErrorCode::unsupported_dtype, {"index1", "int64"});
  }
  {
    auto a = args();
    a.source = src16.ref();
    expect(a, ErrorCode::unsupported_dtype, {"source", "float16"});
  }
  {
    auto a = args();
    a.source = src2.ref();
    expect(a, ErrorCode::invalid_argument, {"index1"});
  }
  {
    auto a = args();
    a.index2 = {};
    expect(a, ErrorCode::invalid_argument, {"index2"});
  }
  {
    const Tensor bad2 = int_tensor({2, 0, 3});  // column 3 of 3
    auto a = args();
    a.index2 = bad2.ref();
    expect(a, ErrorCode::invalid_argument, {"index2[2] must be in [0, 3)", "got 3"});
    const Tensor bad1 = int_tensor({0, -1, 1});
    a = args();
    a.index1 = bad1.ref();
    expect(a, ErrorCode::invalid_argument, {"index1[1] must be in [0, 4)", "got -1"});
    EXPECT_EQ(to_floats(hist.ref()), std::vector<float>(12, 0.0f)) << "a failed call added something";
  }
}

}  // namespace
