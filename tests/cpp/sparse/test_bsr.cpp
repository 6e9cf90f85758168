// bsr_dense_addmm / bsr_dense_mm against the dense product in float64: fresh
// random patterns (empty rows, empty matrices), batch dims that broadcast,
// non-square blocks, int32 and int64 indices, input broadcast like a bias,
// beta = 0 ignoring a NaN input, alpha = 0; and the argument errors.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "harness/compare.h"
#include "harness/harness.h"
#include "lowbit/ops/sparse.h"
#include "ops/dispatch.h"
#include "sparse/random_bsr.h"

namespace lowbit::test {
namespace {

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
    if (beta == 0.0) put_nan(input);  // beta 0 must not read it
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
        double s = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const double t = a.dense[static_cast<size_t>((sb * M + m) * K + k)] * dv[static_cast<size_t>((db * K + k) * N + n)];
          s += t;
          mag += std::fabs(t);
        }
        double want = alpha * s;
        mag *= std::fabs(alpha);
        const int64_t flat = (ob * M + m) * N + n;
        if (beta != 0.0) {
          const double in = beta * iv[static_cast<size_t>(bcast(flat, input_shape, oshape))];
          want += in;
          mag += std::fabs(in);
        }
        const double g = got[static_cast<size_t>(flat)];
        // The output's rounding, and the fast path's fp32 sums: within (K + 8) units of fp32 of the magnitude.
        ASSERT_NEAR(g, want, tol * (std::fabs(want) + 1.0) + static_cast<double>(K + 8) * 0x1p-24 * mag)
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

// The stored blocks of batch s of a random BSR as (block row, block column, index j).
std::vector<std::array<int64_t, 3>> blocks_of(const RandomBsr& a, int64_t s, int64_t rows, int64_t nnz) {
  std::vector<std::array<int64_t, 3>> out;
  const auto crow = [&](int64_t i) {
    return a.crow.dtype() == DType::i32 ? int64_t{a.crow.ptr<int32_t>()[s * (rows + 1) + i]}
                                        : a.crow.ptr<int64_t>()[s * (rows + 1) + i];
  };
  const auto col = [&](int64_t j) {
    return a.col.dtype() == DType::i32 ? int64_t{a.col.ptr<int32_t>()[s * nnz + j]} : a.col.ptr<int64_t>()[s * nnz + j];
  };
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = crow(i); j < crow(i + 1); ++j) out.push_back({i, col(j), j});
  }
  return out;
}

TEST(Bsr, SampledAddmmIsTheDenseProductAtTheStoredBlocks) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    // The second shape: blocks 64 columns wide and rows in groups of 4 (the fast path's register tiles).
    for (const auto& [beta, M, N, Kd, BM, BN] : std::vector<std::tuple<double, int64_t, int64_t, int64_t, int64_t, int64_t>>{
             {0.0, 48, 64, 40, 16, 32}, {0.5, 48, 64, 40, 16, 32}, {0.5, 40, 192, 70, 8, 64}}) {
      RandomBsr in = random_bsr({}, M, N, BM, BN, 0.5, dtype, DType::i32);
      if (beta == 0.0 && in.values.ref().numel() > 0) put_nan(in.values);  // beta 0 must not read it
      const Tensor m1 = random_floats({2, M, Kd}, dtype), m2 = random_floats({Kd, N}, dtype);
      const Tensor out = sampled_addmm(in.ref(M, N), m1.ref(), m2.ref(), beta, -1.5);
      const int64_t nnz = in.values.ref().size(-3);
      ASSERT_EQ(out.ref().size(0), 2);
      const std::vector<float> o = to_floats(out.ref()), a1 = to_floats(m1.ref()), a2 = to_floats(m2.ref());
      const std::vector<float> iv = to_floats(in.values.ref());
      const double tol = dtype == DType::f32 ? 1e-6 : dtype == DType::f16 ? 1e-3 : 8e-3;
      for (int64_t b = 0; b < 2; ++b) {
        for (const auto& [i, c, j] : blocks_of(in, 0, M / BM, nnz)) {
          for (int64_t r = 0; r < BM; ++r) {
            for (int64_t q = 0; q < BN; ++q) {
              double s = 0.0, mag = 0.0;
              for (int64_t k = 0; k < Kd; ++k) {
                const double t = double{a1[static_cast<size_t>((b * M + i * BM + r) * Kd + k)]} *
                                 a2[static_cast<size_t>(k * N + c * BN + q)];
                s += t;
                mag += std::fabs(t);
              }
              const size_t at = static_cast<size_t>((j * BM + r) * BN + q);
              const double want = -1.5 * s + (beta != 0.0 ? beta * iv[at] : 0.0);
              // The output's rounding, and the fast path's fp32 sums: (Kd + 8) units of fp32 of the magnitude.
              const double bound = tol * (std::fabs(want) + 1.0) +
                                   static_cast<double>(Kd + 8) * 0x1p-24 * (1.5 * mag + (beta != 0.0 ? std::fabs(beta * iv[at]) : 0.0));
              ASSERT_NEAR(o[static_cast<size_t>(b * nnz * BM * BN) + at], want, bound)
                  << "sampled_addmm " << dtype_name(dtype) << " beta " << beta << " batch " << b << " block " << j;
            }
          }
        }
      }
    }
  }
  const RandomBsr in = random_bsr({}, 32, 32, 16, 16, 0.5, DType::f32, DType::i32);
  expect_error(
      [&] {
        sampled_addmm(in.ref(32, 32), random_floats({32, 8}, DType::f32).ref(),
                      random_floats({4, 32}, DType::f32).ref());
      },
      ErrorCode::invalid_argument, {"sampled_addmm", "mat1 [32, 8] @ mat2 [4, 32]"});
}

