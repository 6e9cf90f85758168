// bsr_dense_addmm, sampled_addmm and bsr_softmax on the CPU, fast ("cpu", docs/sparse.md).
// bsr_dense_addmm: a task is a block
// row of the BSR times a panel of up to 256 columns of dense, its outputs
// summed in fp32 in a buffer of the task's thread. Per stored block the
// block's values and dense's rows for it (converted to fp32 once, where the
// dtype is 16-bit) meet in a vectorized kernel that keeps 4 rows by 64 (32,
// 16) columns of sums in registers across the block's K. The order of the sums is fixed (blocks in
// order, K ascending in each), so the result does not depend on the threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/broadcast.h"
#include "core/float_convert.h"
#include "cpu/quant/elementwise.h"
#include "cpu/quant/parallel.h"
#include "cpu/simd_clones.h"
#include "cpu/sparse/bsr.h"

namespace lowbit::core::cpu {
namespace {

constexpr int64_t kPanel = 256;  // dense columns a task

// Rows r .. r + 3 of acc, columns n0 .. n0 + W - 1: the 4 x W sums in registers across k < BK.
template <int W>
[[gnu::always_inline]] inline void rows4(float* acc, int64_t as, const float* a, int64_t BK, const float* d,
                                         int64_t ds, int64_t n0) {
  float t0[W], t1[W], t2[W], t3[W];
  float* o = acc + n0;
  for (int u = 0; u < W; ++u) {
    t0[u] = o[u];
    t1[u] = o[as + u];
    t2[u] = o[2 * as + u];
    t3[u] = o[3 * as + u];
  }
  for (int64_t k = 0; k < BK; ++k) {
    const float x0 = a[k], x1 = a[BK + k], x2 = a[2 * BK + k], x3 = a[3 * BK + k];
    const float* dk = d + k * ds + n0;
    for (int u = 0; u < W; ++u) {
      const float y = dk[u];
      t0[u] += x0 * y;
      t1[u] += x1 * y;
      t2[u] += x2 * y;
      t3[u] += x3 * y;
    }
  }
  for (int u = 0; u < W; ++u) {
    o[u] = t0[u];
    o[as + u] = t1[u];
    o[2 * as + u] = t2[u];
    o[3 * as + u] = t3[u];
  }
}

}  // namespace

// 4 rows by 64 (then 32, then 16) columns of sums in registers at a time, so each load of d serves 4 rows.
LOWBIT_SIMD_CLONES void block_product(float* acc, int64_t as, const float* a, int64_t BM, int64_t BK, const float* d,
                                      int64_t ds, int64_t nc) {
  int64_t r = 0;
  for (; r + 4 <= BM; r += 4) {
    const float* ar = a + r * BK;
    float* o = acc + r * as;
    int64_t n0 = 0;
    for (; n0 + 64 <= nc; n0 += 64) rows4<64>(o, as, ar, BK, d, ds, n0);
    if (n0 + 32 <= nc) {
      rows4<32>(o, as, ar, BK, d, ds, n0);
      n0 += 32;
    }
    if (n0 + 16 <= nc) {
      rows4<16>(o, as, ar, BK, d, ds, n0);
      n0 += 16;
    }
    for (int64_t q = 0; q < 4 && n0 < nc; ++q) {
      for (int64_t k = 0; k < BK; ++k) {
        const float x = ar[q * BK + k];
        const float* dk = d + k * ds;
        for (int64_t n = n0; n < nc; ++n) o[q * as + n] += x * dk[n];
      }
    }
  }
  for (; r < BM; ++r) {
    float* o = acc + r * as;
    for (int64_t k = 0; k < BK; ++k) {
      const float x = a[r * BK + k];
      const float* dk = d + k * ds;
      for (int64_t n = 0; n < nc; ++n) o[n] += x * dk[n];
    }
  }
}

namespace {

template <class T>
void run_float(const BsrDenseAddmmArgs& a, const Indices& x) {
  const BsrRef& b = a.bsr;
  const int64_t nnz = b.values.size(-3), BM = b.values.size(-2), BK = b.values.size(-1);
  const int64_t rows = b.M / BM, N = a.dense.size(-1), K = b.K;
  const std::vector<int64_t> out_batch = lead_dims(a.out, 2), out_dims = lead_dims(a.out, 0);
  int64_t out_batches = 1;
  for (int64_t v : out_batch) out_batches *= v;
  const std::vector<int64_t> bsr_strides = broadcast_strides(lead_dims(b.values, 3), out_batch);
  const std::vector<int64_t> dense_strides = broadcast_strides(lead_dims(a.dense, 2), out_batch);
  const bool beta_reads = a.beta != 0.0 && a.input.present();
  const std::vector<int64_t> input_strides = beta_reads ? broadcast_strides(lead_dims(a.input, 0), out_dims)
                                                        : std::vector<int64_t>{};
  const T* values = b.values.ptr<const T>();
  const T* dense = a.dense.ptr<const T>();
  const T* input = beta_reads ? a.input.ptr<const T>() : nullptr;
  T* out = a.out.ptr<T>();
  const float alpha = static_cast<float>(a.alpha), beta = static_cast<float>(a.beta);
  const int64_t panels = (N + kPanel - 1) / kPanel, tasks = out_batches * rows * panels;
  const int64_t work = out_batches * (nnz + rows) * BM * std::max<int64_t>(BK, 1) * N;
  parallel_for(tasks, work, [&](int64_t task) {
    const int64_t p = task % panels, i = task / panels % rows, ob = task / panels / rows;
    const int64_t n0 = p * kPanel, nc = std::min(kPanel, N - n0);
    const int64_t sb = broadcast_offset(ob, out_batch, bsr_strides);
    const int64_t db = broadcast_offset(ob, out_batch, dense_strides);
    // The thread's buffers, grown once: sums [BM][kPanel], a block in fp32, dense's rows for it in fp32.
    thread_local std::vector<float> acc, blk, rows_f32;
    acc.assign(static_cast<size_t>(BM * kPanel), 0.0f);
    const int64_t* cr = x.crow.data() + sb * (rows + 1);
    const int64_t* ci = x.col.data() + sb * nnz;
    for (int64_t j = cr[i]; j < cr[i + 1]; ++j) {
      const T* v = values + (sb * nnz + j) * BM * BK;
      const T* d = dense + db * K * N + ci[j] * BK * N + n0;
      if constexpr (std::is_same_v<T, float>) {
        block_product(acc.data(), kPanel, v, BM, BK, d, N, nc);
      } else {
        blk.resize(static_cast<size_t>(BM * BK));
        rows_f32.resize(static_cast<size_t>(BK * kPanel));
        for (int64_t e = 0; e < BM * BK; ++e) blk[static_cast<size_t>(e)] = to_f32(v[e]);
        for (int64_t k = 0; k < BK; ++k) {
          for (int64_t n = 0; n < nc; ++n) rows_f32[static_cast<size_t>(k * kPanel + n)] = to_f32(d[k * N + n]);
        }
        block_product(acc.data(), kPanel, blk.data(), BM, BK, rows_f32.data(), kPanel, nc);
      }
    }
    for (int64_t r = 0; r < BM; ++r) {
      const int64_t m = i * BM + r;
      T* o = out + (ob * b.M + m) * N + n0;
      const float* s = acc.data() + r * kPanel;
      for (int64_t n = 0; n < nc; ++n) {
        float y = alpha * s[n];
        if (beta_reads) y += beta * to_f32(input[broadcast_offset((ob * b.M + m) * N + n0 + n, out_dims, input_strides)]);
        o[n] = from_f32<T>(y);
      }
    }
  });
}

// sampled_addmm: a task is a block row (of an output batch); its rows of mat1 (in fp32) times each stored block's
// columns of mat2 through block_product, fp32 sums over K ascending.
template <class T>
void sampled_float(const SampledAddmmArgs& a, const Indices& x) {
  const BsrRef& in = a.input;
  const int64_t nnz = in.values.size(-3), BM = in.values.size(-2), BN = in.values.size(-1);
  const int64_t rows = in.M / BM, N = in.K, Kd = a.mat1.size(-1);
  const std::vector<int64_t> out_batch = lead_dims(a.out_values, 3);
  int64_t out_batches = 1;
  for (int64_t v : out_batch) out_batches *= v;
  const std::vector<int64_t> in_strides = broadcast_strides(lead_dims(in.values, 3), out_batch);
  const std::vector<int64_t> m1_strides = broadcast_strides(lead_dims(a.mat1, 2), out_batch);
  const std::vector<int64_t> m2_strides = broadcast_strides(lead_dims(a.mat2, 2), out_batch);
  const T* iv = in.values.ptr<const T>();
  const T* m1 = a.mat1.ptr<const T>();
  const T* m2 = a.mat2.ptr<const T>();
  T* out = a.out_values.ptr<T>();
  const float alpha = static_cast<float>(a.alpha), beta = static_cast<float>(a.beta);
  parallel_for(out_batches * rows, out_batches * nnz * BM * BN * (Kd + 1), [&](int64_t task) {
    const int64_t ob = task / rows, i = task % rows;
    const int64_t sb = broadcast_offset(ob, out_batch, in_strides);
    const T* a1 = m1 + broadcast_offset(ob, out_batch, m1_strides) * in.M * Kd + i * BM * Kd;
    const T* a2 = m2 + broadcast_offset(ob, out_batch, m2_strides) * Kd * N;
    const int64_t* cr = x.crow.data() + sb * (rows + 1);
    const int64_t* ci = x.col.data() + sb * nnz;
    if (cr[i] == cr[i + 1]) return;
    thread_local std::vector<float> acc, arows, panel;
    const float* af = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      af = a1;
    } else {
      arows.resize(static_cast<size_t>(BM * Kd));
      for (int64_t e = 0; e < BM * Kd; ++e) arows[static_cast<size_t>(e)] = to_f32(a1[e]);
      af = arows.data();
    }
    for (int64_t j = cr[i]; j < cr[i + 1]; ++j) {
      acc.assign(static_cast<size_t>(BM * BN), 0.0f);
      const T* b = a2 + ci[j] * BN;
      if constexpr (std::is_same_v<T, float>) {
        block_product(acc.data(), BN, af, BM, Kd, b, N, BN);
      } else {
        panel.resize(static_cast<size_t>(Kd * BN));
        for (int64_t k = 0; k < Kd; ++k) {
          for (int64_t q = 0; q < BN; ++q) panel[static_cast<size_t>(k * BN + q)] = to_f32(b[k * N + q]);
        }
        block_product(acc.data(), BN, af, BM, Kd, panel.data(), BN, BN);
      }
      const T* src = iv + (sb * nnz + j) * BM * BN;
      T* dst = out + (ob * nnz + j) * BM * BN;
      for (int64_t e = 0; e < BM * BN; ++e) {
        float y = alpha * acc[static_cast<size_t>(e)];
        if (beta != 0.0f) y += beta * to_f32(src[e]);
        dst[e] = from_f32<T>(y);
      }
    }
  });
}

// bsr_softmax: a task is a block row of a batch; per row the maximum, then each exponential once (kept for the
// division) and their sum, in fp32.
template <class T>
void softmax_float(const BsrSoftmaxArgs& a, const Indices& x) {
  const BsrRef& in = a.input;
  const int64_t nnz = in.values.size(-3), BM = in.values.size(-2), BK = in.values.size(-1);
  const int64_t rows = in.M / BM, batches = static_cast<int64_t>(x.crow.size()) / (rows + 1);
  const T* iv = in.values.ptr<const T>();
  T* out = a.out_values.ptr<T>();
  parallel_for(batches * rows, batches * nnz * BM * BK * 4, [&](int64_t task) {
    const int64_t s = task / rows, i = task % rows;
    const int64_t j0 = x.crow[static_cast<size_t>(s * (rows + 1) + i)];
    const int64_t j1 = x.crow[static_cast<size_t>(s * (rows + 1) + i + 1)];
    if (j0 == j1) return;
    thread_local std::vector<float> e;
    e.resize(static_cast<size_t>((j1 - j0) * BK));
    for (int64_t r = 0; r < BM; ++r) {
      float peak = -INFINITY;
      for (int64_t j = j0; j < j1; ++j) {
        const T* v = iv + ((s * nnz + j) * BM + r) * BK;
        for (int64_t c = 0; c < BK; ++c) peak = std::max(peak, to_f32(v[c]));
      }
      float sum = 0.0f;
      for (int64_t j = j0; j < j1; ++j) {
        const T* v = iv + ((s * nnz + j) * BM + r) * BK;
        float* ej = e.data() + (j - j0) * BK;
        for (int64_t c = 0; c < BK; ++c) {
          ej[c] = std::exp(to_f32(v[c]) - peak);
          sum += ej[c];
        }
      }
      for (int64_t j = j0; j < j1; ++j) {
        T* o = out + ((s * nnz + j) * BM + r) * BK;
        const float* ej = e.data() + (j - j0) * BK;
        for (int64_t c = 0; c < BK; ++c) o[c] = from_f32<T>(ej[c] / sum);
      }
    }
  });
}

}  // namespace

