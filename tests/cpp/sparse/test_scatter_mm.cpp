// scatter_mm in its three index formats against products written out here in
// float64: the scatter_mm format's block lists (an empty one leaves its
// accumulator as it was), the two bsr_strided formats built from a random
// BSR as torch's bsr_scatter_mm_indices_data builds them (equal to the
// dense product, added onto accumulators that are not zero, over batches),
// an output block listed twice, fp16 (bounds for the fast path's fp32 sums);
// the fast path against the reference; and the argument and index errors.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/registry.h"
#include "harness/harness.h"
#include "random_bsr.h"
#include "lowbit/ops/sparse.h"

namespace lowbit::test {
namespace {

Tensor index_tensor(const std::vector<int64_t>& v, std::vector<int64_t> shape = {}, DType dtype = DType::i32) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  Tensor t = Tensor::empty(Shape(shape), dtype);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::i32)
      t.ptr<int32_t>()[i] = static_cast<int32_t>(v[i]);
    else
      t.ptr<int64_t>()[i] = v[i];
  }
  return t;
}

void expect_near(const std::vector<double>& want, const Tensor& got, double tol, const std::string& what) {
  const std::vector<float> g = to_floats(got.ref());
  ASSERT_EQ(want.size(), g.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    if (!(std::fabs(g[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])))) {
      ADD_FAILURE() << what << ": element " << i << " = " << g[i] << ", want " << want[i];
      ++bad;
    }
  }
}

// got within `rel` of each element's magnitude (the sum of its terms' absolute values: the fast path sums in
// fp32, and the test's values, random_floats with scales up to 20, cancel) plus `out_rel` of the result (the
// output dtype's rounding).
void expect_near_mag(const std::vector<double>& want, const std::vector<double>& mag, const Tensor& got, double rel,
                     double out_rel, const std::string& what) {
  const std::vector<float> g = to_floats(got.ref());
  ASSERT_EQ(want.size(), g.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    if (!(std::fabs(g[i] - want[i]) <= rel * mag[i] + out_rel * std::fabs(want[i]) + 1e-30)) {
      ADD_FAILURE() << what << ": element " << i << " = " << g[i] << ", want " << want[i] << " (magnitude " << mag[i]
                    << ")";
      ++bad;
    }
  }
}

std::vector<double> doubles(const Tensor& t) {
  const std::vector<float> f = to_floats(t.ref());
  return std::vector<double>(f.begin(), f.end());
}

TEST(ScatterMm, ScatterMmFormatAddsEachListedProduct) {
  for (DType dtype : {DType::f32, DType::f16}) {
    const int64_t P = 3, Ms = 2, Ks = 3, Q = 2, Ns = 4;
    const Tensor blocks = random_floats({P, Ms, Ks}, dtype), others = random_floats({Q, Ks, Ns}, dtype);
    Tensor acc = random_floats({3, Ms, Ns}, dtype);
    std::vector<double> want = doubles(acc), mag(want.size());
    for (size_t i = 0; i < want.size(); ++i) mag[i] = std::fabs(want[i]);
    const std::vector<double> x = doubles(blocks), y = doubles(others);
    // Accumulator 0: blocks 0 x others 1 and blocks 2 x others 0; 1: nothing; 2: blocks 1 x others 1.
    const std::vector<int64_t> c{0, 2, 2, 3}, pq{0, 1, 2, 0, 1, 1};
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t g = c[r]; g < c[r + 1]; ++g) {
        const int64_t p = pq[2 * g], q = pq[2 * g + 1];
        for (int64_t i = 0; i < Ms; ++i) {
          for (int64_t j = 0; j < Ns; ++j) {
            double s = 0.0, m = 0.0;
            for (int64_t k = 0; k < Ks; ++k) {
              s += x[(p * Ms + i) * Ks + k] * y[(q * Ks + k) * Ns + j];
              m += std::fabs(x[(p * Ms + i) * Ks + k] * y[(q * Ks + k) * Ns + j]);
            }
            want[(r * Ms + i) * Ns + j] += s;
            mag[(r * Ms + i) * Ns + j] += m;
          }
        }
      }
    }
    const Tensor ci = index_tensor(c), pqt = index_tensor(pq, {3, 2});
    run(ScatterMmArgs{ScatterMmFormat::scatter_mm, blocks, others, ci, pqt, {}, {}, {}, 1, acc});
    // fp32 sums of a few terms (2^-24 each, with room), then the dtype's rounding of the result.
    expect_near_mag(want, mag, acc, 1e-6, dtype == DType::f16 ? 0x1p-10 : 0.0,
                    "scatter_mm " + std::string(dtype_name(dtype)));
  }
}

