// bsr_dense_addmm / bsr_dense_mm against the dense product in float64: fresh
// random patterns (empty rows, empty matrices), batch dims that broadcast,
// non-square blocks, int32 and int64 indices, input broadcast like a bias,
// beta = 0 ignoring a NaN input, alpha = 0; and the argument errors.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "lowbit/ops/sparse.h"

namespace lowbit::test {
namespace {

// A random BSR [*batch, M, K] of BM x BK blocks (each kept with probability
// `density`) with its dense copy in float64.
struct RandomBsr {
  Tensor crow, col, values;
  std::vector<double> dense;  // [batches, M, K]
  BsrRef ref(int64_t M, int64_t K) const { return BsrRef{crow.ref(), col.ref(), values.ref(), M, K}; }
};

RandomBsr random_bsr(const std::vector<int64_t>& batch, int64_t M, int64_t K, int64_t BM, int64_t BK, double density,
                     DType dtype, DType index) {
  int64_t batches = 1;
  for (int64_t b : batch) batches *= b;
  const int64_t rows = M / BM, cols = K / BK;
  std::bernoulli_distribution keep(density);
  std::vector<std::vector<int64_t>> pattern(static_cast<size_t>(batches));
  int64_t nnz = -1;
  // Every batch holds the same nnz (torch's batched BSR): draw until the counts agree, then trim.
  for (auto& p : pattern) {
    for (int64_t i = 0; i < rows * cols; ++i) {
      if (keep(rng())) p.push_back(i);
    }
  }
  for (const auto& p : pattern) nnz = nnz < 0 ? static_cast<int64_t>(p.size()) : std::min<int64_t>(nnz, p.size());
  for (auto& p : pattern) p.resize(static_cast<size_t>(nnz));
  std::vector<int64_t> crow_shape = batch, col_shape = batch, val_shape = batch;
  crow_shape.push_back(rows + 1);
  col_shape.push_back(nnz);
  val_shape.insert(val_shape.end(), {nnz, BM, BK});
  RandomBsr r;
  r.crow = Tensor::empty(Shape(crow_shape), index);
  r.col = Tensor::empty(Shape(col_shape), index);
  r.values = random_floats(val_shape, dtype);
  const std::vector<float> v = to_floats(r.values.ref());
  r.dense.assign(static_cast<size_t>(batches * M * K), 0.0);
  for (int64_t s = 0; s < batches; ++s) {
    const auto& p = pattern[static_cast<size_t>(s)];
    for (int64_t i = 0, j = 0; i <= rows; ++i) {
      const auto put_crow = [&](int64_t at, int64_t value) {
        if (index == DType::i32)
          r.crow.ptr<int32_t>()[at] = static_cast<int32_t>(value);
        else
          r.crow.ptr<int64_t>()[at] = value;
      };
      put_crow(s * (rows + 1) + i, j);
      while (i < rows && j < nnz && p[static_cast<size_t>(j)] / cols == i) {
        const int64_t c = p[static_cast<size_t>(j)] % cols;
        if (index == DType::i32)
          r.col.ptr<int32_t>()[s * nnz + j] = static_cast<int32_t>(c);
        else
          r.col.ptr<int64_t>()[s * nnz + j] = c;
        for (int64_t a = 0; a < BM; ++a) {
          for (int64_t b = 0; b < BK; ++b) {
            r.dense[static_cast<size_t>((s * M + i * BM + a) * K + c * BK + b)] =
                v[static_cast<size_t>(((s * nnz + j) * BM + a) * BK + b)];
          }
        }
        ++j;
      }
    }
  }
  return r;
}

// Index of flat element `flat` of `to` in an array of `dims` broadcast to it.
int64_t bcast(int64_t flat, const std::vector<int64_t>& dims, const std::vector<int64_t>& to) {
  int64_t off = 0, run = 1;
  for (size_t i = 0; i < to.size(); ++i) {
    const size_t t = to.size() - 1 - i;
    const int64_t c = flat % to[t];
    flat /= to[t];
    if (i < dims.size()) {
      const int64_t d = dims[dims.size() - 1 - i];
      off += (d == 1 ? 0 : c) * run;
      run *= d;
    }
  }
  return off;
}

void check_case(const std::vector<int64_t>& bsr_batch, const std::vector<int64_t>& dense_batch,
                const std::vector<int64_t>& out_batch, int64_t M, int64_t K, int64_t N, int64_t BM, int64_t BK,
                double density, DType dtype, DType index, const std::vector<int64_t>& input_shape, double beta,
                double alpha) {
  const RandomBsr a = random_bsr(bsr_batch, M, K, BM, BK, density, dtype, index);
  std::vector<int64_t> dshape = dense_batch, oshape = out_batch;
  dshape.insert(dshape.end(), {K, N});
  oshape.insert(oshape.end(), {M, N});
  const Tensor d = random_floats(dshape, dtype);
  const std::vector<float> dv = to_floats(d.ref());
  Tensor input;
  std::vector<float> iv;
  if (!input_shape.empty()) {
    input = random_floats(input_shape, dtype);
    if (beta == 0.0) input.ptr<uint8_t>()[0] = 0xff, input.ptr<uint8_t>()[1] = 0xff;  // a NaN beta 0 must not read
    iv = to_floats(input.ref());
  }
  const Tensor out = bsr_dense_addmm(input.defined() ? input.ref() : TensorRef{}, a.ref(M, K), d.ref(), beta, alpha);
  ASSERT_EQ(out.dtype(), dtype);
  const std::vector<float> got = to_floats(out.ref());
  // dims then two more: an operand's full shape, or out's batch with an operand's matrix dims.
  const auto plus = [](std::vector<int64_t> dims, int64_t r, int64_t c) {
    dims.insert(dims.end(), {r, c});
    return dims;
  };
  const std::vector<int64_t> bsr_full = plus(bsr_batch, M, K), dense_full = plus(dense_batch, K, N);
  const std::vector<int64_t> bsr_as_out = plus(out_batch, M, K), dense_as_out = plus(out_batch, K, N);
  int64_t ob_count = 1;
  for (int64_t b : out_batch) ob_count *= b;
  const double tol = dtype == DType::f32 ? 1e-6 : dtype == DType::f16 ? 1e-3 : 8e-3;
  const std::string what = "bsr_dense_addmm " + std::string(dtype_name(dtype)) + " M " + std::to_string(M) + " K " +
                           std::to_string(K) + " N " + std::to_string(N) + " block " + std::to_string(BM) + "x" +
                           std::to_string(BK) + " beta " + std::to_string(beta) + " alpha " + std::to_string(alpha);
  for (int64_t ob = 0; ob < ob_count; ++ob) {
    const int64_t sb = bcast(ob * M * K, bsr_full, bsr_as_out) / (M * K);
    const int64_t db = bcast(ob * K * N, dense_full, dense_as_out) / (K * N);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double s = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          s += a.dense[static_cast<size_t>((sb * M + m) * K + k)] * dv[static_cast<size_t>((db * K + k) * N + n)];
        }
        double want = alpha * s;
        const int64_t flat = (ob * M + m) * N + n;
        if (beta != 0.0) want += beta * iv[static_cast<size_t>(bcast(flat, input_shape, oshape))];
        const double g = got[static_cast<size_t>(flat)];
        ASSERT_NEAR(g, want, tol * (std::fabs(want) + 1.0))
            << what << " at batch " << ob << " [" << m << ", " << n << "]";
      }
    }
  }
}

