// The CPU block-scaled FP8 GEMMs: "cpu-reference" (each K block's products
// summed in float64, scaled and summed in float64) and "cpu" (up to 16 rows
// of a: b streamed row by row with its scales folded in; more: tiles of b
// decoded once per 64 rows of a, block sums by the matmul's dot kernel;
// OpenMP over blocks of N and M). The grouped layouts reduce to runs of rows
// that share an expert's b; rows that are padding or past an expert's count
// get zeros.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/float_convert.h"
#include "core/hd.h"
#include "cpu/gemm/impls.h"
#include "cpu/gemm/kernels.h"
#include "cpu/gemm/tiles.h"
#include "cpu/quant/parallel.h"
#include "cpu/quant/spans.h"

namespace lowbit::core::cpu {
namespace {

constexpr int64_t kBlock = kFp8ScaleBlock;

// All 256 e4m3 codes as fp32 (decoding by table, not by bit arithmetic).
const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int i = 0; i < 256; ++i) v[static_cast<size_t>(i)] = e4m3_to_f32(static_cast<uint8_t>(i));
    return v;
  }();
  return t;
}

// Rows [row0, row0 + rows) of a GEMM against one b ([N, K], its scales
// [ceil(N/128), ceil(K/128)]), written to out rows of the same index.
struct Rows {
  const uint8_t* a;   // [*, K]
  const float* a_s;   // [*, kb]
  const uint8_t* b;   // [N, K]
  const float* b_s;   // [nb, kb]
  const float* bias;  // [N] or null
  void* out;          // [*, N]
  DType out_dtype;
  int64_t N, K;
};

// v[j] += bias[n0 + j] where the call has a bias (the fast paths, in fp32).
void add_bias(const Rows& r, int64_t n0, float* v, int64_t len) {
  if (r.bias == nullptr) return;
  for (int64_t j = 0; j < len; ++j) v[j] += r.bias[n0 + j];
}

// out[m, n0 .. n0 + len) = v rounded to out's dtype (from_f32_span).
void store_row(const Rows& r, int64_t m, int64_t n0, const float* v, int64_t len) {
  const int64_t i = m * r.N + n0;
  switch (r.out_dtype) {
    case DType::f32: from_f32_span(v, len, static_cast<float*>(r.out) + i); break;
    case DType::f16: from_f32_span(v, len, static_cast<Half*>(r.out) + i); break;
    default: from_f32_span(v, len, static_cast<BFloat16*>(r.out) + i); break;
  }
}

// Zero is all-zero bits in every output dtype.
void zero_rows(const Rows& r, int64_t row0, int64_t rows) {
  const size_t bytes = static_cast<size_t>(dtype_bits(r.out_dtype) / 8);
  std::memset(static_cast<char*>(r.out) + static_cast<size_t>(row0 * r.N) * bytes, 0,
              static_cast<size_t>(rows * r.N) * bytes);
}

void reference_rows(const Rows& r, int64_t row0, int64_t rows) {
  const std::array<float, 256>& dec = e4m3_table();
  const int64_t kb = ceil_div(r.K, kBlock);
  parallel_for(rows, rows * r.N * r.K, [&](int64_t i) {
    const int64_t m = row0 + i;
    std::vector<float> row(static_cast<size_t>(r.N));
    for (int64_t n = 0; n < r.N; ++n) {
      double acc = 0.0;
      for (int64_t k0 = 0, j = 0; k0 < r.K; k0 += kBlock, ++j) {
        double block = 0.0;
        for (int64_t k = k0; k < std::min(r.K, k0 + kBlock); ++k) {
          block += static_cast<double>(dec[r.a[m * r.K + k]]) * static_cast<double>(dec[r.b[n * r.K + k]]);
        }
        acc += block * static_cast<double>(r.a_s[m * kb + j]) * static_cast<double>(r.b_s[(n / kBlock) * kb + j]);
      }
      if (r.bias != nullptr) acc += static_cast<double>(r.bias[n]);
      row[static_cast<size_t>(n)] = static_cast<float>(acc);
    }
    store_row(r, m, 0, row.data(), r.N);
  });
}

// Rows of M a task handles at once: their decoded K block, its sums and the
// running sums (32 KB each) stay in L2 beside the decoded b tile (64 KB).
constexpr int64_t kRowsATask = 64;