// torch's bsr_scatter_mm_indices_data for a 2-D BSR (crow, col) [M, K] of Ms x Ks blocks and other [*, K, N].
struct Strided {
  std::vector<int64_t> c, r, p, q;
};
Strided strided_indices(const std::vector<int64_t>& crow, const std::vector<int64_t>& col, int64_t Ms, int64_t Ks,
                        int64_t N, int64_t split_n, bool compressed) {
  const int64_t Ns = N / split_n;
  Strided s;
  s.c = compressed ? crow : std::vector<int64_t>{0};
  for (size_t m = 0; m + 1 < crow.size(); ++m) {
    const int64_t r0 = crow[m], r1 = crow[m + 1];
    if (r1 == r0) continue;
    for (int64_t n = 0; n < split_n; ++n) {
      s.r.push_back(static_cast<int64_t>(m) * Ms * N + n * Ns);
      for (int64_t j = r0; j < r1; ++j) {
        s.q.push_back(col[static_cast<size_t>(j)] * Ks * N + n * Ns);
        s.p.push_back(j);
      }
      if (!compressed) s.c.push_back(s.c.back() + r1 - r0);
    }
  }
  return s;
}

TEST(ScatterMm, StridedFormatsAreTheBsrProduct) {
  const int64_t Ms = 2, Ks = 3, M = 8, K = 9, N = 12, B = 2;
  std::bernoulli_distribution keep(0.5);
  for (int64_t split_n : {1, 3}) {
    for (bool compressed : {false, true}) {
      // A random pattern with an empty block row.
      std::vector<int64_t> crow{0}, col;
      for (int64_t i = 0; i < M / Ms; ++i) {
        for (int64_t j = 0; j < K / Ks; ++j) {
          if (i != 1 && keep(rng())) col.push_back(j);
        }
        crow.push_back(static_cast<int64_t>(col.size()));
      }
      const int64_t nnz = static_cast<int64_t>(col.size());
      const Tensor values = random_floats({nnz, Ms, Ks}, DType::f32), other = random_floats({B, K, N}, DType::f32);
      Tensor acc = random_floats({B, M, N}, DType::f32);
      std::vector<double> want = doubles(acc), mag(want.size());
      for (size_t i = 0; i < want.size(); ++i) mag[i] = std::fabs(want[i]);
      const std::vector<double> v = doubles(values), o = doubles(other);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t i = 0; i < M / Ms; ++i) {
          for (int64_t j = crow[i]; j < crow[i + 1]; ++j) {
            for (int64_t a = 0; a < Ms; ++a) {
              for (int64_t n = 0; n < N; ++n) {
                double s = 0.0, m = 0.0;
                for (int64_t k = 0; k < Ks; ++k) {
                  s += v[(j * Ms + a) * Ks + k] * o[(b * K + col[j] * Ks + k) * N + n];
                  m += std::fabs(v[(j * Ms + a) * Ks + k] * o[(b * K + col[j] * Ks + k) * N + n]);
                }
                want[(b * M + i * Ms + a) * N + n] += s;
                mag[(b * M + i * Ms + a) * N + n] += m;
              }
            }
          }
        }
      }
      const Strided s = strided_indices(crow, col, Ms, Ks, N, split_n, compressed);
      const Tensor c = index_tensor(s.c, {}, DType::i64), r = index_tensor(s.r, {}, DType::i64),
                   p = index_tensor(s.p, {}, DType::i64), q = index_tensor(s.q, {}, DType::i64);
      const ScatterMmFormat f =
          compressed ? ScatterMmFormat::bsr_strided_mm_compressed : ScatterMmFormat::bsr_strided_mm;
      run(ScatterMmArgs{f, values, other, c, {}, r, compressed ? TensorRef{} : p.ref(), q, split_n, acc});
      expect_near_mag(want, mag, acc, 1e-6, 0.0,
                  std::string(scatter_mm_format_name(f)) + " split_n " + std::to_string(split_n) + " nnz " +
                      std::to_string(nnz));
    }
  }
}

