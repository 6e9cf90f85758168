// The BSR ops on the CPU (lowbit/ops/sparse.h): the references every
// backend is tested against. bsr_dense_addmm: each output block row sums its
// stored blocks' products with dense in float64 (int64 for int8), in block order;
// sampled_addmm: each stored element's dot product of mat1's row and mat2's
// column in float64; bsr_softmax: each row's stored elements in float64
// (max, then the sum of exponentials). alpha and beta apply in float64, the
// results are rounded to float32, then to the dtype. The index arrays are
// checked first (ascending columns without repeats, in range, row pointers
// from 0 to nnz).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/broadcast.h"
#include "core/check.h"
#include "core/float_convert.h"
#include "core/registry.h"
#include "cpu/quant/elementwise.h"
#include "cpu/quant/parallel.h"
#include "cpu/register.h"
#include "cpu/sparse/bsr.h"
#include "cpu/sparse/scatter_mm.h"
#include "lowbit/ops/sparse.h"

namespace lowbit::core::cpu {
namespace {

int64_t prod(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

template <class I>
Indices read_indices(const char* op, const BsrRef& b, int64_t batches, int64_t rows, int64_t nnz, int64_t cols) {
  const I* crow = b.crow_indices.ptr<const I>();
  const I* col = b.col_indices.ptr<const I>();
  Indices x{std::vector<int64_t>(crow, crow + batches * (rows + 1)), std::vector<int64_t>(col, col + batches * nnz)};
  for (int64_t s = 0; s < batches; ++s) {
    const int64_t* cr = x.crow.data() + s * (rows + 1);
    const int64_t* ci = x.col.data() + s * nnz;
    LOWBIT_REQUIRE(cr[0] == 0 && cr[rows] == nnz, ErrorCode::invalid_argument, op, ": bsr.crow_indices of batch ", s,
                   " must run from 0 to nnz ", nnz, " (got ", cr[0], " .. ", cr[rows], ")");
    for (int64_t i = 0; i < rows; ++i) {  // all rows' bounds before any column is read
      LOWBIT_REQUIRE(cr[i] <= cr[i + 1], ErrorCode::invalid_argument, op, ": bsr.crow_indices of batch ", s,
                     " must not decrease (got ", cr[i], " then ", cr[i + 1], " at block row ", i, ")");
    }
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = cr[i]; j < cr[i + 1]; ++j) {
        LOWBIT_REQUIRE(ci[j] >= 0 && ci[j] < cols, ErrorCode::invalid_argument, op, ": bsr.col_indices[", j,
                       "] of batch ", s, " must be a block column in [0, ", cols, ") (got ", ci[j], ")");
        LOWBIT_REQUIRE(j == cr[i] || ci[j - 1] < ci[j], ErrorCode::invalid_argument, op,
                       ": bsr.col_indices of block row ", i, " (batch ", s, ") must be ascending without repeats (got ",
                       ci[j - 1], " then ", ci[j], ")");
      }
    }
  }
  return x;
}

}  // namespace

Indices indices_of(const char* op, const BsrRef& b) {
  const int64_t nnz = b.values.size(-3), rows = b.M / b.values.size(-2), cols = b.K / b.values.size(-1);
  const int64_t batches = prod(lead_dims(b.values, 3));
  return b.crow_indices.dtype == DType::i32 ? read_indices<int32_t>(op, b, batches, rows, nnz, cols)
                                            : read_indices<int64_t>(op, b, batches, rows, nnz, cols);
}