// Per task (128 rows of N, up to 64 rows of M) and K block: b's tile and a's
// rows decoded to fp32 (decode_bytes), their products summed by the matmul's
// dot kernel (tile_dot), both vectorized per instruction set, then scaled
// into the sums.
void tile_rows(const Rows& r, int64_t row0, int64_t rows) {
  const int64_t kb = ceil_div(r.K, kBlock);
  const int64_t n_blocks = ceil_div(r.N, kBlock);
  const int64_t m_tasks = ceil_div(rows, kRowsATask);
  parallel_for(n_blocks * m_tasks, rows * r.N * r.K, [&](int64_t task) {
    const int64_t nb = task / m_tasks;
    const int64_t mt0 = row0 + (task % m_tasks) * kRowsATask;
    const int mrows = static_cast<int>(std::min(kRowsATask, row0 + rows - mt0));
    const int64_t n0 = nb * kBlock;
    const int nrows = static_cast<int>(std::min(kBlock, r.N - n0));
    // Per thread, kept across tasks and calls (freed memory handed back to
    // the kernel would be faulted in and zeroed again on every task).
    thread_local std::vector<float> b32(static_cast<size_t>(kBlock * kBlock)),
        a32(static_cast<size_t>(kRowsATask * kBlock)), block(static_cast<size_t>(kRowsATask * kBlock)),
        acc(static_cast<size_t>(kRowsATask * kBlock));
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t j = 0; j < kb; ++j) {
      const int64_t k0 = j * kBlock;
      const int64_t klen = std::min(kBlock, r.K - k0);  // a multiple of 16 (kVec)
      for (int n = 0; n < nrows; ++n) {
        gemm::decode_bytes(r.b + (n0 + n) * r.K, WeightKind::fp8, k0, klen, nullptr, b32.data() + n * kBlock);
      }
      for (int i = 0; i < mrows; ++i) {
        gemm::decode_bytes(r.a + (mt0 + i) * r.K, WeightKind::fp8, k0, klen, nullptr, a32.data() + i * kBlock);
      }
      std::fill(block.begin(), block.end(), 0.0f);
      gemm::tile_dot(a32.data(), kBlock, mrows, b32.data(), kBlock, nrows, klen, block.data(), kBlock);
      const float sb = r.b_s[nb * kb + j];
      for (int i = 0; i < mrows; ++i) {
        const float s = r.a_s[(mt0 + i) * kb + j] * sb;
        const float* bl = block.data() + i * kBlock;
        float* out = acc.data() + i * kBlock;
        for (int n = 0; n < nrows; ++n) out[n] += bl[n] * s;
      }
    }
    for (int i = 0; i < mrows; ++i) {
      add_bias(r, n0, acc.data() + i * kBlock, nrows);
      store_row(r, mt0 + i, n0, acc.data() + i * kBlock, nrows);
    }
  });
}

// A decode batch of rows at most (the stream path below serves it).
constexpr int64_t kStreamRows = 16;
// Rows of b decoded at once by the stream path.
constexpr int kStreamChunk = 16;

// x[k] *= scale[k / 128] over a row of K values (a loop per block: vectorized).
void scale_blocks(float* x, int64_t K, const float* scale) {
  for (int64_t k0 = 0, j = 0; k0 < K; k0 += kBlock, ++j) {
    const float s = scale[j];
    const int64_t end = std::min(K, k0 + kBlock);
    for (int64_t k = k0; k < end; ++k) x[k] *= s;
  }
}

// Few rows of a: b streamed row by row (K contiguous bytes, what hardware
// prefetchers follow, where tiles read 128 rows 4 KB apart), each row decoded
// with its blocks' scales multiplied in, a's rows likewise once; then one dot
// over all of K per output (the same sums as per-block scaling, to fp32
// rounding).
void stream_rows(const Rows& r, int64_t row0, int64_t rows) {
  const int64_t K = r.K, kb = ceil_div(K, kBlock);
  const int mr = static_cast<int>(rows);
  std::vector<float> a32(static_cast<size_t>(rows * K));
  for (int64_t i = 0; i < rows; ++i) {
    float* dst = a32.data() + i * K;
    gemm::decode_bytes(r.a + (row0 + i) * K, WeightKind::fp8, 0, K, nullptr, dst);
    scale_blocks(dst, K, r.a_s + (row0 + i) * kb);
  }
  const int64_t chunks = ceil_div(r.N, int64_t{kStreamChunk});
  parallel_for(chunks, rows * r.N * K, [&](int64_t c) {
    const int64_t n0 = c * kStreamChunk;
    const int nr = static_cast<int>(std::min<int64_t>(kStreamChunk, r.N - n0));
    thread_local std::vector<float> w32, acc;
    w32.resize(static_cast<size_t>(kStreamChunk * K));
    acc.assign(static_cast<size_t>(kStreamRows * kStreamChunk), 0.0f);
    for (int j = 0; j < nr; ++j) {
      float* dst = w32.data() + j * K;
      gemm::decode_bytes(r.b + (n0 + j) * K, WeightKind::fp8, 0, K, nullptr, dst);
      scale_blocks(dst, K, r.b_s + ((n0 + j) / kBlock) * kb);
    }
    gemm::tile_dot(a32.data(), K, mr, w32.data(), K, nr, K, acc.data(), kStreamChunk);
    for (int i = 0; i < mr; ++i) {
      add_bias(r, n0, acc.data() + i * kStreamChunk, nr);
      store_row(r, row0 + i, n0, acc.data() + i * kStreamChunk, nr);
    }
  });
}