// The fast path ("cpu": fp32 sums, vectorized) against the float64 reference on blocks wide enough for every
// column width of its kernel (64, 32, 16 and a tail), each dtype: within fp32 rounding of the products'
// magnitudes (the 16-bit outputs: their own rounding too).
TEST(ScatterMm, FastPathMatchesTheReference) {
  const auto& fast = core::OpRegistry<ScatterMmArgs>::find("cpu");
  const auto& ref = core::OpRegistry<ScatterMmArgs>::find("cpu-reference");
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const int64_t P = 4, Ms = 6, Ks = 40, Q = 3, Ns = 64 + 32 + 16 + 5, R = 3;
    const Tensor blocks = random_floats({P, Ms, Ks}, dtype), others = random_floats({Q, Ks, Ns}, dtype);
    const Tensor acc0 = random_floats({R, Ms, Ns}, dtype);
    const std::vector<int64_t> c{0, 3, 3, 5}, pq{0, 1, 2, 0, 3, 2, 1, 1, 0, 0};
    const Tensor ci = index_tensor(c), pqt = index_tensor(pq, {5, 2});
    Tensor a1 = Tensor::copy_of(acc0.ref(), Device::cpu()), a2 = Tensor::copy_of(acc0.ref(), Device::cpu());
    fast.run(ScatterMmArgs{ScatterMmFormat::scatter_mm, blocks, others, ci, pqt, {}, {}, {}, 1, a1}, nullptr, {});
    ref.run(ScatterMmArgs{ScatterMmFormat::scatter_mm, blocks, others, ci, pqt, {}, {}, {}, 1, a2}, nullptr, {});
    // The magnitudes: the same sums of absolute values (float32, through the reference).
    Tensor mag = abs_of(acc0, DType::f32);
    ref.run(ScatterMmArgs{ScatterMmFormat::scatter_mm, abs_of(blocks, DType::f32), abs_of(others, DType::f32), ci,
                          pqt, {}, {}, {}, 1, mag},
            nullptr, {});
    const std::vector<float> f = to_floats(a1.ref()), r = to_floats(a2.ref()), m = to_floats(mag.ref());
    // fp32 sums of up to 2 Ks + 1 terms, then each result rounded to the dtype (twice: ours and the reference's).
    const double u = dtype == DType::f32 ? 0x1p-24 : dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
    for (size_t i = 0; i < f.size(); ++i) {
      const double bound = (2.0 * Ks + 2.0) * 0x1p-24 * m[i] + 2.0 * u * std::fabs(r[i]);
      ASSERT_LE(std::fabs(f[i] - r[i]), bound) << dtype_name(dtype) << " element " << i << ": " << f[i] << " vs "
                                               << r[i];
    }
  }
}

TEST(ScatterMm, AnOutputBlockListedTwiceAddsTwice) {
  const Tensor blocks = host_tensor({1, 2, 3, 4}).reshaped(std::vector<int64_t>{1, 2, 2});
  const Tensor other = host_tensor({1, 0, 0, 1}).reshaped(std::vector<int64_t>{1, 2, 2});  // the identity
  Tensor acc = host_tensor({0, 0, 0, 0}).reshaped(std::vector<int64_t>{1, 2, 2});
  const Tensor c = index_tensor({0, 1, 2}), r = index_tensor({0, 0}), p = index_tensor({0, 0}),
               q = index_tensor({0, 0});
  run(ScatterMmArgs{ScatterMmFormat::bsr_strided_mm, blocks, other, c, {}, r, p, q, 1, acc});
  expect_near({2, 4, 6, 8}, acc, 0.0, "twice");
}