void bsr_dense_addmm_reference(const BsrDenseAddmmArgs& a, void*, Stream) {
  const char* op = BsrDenseAddmmArgs::kName;
  const BsrRef& b = a.bsr;
  const int64_t nnz = b.values.size(-3), BM = b.values.size(-2), BK = b.values.size(-1);
  const int64_t rows = b.M / BM, N = a.dense.size(-1), K = b.K;
  const std::vector<int64_t> bsr_batch = lead_dims(b.values, 3), dense_batch = lead_dims(a.dense, 2), out_batch = lead_dims(a.out, 2);
  const int64_t out_batches = prod(out_batch);
  const Indices x = indices_of(op, b);
  const std::vector<int64_t> bsr_strides = broadcast_strides(bsr_batch, out_batch);
  const std::vector<int64_t> dense_strides = broadcast_strides(dense_batch, out_batch);
  const bool beta_reads = a.beta != 0.0 && a.input.present();
  std::vector<int64_t> input_strides, out_dims = lead_dims(a.out, 0);
  if (beta_reads) input_strides = broadcast_strides(lead_dims(a.input, 0), out_dims);
  // T: the operands' element type; the sums in Acc (float64, or int64 for int8), out and input of type Out.
  const auto body = [&](auto t, auto acc_t, auto out_t) {
    using T = decltype(t);
    using Acc = decltype(acc_t);
    using Out = decltype(out_t);
    const auto load = [](auto v) -> Acc {
      if constexpr (std::is_same_v<Acc, int64_t>) {
        return int64_t{v};
      } else {
        return static_cast<double>(to_f32(v));
      }
    };
    const Acc alpha = static_cast<Acc>(a.alpha), beta = static_cast<Acc>(a.beta);
    const T* values = b.values.ptr<const T>();
    const T* dense = a.dense.ptr<const T>();
    const Out* input = beta_reads ? a.input.ptr<const Out>() : nullptr;
    Out* out = a.out.ptr<Out>();
    const int64_t tasks = out_batches * rows;
    parallel_for(tasks, tasks * BM * N * (nnz / std::max<int64_t>(rows, 1) + 1) * BK, [&](int64_t task) {
      const int64_t ob = task / rows, i = task % rows;
      const int64_t sb = broadcast_offset(ob, out_batch, bsr_strides);
      const int64_t db = broadcast_offset(ob, out_batch, dense_strides);
      const int64_t* cr = x.crow.data() + sb * (rows + 1);
      const int64_t* ci = x.col.data() + sb * nnz;
      const T* d = dense + db * K * N;
      std::vector<Acc> acc(static_cast<size_t>(BM * N), Acc{0});
      for (int64_t j = cr[i]; j < cr[i + 1]; ++j) {
        const T* blk = values + (sb * nnz + j) * BM * BK;
        const T* drows = d + ci[j] * BK * N;
        for (int64_t r = 0; r < BM; ++r) {
          Acc* ar = acc.data() + r * N;
          for (int64_t k = 0; k < BK; ++k) {
            const Acc v = load(blk[r * BK + k]);
            const T* dk = drows + k * N;
            for (int64_t n = 0; n < N; ++n) ar[n] += v * load(dk[n]);
          }
        }
      }
      for (int64_t r = 0; r < BM; ++r) {
        const int64_t m = i * BM + r;
        Out* o = out + (ob * b.M + m) * N;
        for (int64_t n = 0; n < N; ++n) {
          Acc v = alpha * acc[static_cast<size_t>(r * N + n)];
          if (beta_reads) v += beta * load(input[broadcast_offset((ob * b.M + m) * N + n, out_dims, input_strides)]);
          if constexpr (std::is_same_v<Acc, int64_t>) {
            o[n] = static_cast<int32_t>(static_cast<uint32_t>(v));  // two's complement wrap
          } else {
            o[n] = from_f32<Out>(static_cast<float>(v));
          }
        }
      }
    });
  };
  if (b.values.dtype == DType::i8) {
    body(int8_t{}, int64_t{}, int32_t{});
  } else {
    with_float_type(b.values.dtype, op, [&](auto t) { body(t, double{}, t); });
  }
}