TEST(Bsr, SoftmaxNormalizesEachRowsStoredElements) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const int64_t M = 64, K = 96, BM = 16, BK = 32;
    const RandomBsr in = random_bsr({3}, M, K, BM, BK, 0.4, dtype, DType::i64);
    const Tensor out = bsr_softmax(in.ref(M, K));
    const int64_t nnz = in.values.ref().size(-3);
    const std::vector<float> o = to_floats(out.ref()), v = to_floats(in.values.ref());
    const double tol = dtype == DType::f32 ? 1e-6 : dtype == DType::f16 ? 1e-3 : 8e-3;
    for (int64_t s = 0; s < 3; ++s) {
      const auto blocks = blocks_of(in, s, M / BM, nnz);
      for (int64_t i = 0; i < M / BM; ++i) {
        for (int64_t r = 0; r < BM; ++r) {
          std::vector<size_t> at;
          for (const auto& [bi, c, j] : blocks) {
            if (bi != i) continue;
            for (int64_t q = 0; q < BK; ++q) at.push_back(static_cast<size_t>(((s * nnz + j) * BM + r) * BK + q));
          }
          double peak = -INFINITY, sum = 0.0;
          for (size_t k : at) peak = std::max(peak, double{v[k]});
          for (size_t k : at) sum += std::exp(double{v[k]} - peak);
          // The fast path's fp32 sum of the row's exponentials: (count + 8) units of fp32, relative.
          const double row_tol = std::max(tol, static_cast<double>(at.size() + 8) * 0x1p-24);
          for (size_t k : at) {
            const double want = std::exp(double{v[k]} - peak) / sum;
            ASSERT_NEAR(o[k], want, row_tol * (want + 1e-3))
                << "bsr_softmax " << dtype_name(dtype) << " row " << i * BM + r;
          }
        }
      }
    }
  }
}

TEST(Bsr, Int8ProductsAreExactInInt32) {
  const int64_t M = 48, K = 64, N = 24, BM = 16, BK = 32;
  RandomBsr a = random_bsr({2}, M, K, BM, BK, 0.6, DType::f32, DType::i32);
  // The values as int8 in [-128, 127]; the dense copy follows.
  const Tensor fv = a.values;
  a.values = Tensor::empty(fv.ref().sizes(), DType::i8);
  std::uniform_int_distribution<int> byte(-128, 127);
  for (int64_t i = 0; i < fv.ref().numel(); ++i) a.values.ptr<int8_t>()[i] = static_cast<int8_t>(byte(rng()));
  const int64_t nnz = a.values.ref().size(-3);
  std::vector<int64_t> dense_a(static_cast<size_t>(2 * M * K), 0);
  for (int64_t s = 0; s < 2; ++s) {
    for (const auto& [i, c, j] : blocks_of(a, s, M / BM, nnz)) {
      for (int64_t r = 0; r < BM; ++r) {
        for (int64_t q = 0; q < BK; ++q) {
          dense_a[static_cast<size_t>((s * M + i * BM + r) * K + c * BK + q)] =
              a.values.ptr<int8_t>()[((s * nnz + j) * BM + r) * BK + q];
        }
      }
    }
  }
  Tensor d = Tensor::empty({K, N}, DType::i8), in = Tensor::empty({N}, DType::i32);
  for (int64_t i = 0; i < K * N; ++i) d.ptr<int8_t>()[i] = static_cast<int8_t>(byte(rng()));
  for (int64_t i = 0; i < N; ++i) in.ptr<int32_t>()[i] = static_cast<int32_t>(byte(rng())) * 1000;
  const Tensor out = bsr_dense_addmm(in.ref(), a.ref(M, K), d.ref(), -3.0, 2.0);
  ASSERT_EQ(out.dtype(), DType::i32);
  for (int64_t s = 0; s < 2; ++s) {
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        int64_t sum = 0;
        for (int64_t k = 0; k < K; ++k) {
          sum += dense_a[static_cast<size_t>((s * M + m) * K + k)] * int64_t{d.ptr<int8_t>()[k * N + n]};
        }
        ASSERT_EQ(out.ptr<int32_t>()[(s * M + m) * N + n], 2 * sum - 3 * int64_t{in.ptr<int32_t>()[n]})
            << "int8 bsr_dense_addmm batch " << s << " [" << m << ", " << n << "]";
      }
    }
  }
  expect_error([&] { bsr_dense_addmm(in.ref(), a.ref(M, K), d.ref(), 0.5, 1.0); }, ErrorCode::invalid_argument,
               {"bsr_dense_addmm", "beta must be an integer for int8 operands", "0.5"});
  expect_error(
      [&] {
        bsr_dense_mm(a.ref(M, K), random_floats({K, N}, DType::f32).ref());
      },
      ErrorCode::unsupported_dtype, {"bsr_dense_addmm", "dense"});
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