TEST(ScatterMm, Errors) {
  const Tensor blocks = random_floats({2, 2, 2}, DType::f32), others = random_floats({2, 2, 2}, DType::f32);
  Tensor acc = Tensor::empty({1, 2, 2}, DType::f32);
  const auto call = [&](const std::vector<int64_t>& c, const std::vector<int64_t>& pq) {
    const Tensor ct = index_tensor(c), pqt = index_tensor(pq, {static_cast<int64_t>(pq.size() / 2), 2});
    run(ScatterMmArgs{ScatterMmFormat::scatter_mm, blocks, others, ct, pqt, {}, {}, {}, 1, acc});
  };
  expect_error([&] { call({0, 1}, {2, 0}); }, ErrorCode::invalid_argument, {"scatter_mm", "pq[:, 0][0] = 2", "[0, 2)"});
  expect_error([&] { call({0, 1}, {0, 5}); }, ErrorCode::invalid_argument, {"scatter_mm", "pq[:, 1][0] = 5"});
  expect_error([&] { call({1, 0}, {0, 0}); }, ErrorCode::invalid_argument, {"scatter_mm", "c_indices", "decrease"});
  expect_error([&] { call({0, 3}, {0, 0}); }, ErrorCode::invalid_argument, {"scatter_mm", "c_indices[1]", "[0, 1]"});
  expect_error(
      [&] {
        call({0, 1, 1}, {0, 0});
      },
      ErrorCode::invalid_argument, {"scatter_mm", "accumulators", "[2, 2, 2]"});
  const Tensor c = index_tensor({0, 1}), r = index_tensor({0}), p = index_tensor({0}), q = index_tensor({0});
  Tensor acc2 = Tensor::empty({2, 2, 2}, DType::f32);
  expect_error(
      [&] {
        run(ScatterMmArgs{ScatterMmFormat::bsr_strided_mm, blocks, others, c, c, r, p, q, 1, acc2});
      },
      ErrorCode::invalid_argument, {"scatter_mm", "bsr_strided_mm format takes no pq"});
  expect_error(
      [&] {
        run(ScatterMmArgs{ScatterMmFormat::bsr_strided_mm, blocks, others, c, {}, r, p, q, 3, acc2});
      },
      ErrorCode::invalid_argument, {"scatter_mm", "split_n", "divide N 2", "got 3"});
  const Tensor far = index_tensor({5});
  expect_error(
      [&] {
        run(ScatterMmArgs{ScatterMmFormat::bsr_strided_mm, blocks, others, c, {}, far, p, q, 1, acc2});
      },
      ErrorCode::invalid_argument, {"scatter_mm", "r_offsets[0] = 5", "[0, 4)"});
  expect_error(
      [&] {
        run(ScatterMmArgs{ScatterMmFormat::bsr_strided_mm, blocks, others, c, {}, r, p, far, 1, acc2});
      },
      ErrorCode::invalid_argument, {"scatter_mm", "q_offsets[0] = 5"});
  const Tensor odd = index_tensor({1});
  expect_error(
      [&] {
        run(ScatterMmArgs{ScatterMmFormat::bsr_strided_mm, blocks, others, c, {}, odd, p, q, 1, acc2});
      },
      ErrorCode::invalid_argument, {"scatter_mm", "r_offsets[0] = 1", "does not fit"});
  expect_error(
      [&] {
        run(ScatterMmArgs{static_cast<ScatterMmFormat>(7), blocks, others, c, {}, r, p, q, 1, acc2});
      },
      ErrorCode::invalid_argument, {"scatter_mm", "format", "got 7"});
  const Tensor half = random_floats({2, 2, 2}, DType::f16);
  expect_error(
      [&] {
        run(ScatterMmArgs{
            ScatterMmFormat::scatter_mm, blocks, half, c, index_tensor({0, 0}, {1, 2}), {}, {}, {}, 1, acc});
      },
      ErrorCode::unsupported_dtype, {"scatter_mm", "others"});
}

}  // namespace
}  // namespace lowbit::test