// The fast path: the stream path for a decode batch, tiles above.
void fast_rows(const Rows& r, int64_t row0, int64_t rows) {
  if (rows == 0) return;  // b is not decoded for no rows (empty experts, M = 0)
  if (rows <= kStreamRows) {
    stream_rows(r, row0, rows);
  } else {
    tile_rows(r, row0, rows);
  }
}

using RowsFn = void (*)(const Rows&, int64_t, int64_t);

void single(const Fp8GemmArgs& a, RowsFn fn) {
  require_cpu_config(Fp8GemmArgs::kName, a.config);
  const int64_t K = a.a.size(-1);
  Rows r{a.a.ptr<const uint8_t>(), a.a_s.ptr<const float>(), a.b.ptr<const uint8_t>(), a.b_s.ptr<const float>(),
         a.bias.present() ? a.bias.ptr<const float>() : nullptr, a.out.data, a.out.dtype, a.b.shape[0], K};
  fn(r, 0, a.a.numel() / K);
}

// Rows of one expert of a grouped call: a, its scales and out at row 0 of the
// expert's run; b and b_s at the expert's matrix.
Rows expert_rows(const TensorRef& a, const TensorRef& a_s, const TensorRef& b, const TensorRef& b_s,
                 const TensorRef& out, int64_t e) {
  const int64_t N = b.shape[1], K = b.shape[2];
  const int64_t kb = ceil_div(K, kBlock);
  return Rows{a.ptr<const uint8_t>(),
              a_s.ptr<const float>(),
              b.ptr<const uint8_t>() + e * N * K,
              b_s.ptr<const float>() + e * ceil_div(N, kBlock) * kb,
              nullptr,
              out.data,
              out.dtype,
              N,
              K};
}

void grouped_contiguous(const Fp8GroupedGemmContiguousArgs& a, RowsFn fn) {
  const char* op = Fp8GroupedGemmContiguousArgs::kName;
  require_cpu_config(op, a.config);
  const int64_t M = a.a.shape[0], E = a.b.shape[0];
  const int32_t* ids = a.m_indices.ptr<const int32_t>();
  for (int64_t m = 0; m < M; ++m) {
    LOWBIT_REQUIRE(ids[m] >= -1 && ids[m] < E, ErrorCode::invalid_argument, op, ": m_indices[", m, "] is ", ids[m],
                   "; expected an expert in [0, ", E, ") or -1 (padding)");
  }
  // Runs of rows with one expert each.
  for (int64_t m0 = 0; m0 < M;) {
    int64_t m1 = m0 + 1;
    while (m1 < M && ids[m1] == ids[m0]) ++m1;
    const Rows r = expert_rows(a.a, a.a_s, a.b, a.b_s, a.out, ids[m0] < 0 ? 0 : ids[m0]);
    if (ids[m0] < 0) {
      zero_rows(r, m0, m1 - m0);
    } else {
      fn(r, m0, m1 - m0);
    }
    m0 = m1;
  }
}

void grouped_masked(const Fp8GroupedGemmMaskedArgs& a, RowsFn fn) {
  const char* op = Fp8GroupedGemmMaskedArgs::kName;
  require_cpu_config(op, a.config);
  const int64_t E = a.a.shape[0], max_m = a.a.shape[1], K = a.a.shape[2], N = a.b.shape[1];
  const int32_t* counts = a.masked_m.ptr<const int32_t>();
  for (int64_t e = 0; e < E; ++e) {
    LOWBIT_REQUIRE(counts[e] >= 0 && counts[e] <= max_m, ErrorCode::invalid_argument, op, ": masked_m[", e, "] is ",
                   counts[e], "; expected a row count in [0, ", max_m, "]");
  }
  const int64_t kb = ceil_div(K, kBlock);
  for (int64_t e = 0; e < E; ++e) {
    Rows r = expert_rows(a.a, a.a_s, a.b, a.b_s, a.out, e);
    r.a += e * max_m * K;
    r.a_s += e * max_m * kb;
    r.out = static_cast<char*>(a.out.data) + e * max_m * N * (dtype_bits(a.out.dtype) / 8);
    fn(r, 0, counts[e]);
    zero_rows(r, counts[e], max_m - counts[e]);
  }
}

}  // namespace

void fp8_gemm_reference(const Fp8GemmArgs& a, void*, Stream) { single(a, reference_rows); }
void fp8_gemm_fast(const Fp8GemmArgs& a, void*, Stream) { single(a, fast_rows); }
void fp8_grouped_contiguous_reference(const Fp8GroupedGemmContiguousArgs& a, void*, Stream) {
  grouped_contiguous(a, reference_rows);
}
void fp8_grouped_contiguous_fast(const Fp8GroupedGemmContiguousArgs& a, void*, Stream) {
  grouped_contiguous(a, fast_rows);
}
void fp8_grouped_masked_reference(const Fp8GroupedGemmMaskedArgs& a, void*, Stream) {
  grouped_masked(a, reference_rows);
}
void fp8_grouped_masked_fast(const Fp8GroupedGemmMaskedArgs& a, void*, Stream) { grouped_masked(a, fast_rows); }

}  // namespace lowbit::core::cpu
