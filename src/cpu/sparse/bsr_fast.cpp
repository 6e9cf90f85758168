// bsr_dense_addmm on the CPU, fast ("cpu", docs/sparse.md): a task is a block
// row of the BSR times a panel of up to 256 columns of dense, its outputs
// summed in fp32 in a buffer of the task's thread. Per stored block the
// block's values and dense's rows for it (converted to fp32 once, where the
// dtype is 16-bit) meet in a vectorized kernel that keeps 4 rows by 64
// columns of sums in registers across the block's K. The order of the sums is fixed (blocks in
// order, K ascending in each), so the result does not depend on the threads.
#include <algorithm>
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
constexpr int64_t kRun = 64;     // sums of a row kept in registers

// acc[r][0, nc) += sum over k < BK of a[r][k] * d[k][0, nc), r < BM (acc rows kPanel apart, d rows ds apart):
// 4 rows by 64 columns of sums in registers at a time, so each load of d serves 4 rows.
LOWBIT_SIMD_CLONES void block_product(float* acc, const float* a, int64_t BM, int64_t BK, const float* d, int64_t ds,
                                      int64_t nc) {
  int64_t r = 0;
  for (; r + 4 <= BM; r += 4) {
    const float* a0 = a + r * BK;
    int64_t n0 = 0;
    for (; n0 + kRun <= nc; n0 += kRun) {
      float t0[kRun], t1[kRun], t2[kRun], t3[kRun];
      float* o = acc + r * kPanel + n0;
      for (int64_t u = 0; u < kRun; ++u) {
        t0[u] = o[u];
        t1[u] = o[kPanel + u];
        t2[u] = o[2 * kPanel + u];
        t3[u] = o[3 * kPanel + u];
      }
      for (int64_t k = 0; k < BK; ++k) {
        const float x0 = a0[k], x1 = a0[BK + k], x2 = a0[2 * BK + k], x3 = a0[3 * BK + k];
        const float* dk = d + k * ds + n0;
        for (int64_t u = 0; u < kRun; ++u) {
          const float y = dk[u];
          t0[u] += x0 * y;
          t1[u] += x1 * y;
          t2[u] += x2 * y;
          t3[u] += x3 * y;
        }
      }
      for (int64_t u = 0; u < kRun; ++u) {
        o[u] = t0[u];
        o[kPanel + u] = t1[u];
        o[2 * kPanel + u] = t2[u];
        o[3 * kPanel + u] = t3[u];
      }
    }
    for (int64_t q = 0; q < 4 && n0 < nc; ++q) {
      float* o = acc + (r + q) * kPanel;
      for (int64_t k = 0; k < BK; ++k) {
        const float x = a0[q * BK + k];
        const float* dk = d + k * ds;
        for (int64_t n = n0; n < nc; ++n) o[n] += x * dk[n];
      }
    }
  }
  for (; r < BM; ++r) {
    float* o = acc + r * kPanel;
    for (int64_t k = 0; k < BK; ++k) {
      const float x = a[r * BK + k];
      const float* dk = d + k * ds;
      for (int64_t n = 0; n < nc; ++n) o[n] += x * dk[n];
    }
  }
}

std::vector<int64_t> lead(const TensorRef& t, int tail) {
  const Shape s = t.sizes();
  return std::vector<int64_t>(s.begin(), s.end() - tail);
}

template <class T>
void run_float(const BsrDenseAddmmArgs& a, const Indices& x) {
  const BsrRef& b = a.bsr;
  const int64_t nnz = b.values.size(-3), BM = b.values.size(-2), BK = b.values.size(-1);
  const int64_t rows = b.M / BM, N = a.dense.size(-1), K = b.K;
  const std::vector<int64_t> out_batch = lead(a.out, 2), out_dims = lead(a.out, 0);
  int64_t out_batches = 1;
  for (int64_t v : out_batch) out_batches *= v;
  const std::vector<int64_t> bsr_strides = broadcast_strides(lead(b.values, 3), out_batch);
  const std::vector<int64_t> dense_strides = broadcast_strides(lead(a.dense, 2), out_batch);
  const bool beta_reads = a.beta != 0.0 && a.input.present();
  const std::vector<int64_t> input_strides = beta_reads ? broadcast_strides(lead(a.input, 0), out_dims)
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
        block_product(acc.data(), v, BM, BK, d, N, nc);
      } else {
        blk.resize(static_cast<size_t>(BM * BK));
        rows_f32.resize(static_cast<size_t>(BK * kPanel));
        for (int64_t e = 0; e < BM * BK; ++e) blk[static_cast<size_t>(e)] = to_f32(v[e]);
        for (int64_t k = 0; k < BK; ++k) {
          for (int64_t n = 0; n < nc; ++n) rows_f32[static_cast<size_t>(k * kPanel + n)] = to_f32(d[k * N + n]);
        }
        block_product(acc.data(), blk.data(), BM, BK, rows_f32.data(), kPanel, nc);
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

}  // namespace

void bsr_dense_addmm_fast(const BsrDenseAddmmArgs& a, void* workspace, Stream stream) {
  if (a.bsr.values.dtype == DType::i8) {  // the reference's int64 sums are exact already
    bsr_dense_addmm_reference(a, workspace, stream);
    return;
  }
  const Indices x = indices_of(BsrDenseAddmmArgs::kName, a.bsr);
  with_float_type(a.bsr.values.dtype, BsrDenseAddmmArgs::kName, [&](auto t) { run_float<decltype(t)>(a, x); });
}

}  // namespace lowbit::core::cpu