namespace {

void sampled_addmm_reference(const SampledAddmmArgs& a, void*, Stream) {
  const char* op = SampledAddmmArgs::kName;
  const BsrRef& in = a.input;
  const int64_t nnz = in.values.size(-3), BM = in.values.size(-2), BN = in.values.size(-1);
  const int64_t rows = in.M / BM, N = in.K, Kd = a.mat1.size(-1);
  const Indices x = indices_of(op, in);
  const std::vector<int64_t> out_batch = lead_dims(a.out_values, 3);
  const std::vector<int64_t> in_strides = broadcast_strides(lead_dims(in.values, 3), out_batch);
  const std::vector<int64_t> m1_strides = broadcast_strides(lead_dims(a.mat1, 2), out_batch);
  const std::vector<int64_t> m2_strides = broadcast_strides(lead_dims(a.mat2, 2), out_batch);
  const int64_t out_batches = prod(out_batch);
  with_float_type(in.values.dtype, op, [&](auto t) {
    using T = decltype(t);
    const T* iv = in.values.ptr<const T>();
    const T* m1 = a.mat1.ptr<const T>();
    const T* m2 = a.mat2.ptr<const T>();
    T* out = a.out_values.ptr<T>();
    parallel_for(out_batches * rows, out_batches * nnz * BM * BN * (Kd + 1), [&](int64_t task) {
      const int64_t ob = task / rows, i = task % rows;
      const int64_t sb = broadcast_offset(ob, out_batch, in_strides);
      const T* a1 = m1 + broadcast_offset(ob, out_batch, m1_strides) * in.M * Kd;
      const T* a2 = m2 + broadcast_offset(ob, out_batch, m2_strides) * Kd * N;
      const int64_t* cr = x.crow.data() + sb * (rows + 1);
      const int64_t* ci = x.col.data() + sb * nnz;
      for (int64_t j = cr[i]; j < cr[i + 1]; ++j) {
        const T* src = iv + (sb * nnz + j) * BM * BN;
        T* dst = out + (ob * nnz + j) * BM * BN;
        for (int64_t r = 0; r < BM; ++r) {
          for (int64_t q = 0; q < BN; ++q) {
            double s = 0.0;
            for (int64_t k = 0; k < Kd; ++k) {
              s += static_cast<double>(to_f32(a1[(i * BM + r) * Kd + k])) *
                   static_cast<double>(to_f32(a2[k * N + ci[j] * BN + q]));
            }
            double v = a.alpha * s;
            if (a.beta != 0.0) v += a.beta * static_cast<double>(to_f32(src[r * BN + q]));
            dst[r * BN + q] = from_f32<T>(static_cast<float>(v));
          }
        }
      }
    });
  });
}

void bsr_softmax_reference(const BsrSoftmaxArgs& a, void*, Stream) {
  const char* op = BsrSoftmaxArgs::kName;
  const BsrRef& in = a.input;
  const int64_t nnz = in.values.size(-3), BM = in.values.size(-2), BK = in.values.size(-1);
  const int64_t rows = in.M / BM, batches = prod(lead_dims(in.values, 3));
  const Indices x = indices_of(op, in);
  with_float_type(in.values.dtype, op, [&](auto t) {
    using T = decltype(t);
    const T* iv = in.values.ptr<const T>();
    T* out = a.out_values.ptr<T>();
    parallel_for(batches * rows, batches * nnz * BM * BK, [&](int64_t task) {
      const int64_t s = task / rows, i = task % rows;
      const int64_t j0 = x.crow[static_cast<size_t>(s * (rows + 1) + i)];
      const int64_t j1 = x.crow[static_cast<size_t>(s * (rows + 1) + i + 1)];
      // Row r of the block row: its elements in blocks j0 .. j1 - 1, columns 0 .. BK - 1 of each.
      const auto at = [&](int64_t j, int64_t r, int64_t c) { return (s * nnz + j) * BM * BK + r * BK + c; };
      for (int64_t r = 0; r < BM; ++r) {
        double peak = -INFINITY, sum = 0.0;
        for (int64_t j = j0; j < j1; ++j) {
          for (int64_t c = 0; c < BK; ++c) peak = std::max(peak, static_cast<double>(to_f32(iv[at(j, r, c)])));
        }
        for (int64_t j = j0; j < j1; ++j) {
          for (int64_t c = 0; c < BK; ++c) sum += std::exp(static_cast<double>(to_f32(iv[at(j, r, c)])) - peak);
        }
        for (int64_t j = j0; j < j1; ++j) {
          for (int64_t c = 0; c < BK; ++c) {
            const double e = std::exp(static_cast<double>(to_f32(iv[at(j, r, c)])) - peak);
            out[at(j, r, c)] = from_f32<T>(static_cast<float>(e / sum));
          }
        }
      }
    });
  });
}

}  // namespace

void register_sparse_ops() {
  OpRegistry<BsrDenseAddmmArgs>::add({"cpu-reference", DeviceType::cpu, 0, bsr_dense_addmm_reference});
  OpRegistry<BsrDenseAddmmArgs>::add({"cpu", DeviceType::cpu, 10, bsr_dense_addmm_fast});
  OpRegistry<SampledAddmmArgs>::add({"cpu-reference", DeviceType::cpu, 0, sampled_addmm_reference});
  OpRegistry<SampledAddmmArgs>::add({"cpu", DeviceType::cpu, 10, sampled_addmm_fast});
  OpRegistry<BsrSoftmaxArgs>::add({"cpu-reference", DeviceType::cpu, 0, bsr_softmax_reference});
  OpRegistry<BsrSoftmaxArgs>::add({"cpu", DeviceType::cpu, 10, bsr_softmax_fast});
  OpRegistry<ScatterMmArgs>::add({"cpu-reference", DeviceType::cpu, 0, scatter_mm_reference});
  OpRegistry<ScatterMmArgs>::add({"cpu", DeviceType::cpu, 10, scatter_mm_fast});
}

}  // namespace lowbit::core::cpu