void bsr_softmax_fast(const BsrSoftmaxArgs& a, void* /*workspace*/, Stream /*stream*/) {
  const Indices x = indices_of(BsrSoftmaxArgs::kName, a.input);
  with_float_type(a.input.values.dtype, BsrSoftmaxArgs::kName, [&](auto t) { softmax_float<decltype(t)>(a, x); });
}

void sampled_addmm_fast(const SampledAddmmArgs& a, void* /*workspace*/, Stream /*stream*/) {
  const Indices x = indices_of(SampledAddmmArgs::kName, a.input);
  with_float_type(a.input.values.dtype, SampledAddmmArgs::kName, [&](auto t) { sampled_float<decltype(t)>(a, x); });
}

void bsr_dense_addmm_fast(const BsrDenseAddmmArgs& a, void* workspace, Stream stream) {
  if (a.bsr.values.dtype == DType::i8) {  // the reference's int64 sums are exact already
    bsr_dense_addmm_reference(a, workspace, stream);
    return;
  }
  const Indices x = indices_of(BsrDenseAddmmArgs::kName, a.bsr);
  with_float_type(a.bsr.values.dtype, BsrDenseAddmmArgs::kName, [&](auto t) { run_float<decltype(t)>(a, x); });
}

}  // namespace lowbit::core::cpu