TEST(Bsr, DenseAddmmIsTheDenseProduct) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    check_case({}, {}, {}, 64, 96, 40, 16, 32, 0.4, dtype, DType::i32, {}, 0.0, 1.0);             // bsr_dense_mm
    check_case({}, {}, {}, 64, 64, 33, 32, 16, 0.5, dtype, DType::i64, {64, 33}, 0.5, -2.0);      // non-square blocks
    check_case({2, 1}, {3}, {2, 3}, 32, 48, 17, 16, 16, 0.5, dtype, DType::i32, {17}, 1.0, 1.0);  // batches broadcast
    check_case({}, {2}, {2}, 48, 32, 8, 16, 16, 0.0, dtype, DType::i32, {48, 1}, 2.0, 1.0);       // no stored block
    check_case({}, {}, {}, 32, 32, 24, 16, 16, 0.6, dtype, DType::i64, {32, 24}, 0.0, 1.0);       // beta 0: NaN unread
    check_case({}, {}, {}, 32, 32, 24, 16, 16, 0.6, dtype, DType::i32, {32, 24}, 3.0, 0.0);       // alpha 0
    check_case({}, {}, {}, 20, 12, 5, 4, 3, 0.7, dtype, DType::i32, {}, 0.0, 1.0);                // small blocks
  }
}

TEST(Bsr, EmptyShapesGiveEmptyOrInputResults) {
  const RandomBsr a = random_bsr({}, 32, 16, 16, 16, 0.5, DType::f32, DType::i32);
  const Tensor d = random_floats({16, 0}, DType::f32);
  const Tensor out = bsr_dense_mm(a.ref(32, 16), d.ref());
  EXPECT_EQ(out.ref().numel(), 0);
  const RandomBsr z = random_bsr({}, 0, 16, 16, 16, 0.5, DType::f32, DType::i32);
  EXPECT_EQ(bsr_dense_mm(z.ref(0, 16), random_floats({16, 4}, DType::f32).ref()).ref().numel(), 0);
}

