// Random BSR operands for the BSR op tests: a pattern drawn block by block,
// its index arrays (int32 or int64) and values, and the matrix in float64.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <vector>

#include "harness/harness.h"
#include "lowbit/ops/sparse.h"

namespace lowbit::test {

// Element 0 of t (a float dtype) set to a quiet NaN.
inline void put_nan(Tensor& t) {
  switch (t.dtype()) {
    case DType::f32: t.ptr<uint32_t>()[0] = 0x7fc00000u; break;
    case DType::f16: t.ptr<uint16_t>()[0] = 0x7e00u; break;
    default: t.ptr<uint16_t>()[0] = 0x7fc0u; break;  // bf16
  }
}

// A random BSR [*batch, M, K] of BM x BK blocks (each kept with probability
// `density`) with its dense copy in float64.
struct RandomBsr {
  Tensor crow, col, values;
  std::vector<double> dense;  // [batches, M, K]
  BsrRef ref(int64_t M, int64_t K) const { return BsrRef{crow.ref(), col.ref(), values.ref(), M, K}; }
};

inline RandomBsr random_bsr(const std::vector<int64_t>& batch, int64_t M, int64_t K, int64_t BM, int64_t BK, double density,
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

// |x| of a host tensor of a float dtype, as `dtype` (its own by default).
inline Tensor abs_of(const Tensor& t, DType dtype) {
  const std::vector<float> v = to_floats(t.ref());
  std::vector<float> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(v[i]);
  const Tensor flat = host_tensor(a, dtype);
  Tensor r = Tensor::empty(t.sizes(), dtype);
  std::memcpy(r.data(), flat.data(), r.nbytes());
  return r;
}
inline Tensor abs_of(const Tensor& t) { return abs_of(t, t.dtype()); }

}  // namespace lowbit::test