namespace lowbit::test {
namespace {

// The fast CPU path ("cpu") against the float64 reference on the same operands: panels of 256 columns with
// ragged tails (and runs of 64), odd block shapes, every float dtype, broadcast batches and input; within the
// dtype's rounding and (K + 8) units of fp32 of each element's magnitude.
TEST(Bsr, FastCpuPathMatchesTheReference) {
  const auto& fast = core::OpRegistry<BsrDenseAddmmArgs>::find("cpu");
  const auto& reference = core::OpRegistry<BsrDenseAddmmArgs>::find("cpu-reference");
  struct Case {
    std::vector<int64_t> bsr_batch, dense_batch;
    int64_t M, K, N, BM, BK;
    double density, beta, alpha;
    std::vector<int64_t> input_shape;
  };
  const std::vector<Case> cases = {
      {{}, {}, 128, 256, 300, 32, 32, 0.4, 0.0, 1.0, {}},
      {{}, {}, 64, 192, 700, 64, 64, 0.5, 0.5, -1.5, {700}},
      {{2}, {}, 45, 30, 77, 5, 3, 0.6, 1.0, 1.0, {45, 1}},
      {{}, {3}, 48, 64, 64, 16, 16, 0.3, 0.0, 2.0, {}},
      {{}, {}, 32, 32, 24, 16, 16, 0.0, 1.0, 1.0, {32, 24}},
  };
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const Case& c : cases) {
      const RandomBsr a = random_bsr(c.bsr_batch, c.M, c.K, c.BM, c.BK, c.density, dtype, DType::i32);
      std::vector<int64_t> dshape = c.dense_batch, oshape = c.bsr_batch.size() > c.dense_batch.size() ? c.bsr_batch
                                                                                                   : c.dense_batch;
      dshape.insert(dshape.end(), {c.K, c.N});
      oshape.insert(oshape.end(), {c.M, c.N});
      const Tensor d = random_floats(dshape, dtype);
      const Tensor input = c.input_shape.empty() ? Tensor() : random_floats(c.input_shape, dtype);
      Tensor want = Tensor::empty(Shape(oshape), dtype), got = Tensor::empty(Shape(oshape), dtype);
      const auto args = [&](const Tensor& out) {
        return BsrDenseAddmmArgs{input.defined() ? input.ref() : TensorRef{}, a.ref(c.M, c.K), d.ref(), c.beta,
                                 c.alpha, out.ref()};
      };
      check(args(want));
      ops::run_impl(reference, args(want), nullptr, Stream{});
      ops::run_impl(fast, args(got), nullptr, Stream{});
      // Each element's magnitude: the reference on absolute values.
      Tensor mag = Tensor::empty(Shape(oshape), DType::f32);
      const Tensor av = abs_of(a.values, DType::f32), dv = abs_of(d, DType::f32);
      const Tensor iv = input.defined() ? abs_of(input, DType::f32) : Tensor();
      ops::run_impl(reference,
                    BsrDenseAddmmArgs{iv.defined() ? iv.ref() : TensorRef{},
                                      BsrRef{a.crow.ref(), a.col.ref(), av.ref(), c.M, c.K}, dv.ref(),
                                      std::fabs(c.beta), std::fabs(c.alpha), mag.ref()},
                    nullptr, Stream{});
      const std::vector<float> w = to_floats(want.ref()), g = to_floats(got.ref()), m = to_floats(mag.ref());
      const double u = unit_roundoff(dtype);
      for (size_t e = 0; e < w.size(); ++e) {
        const double bound = 2 * u * std::fabs(w[e]) + static_cast<double>(c.K + 8) * 0x1p-24 * m[e] + 1e-30;
        ASSERT_LE(std::fabs(double{g[e]} - w[e]), bound)
            << dtype_name(dtype) << " M " << c.M << " N " << c.N << " block " << c.BM << "x" << c.BK << " element " << e;
      }
    }
  }
}

}  // namespace
}  // namespace lowbit::test