TEST(Bsr, BadArgumentsNameWhatIsWrong) {
  const char* op = "bsr_dense_addmm";
  const Tensor d = random_floats({32, 8}, DType::f32);
  // Column indices: unsorted, repeated, out of range; row pointers not ending at nnz or decreasing.
  const auto with = [&](std::vector<int32_t> crow, std::vector<int32_t> col) {
    RandomBsr r;
    r.crow = Tensor::empty({static_cast<int64_t>(crow.size())}, DType::i32);
    r.col = Tensor::empty({static_cast<int64_t>(col.size())}, DType::i32);
    for (size_t i = 0; i < crow.size(); ++i) r.crow.ptr<int32_t>()[i] = crow[i];
    for (size_t i = 0; i < col.size(); ++i) r.col.ptr<int32_t>()[i] = col[i];
    r.values = random_floats({static_cast<int64_t>(col.size()), 16, 16}, DType::f32);
    return r;
  };
  {
    const RandomBsr r = with({0, 2, 2}, {1, 0});
    expect_error([&] { bsr_dense_mm(r.ref(32, 32), d.ref()); }, ErrorCode::invalid_argument,
                 {op, "col_indices", "ascending without repeats", "1 then 0"});
  }
  {
    const RandomBsr r = with({0, 2, 2}, {1, 1});
    expect_error([&] { bsr_dense_mm(r.ref(32, 32), d.ref()); }, ErrorCode::invalid_argument,
                 {op, "ascending without repeats", "1 then 1"});
  }
  {
    const RandomBsr r = with({0, 1, 1}, {2});
    expect_error([&] { bsr_dense_mm(r.ref(32, 32), d.ref()); }, ErrorCode::invalid_argument,
                 {op, "col_indices", "[0, 2)", "got 2"});
  }
  {
    const RandomBsr r = with({0, 1, 3}, {0, 1});
    expect_error([&] { bsr_dense_mm(r.ref(32, 32), d.ref()); }, ErrorCode::invalid_argument,
                 {op, "crow_indices", "from 0 to nnz 2"});
  }
  {
    const RandomBsr r = with({0, 2, 1}, {0});  // row 0 would read past nnz: refused before any column is read
    expect_error([&] { bsr_dense_mm(r.ref(32, 32), d.ref()); }, ErrorCode::invalid_argument,
                 {op, "crow_indices", "must not decrease", "2 then 1"});
  }
  const RandomBsr a = random_bsr({}, 32, 32, 16, 16, 0.5, DType::f32, DType::i32);
  expect_error(
      [&] {
        bsr_dense_mm(a.ref(32, 32), random_floats({16, 8}, DType::f32).ref());
      },
      ErrorCode::invalid_argument, {op, "dense's rows (16)", "bsr's K (32)"});
  expect_error(
      [&] {
        bsr_dense_mm(a.ref(32, 32), random_floats({32, 8}, DType::f16).ref());
      },
      ErrorCode::unsupported_dtype, {op, "dense", "float16"});
  expect_error([&] { bsr_dense_mm(a.ref(30, 32), d.ref()); }, ErrorCode::invalid_argument,
               {op, "multiples of the block shape 16 x 16", "M 30"});
  expect_error([&] { bsr_dense_addmm(TensorRef{}, a.ref(32, 32), d.ref(), 1.0, 1.0); }, ErrorCode::invalid_argument,
               {op, "input is needed when beta is not 0"});
  expect_error(
      [&] {
        bsr_dense_addmm(random_floats({3, 8}, DType::f32).ref(), a.ref(32, 32), d.ref(), 1.0, 1.0);
      },
      ErrorCode::invalid_argument, {op, "input [3, 8]", "broadcast to out's shape [32, 8]"});
  const RandomBsr b2 = random_bsr({2}, 32, 32, 16, 16, 0.5, DType::f32, DType::i32);
  expect_error(
      [&] {
        bsr_dense_mm(b2.ref(32, 32), random_floats({3, 32, 8}, DType::f32).ref());
      },
      ErrorCode::invalid_argument, {op, "batch dims of bsr [2] and dense [3]", "do not broadcast"});
  RandomBsr wrong = random_bsr({}, 32, 32, 16, 16, 0.5, DType::f32, DType::i32);
  wrong.crow = Tensor::empty({4}, DType::i32);
  expect_error([&] { bsr_dense_mm(wrong.ref(32, 32), d.ref()); }, ErrorCode::invalid_argument,
               {op, "crow_indices must have shape [3]"});
}

}  // namespace
}  // namespace lowbit::test
