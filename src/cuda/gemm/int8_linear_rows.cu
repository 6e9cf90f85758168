// int8_linear for a few rows of activations (docs/int8.md, "Few rows"): one
// kernel after the quantization (int8_linear_quant_bits), launched on sm_90
// as its programmatic dependent so that it streams the weights while the
// activations are quantized. No mask to zero, no column list in memory, no
// second pass over out.
//
// A CTA of 8 warps computes out[:, n0, n0 + 32) for all the rows (16 or 32
// tile rows):
//   - b's 32 rows pass through a ring of stages of 256 K bytes by cp.async
//     (12, or as many as let all CTAs stay on the SMs at once), the
//     codes of a beside them (all but one stage of b issued before
//     griddepcontrol.wait: b does not depend on the quantization); each
//     thread's chunks are placed once, a stage adds its K offset; warp w
//     takes the 32-byte step w % 4 of 128-byte half w / 4 (mma.sync
//     m16n8k32 on s8), and the 8 warps' int32 sums are added once at the
//     end (exact in any order);
//   - the outlier columns: the rows' bits ORed and listed ascending, 8192
//     columns at a time (the first window's bits loaded before the main
//     loop); their int8 products taken out of the sums (the codes were left
//     as encoded) and their fp32 products summed in column order, as the
//     CPU's int8_linear_outliers sums them;
//   - out = dequant(sums) (+ bias) rounded to T, then + the fp32 sums
//     (where any column is an outlier) rounded again: int8_linear's bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/check.h"
#include "core/float_convert.h"
#include "core/quant_math.h"
#include "cuda/common/check.h"
#include "cuda/common/convert.cuh"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx/copy.cuh"
#include "cuda/common/ptx/mma.cuh"
#include "cuda/common/ptx/sync.cuh"
#include "cuda/gemm/byte_tiles.cuh"
#include "cuda/gemm/int8_gemm.cuh"
#include "cuda/gemm/int8_linear_rows.h"
#include "cuda/quant/outlier_columns.cuh"

namespace lowbit::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kBN = 32;     // out's columns a CTA
constexpr int kHalves = 2;  // 128-byte K halves a stage
constexpr int kStageK = kHalves * i8g::kBK;
constexpr int kMaxStages = 12;          // the ring of stages: 12, or fewer where CTAs must share an SM
constexpr int kWindowWords = kThreads;  // bit words listed at once: one a thread
constexpr int kChunk = 32;              // listed columns gathered at once

template <int kTilesM>
struct RowsTile {
  static constexpr int kRows = 16 * kTilesM;
  static constexpr int kHalfA = kRows * i8g::kBK, kHalfB = kBN * i8g::kBK;
  static constexpr int kStageBytes = kHalves * (kHalfA + kHalfB);
  // The epilogue's buffers, in the stages' memory: the warps' sums, a
  // window's column list and scan counts, a chunk's gathered columns.
  static constexpr int kSums = kWarps * kRows * kBN * 4;
  static constexpr int kList = kWindowWords * 32 * 4 + (kWarps + 1) * 4;
  static constexpr int kGather = kChunk * (kRows + kBN) * 8;
  static constexpr int kEpilogue = kSums + kList + kGather;
  static constexpr int smem(int ring) { return ring * kStageBytes > kEpilogue ? ring * kStageBytes : kEpilogue; }
};

struct RowsParams {
  const void* a;             // T [rows, K]: the activations
  const int8_t* q;           // [rows, K]: their codes, outlier columns as encoded
  const float* row_stats;    // [rows]
  const uint32_t* row_bits;  // [rows, words]: each row's outlier columns; null: none (threshold 0)
  const int8_t* b;           // [N, K]
  const float* b_stats;      // [N]
  const void* bias;          // [N] or null
  i8g::BiasType bias_type;
  void* out;  // T [rows, N]
  int64_t rows, N, K, words;
  int stages;  // K blocks of kStageK
  int ring;    // shared-memory stages, 4 .. kMaxStages
};

// The 16-byte chunks of a stage one thread copies for a tile of kR rows
// (two 128-byte K halves of each row): their offsets in the source (rows K
// bytes apart, stage 0) and in the stage, and whether their row is real.
template <int kR>
struct StageCopies {
  static constexpr int kPer = kHalves * kR * 8 / kThreads;
  static_assert(kPer >= 1 && kHalves * kR * 8 % kThreads == 0, "whole chunks a thread");
  int64_t src[kPer];
  int dst[kPer], k[kPer];
  bool real[kPer];

  __device__ __forceinline__ StageCopies(int64_t valid, int64_t K) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int idx = threadIdx.x + i * kThreads, h = idx / (kR * 8), r = idx / 8 % kR, c = idx % 8;
      k[i] = h * i8g::kBK + c * 16;
      src[i] = r * K + k[i];
      dst[i] = h * kR * i8g::kBK + tile_offset(r, c);
      real[i] = r < valid;
    }
  }

  // Stage j of the tile (src: row 0 of the tile) into dst; bytes past K are zeros.
  template <bool kAsync>
  __device__ __forceinline__ void copy(const int8_t* src_rows, int64_t K, int j, uint8_t* stage) const {
    const int64_t k0 = int64_t{j} * kStageK;
    const bool whole = k0 + kStageK <= K;
    const auto* s = reinterpret_cast<const uint8_t*>(src_rows);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int bytes = whole ? 16 : static_cast<int>(max(int64_t{0}, min(K - k0 - k[i], int64_t{16})));
      const bool in = real[i] && bytes > 0;
      copy_chunk<kAsync>(stage + dst[i], in ? s + src[i] + k0 : s, in ? bytes : 0);
    }
  }
};

// Waits until at most `pending` (0 .. kMaxStages - 2) of this thread's cp.async groups are in flight.
template <int kMost = kMaxStages - 2>
__device__ __forceinline__ void wait_pending(int pending) {
  if constexpr (kMost == 0) {
    ptx::cp_async_wait_group<0>();
  } else {
    if (pending >= kMost) return ptx::cp_async_wait_group<kMost>();
    wait_pending<kMost - 1>(pending);
  }
}

// Word wi of the rows' outlier bits ORed together (8 rows' loads in flight at once).
__device__ __forceinline__ uint32_t rows_bits(const RowsParams& p, int64_t wi) {
  uint32_t bits = 0;
  for (int64_t r0 = 0; r0 < p.rows; r0 += 8) {
    uint32_t v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = r0 + u < p.rows ? p.row_bits[(r0 + u) * p.words + wi] : 0u;
#pragma unroll
    for (int u = 0; u < 8; ++u) bits |= v[u];
  }
  return bits;
}

// Grid: ceil(N / 32) CTAs.
template <class T, int kTilesM, bool kAsync>
__global__ void __launch_bounds__(kThreads) int8_linear_rows_kernel(const RowsParams p) {
  using S = RowsTile<kTilesM>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int half = warp / 4, ks = warp % 4;  // this warp's 32 K bytes of each stage
  auto stage_a = [&](int s) { return smem + s * S::kStageBytes; };
  auto stage_b = [&](int s) { return smem + s * S::kStageBytes + kHalves * S::kHalfA; };
  const int8_t* b = p.b + n0 * p.K;
  const StageCopies<S::kRows> copies_a(p.rows, p.K);
  const StageCopies<kBN> copies_b(p.N - n0, p.K);

  // Groups: b's first stages one each, then a's first stages together, then one a K block.
  const int ring = p.ring;
  for (int s = 0; s < ring - 1; ++s) {
    if (s < p.stages) copies_b.template copy<kAsync>(b, p.K, s, stage_b(s));
    ptx::cp_async_commit_group();
  }
  ptx::griddepcontrol_wait();  // the codes, statistics and bits of the quantization
  for (int s = 0; s < ring - 1 && s < p.stages; ++s) copies_a.template copy<kAsync>(p.q, p.K, s, stage_a(s));
  ptx::cp_async_commit_group();
  // The epilogue's inputs, loaded while the products are summed: this
  // thread's outputs (columns kCols cg + c of rows r0 + 16 i), their
  // statistics, and the first window's bits (this thread's word).
  constexpr int kCols = kBN * 16 / kThreads;
  const int cg = threadIdx.x % (kBN / kCols), r0 = threadIdx.x / (kBN / kCols);
  float cs[kCols], rs[kTilesM];
#pragma unroll
  for (int c = 0; c < kCols; ++c) cs[c] = n0 + kCols * cg + c < p.N ? __ldg(p.b_stats + n0 + kCols * cg + c) : 0.0f;
#pragma unroll
  for (int i = 0; i < kTilesM; ++i) rs[i] = r0 + 16 * i < p.rows ? p.row_stats[r0 + 16 * i] : 0.0f;
  const bool outliers = p.row_bits != nullptr;
  const uint32_t first_bits = outliers && threadIdx.x < p.words ? rows_bits(p, threadIdx.x) : 0u;

  int32_t acc[kTilesM][4][4] = {};
  int slot = 0, next_slot = ring - 1;  // the ring's stages of K blocks j and j + ring - 1
  for (int j = 0; j < p.stages; ++j) {
    wait_pending(min(j, ring - 2));  // a's first stages came after the first stages of b
    __syncthreads();                 // K block j visible; every warp done with block j - 1's stage
    if (j + ring - 1 < p.stages) {
      copies_a.template copy<kAsync>(p.q, p.K, j + ring - 1, stage_a(next_slot));
      copies_b.template copy<kAsync>(b, p.K, j + ring - 1, stage_b(next_slot));
    }
    ptx::cp_async_commit_group();
    next_slot = next_slot + 1 == ring ? 0 : next_slot + 1;
    const uint8_t* sa = stage_a(slot) + half * S::kHalfA;
    const uint8_t* sb = stage_b(slot) + half * S::kHalfB;
    slot = slot + 1 == ring ? 0 : slot + 1;
    uint32_t af[kTilesM][4], bf[4][2];
#pragma unroll
    for (int i = 0; i < kTilesM; ++i) ldmatrix_a_k32(sa, 16 * i, ks, lane, af[i]);
    ldmatrix_b_k32(sb, 0, ks, lane, bf[0], bf[1]);
    ldmatrix_b_k32(sb, 16, ks, lane, bf[2], bf[3]);
#pragma unroll
    for (int i = 0; i < kTilesM; ++i) {
#pragma unroll
      for (int jn = 0; jn < 4; ++jn)
        ptx::mma_m16n8k32_s8(acc[i][jn], af[i][0], af[i][1], af[i][2], af[i][3], bf[jn][0], bf[jn][1]);
    }
  }
  ptx::cp_async_wait_group<0>();
  __syncthreads();  // the stages' memory is the epilogue's now

  // The warps' sums into shared memory ([warp][row][column]), then each
  // thread adds up its columns 2 cg, 2 cg + 1 of rows r0 + 16 i.
  auto* sums = reinterpret_cast<int32_t*>(smem);
  {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < kTilesM; ++i) {
#pragma unroll
      for (int jn = 0; jn < 4; ++jn) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          int32_t* row = sums + (warp * S::kRows + 16 * i + g + 8 * h) * kBN + 8 * jn + 2 * t;
          row[0] = acc[i][jn][2 * h];
          row[1] = acc[i][jn][2 * h + 1];
        }
      }
    }
  }
  __syncthreads();
  int32_t s[kTilesM][kCols];
  float f[kTilesM][kCols] = {};
#pragma unroll
  for (int i = 0; i < kTilesM; ++i) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      int32_t v = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += sums[(w * S::kRows + r0 + 16 * i) * kBN + kCols * cg + c];
      s[i][c] = v;
    }
  }

  int64_t listed = 0;
  if (outliers) {
    int* list = reinterpret_cast<int*>(smem + S::kSums);
    int* warp_counts = list + kWindowWords * 32;
    auto* qa = reinterpret_cast<int32_t*>(smem + S::kSums + S::kList);  // [kChunk][kRows]
    auto* av = reinterpret_cast<float*>(qa + kChunk * S::kRows);
    auto* qw = reinterpret_cast<int32_t*>(av + kChunk * S::kRows);  // [kChunk][kBN]
    auto* wv = reinterpret_cast<float*>(qw + kChunk * kBN);
    const T* a = static_cast<const T*>(p.a);
    const int64_t n_valid = p.N - n0;
    for (int64_t w0 = 0; w0 < p.words; w0 += kWindowWords) {
      const int64_t wi = w0 + threadIdx.x;
      uint32_t bits = w0 == 0 ? first_bits : wi < p.words ? rows_bits(p, wi) : 0u;
      int count = 0;
      int at = cta_exclusive_scan<kThreads>(__popc(bits), warp_counts, count);
      for (; bits != 0; bits &= bits - 1) list[at++] = static_cast<int>(wi * 32 + __ffs(bits) - 1);
      __syncthreads();  // the window's list
      for (int c0 = 0; c0 < count; c0 += kChunk) {
        const int len = min(kChunk, count - c0);
        for (int i = threadIdx.x; i < len * (S::kRows + kBN); i += kThreads) {
          const int j = i / (S::kRows + kBN), r = i % (S::kRows + kBN);
          const int64_t col = list[c0 + j];
          if (r < S::kRows) {
            const bool in = r < p.rows;
            qa[j * S::kRows + r] = in ? p.q[r * p.K + col] : 0;
            av[j * S::kRows + r] = in ? core::to_f32(a[r * p.K + col]) : 0.0f;
          } else {
            const int n = r - S::kRows;
            const bool in = n < n_valid;
            const int8_t code = in ? __ldg(b + n * p.K + col) : int8_t{0};
            qw[j * kBN + n] = code;
            wv[j * kBN + n] = in ? core::int8_decode(code, __ldg(p.b_stats + n0 + n)) : 0.0f;
          }
        }
        __syncthreads();
        for (int j = 0; j < len; ++j) {
#pragma unroll
          for (int i = 0; i < kTilesM; ++i) {
            const int32_t qa_r = qa[j * S::kRows + r0 + 16 * i];
            const float av_r = av[j * S::kRows + r0 + 16 * i];
#pragma unroll
            for (int c = 0; c < kCols; ++c) {
              s[i][c] -= qa_r * qw[j * kBN + kCols * cg + c];
              f[i][c] = core::int8_fp32_step(f[i][c], av_r, wv[j * kBN + kCols * cg + c]);
            }
          }
        }
        __syncthreads();  // the chunk's buffers are refilled next
      }
      listed += count;
    }
  }

  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int i = 0; i < kTilesM; ++i) {
    const int64_t m = r0 + 16 * i;
    if (m >= p.rows) continue;
    float v[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int64_t n = n0 + kCols * cg + c;
      v[c] = core::int8_mm_dequant_value(s[i][c], rs[i], cs[c]);
      if (p.bias != nullptr && n < p.N) v[c] = core::add_rn(v[c], i8g::bias_value(p.bias, p.bias_type, n));
    }
    T y[kCols];
    from_floats(v, y);
    if (listed > 0) {  // the outlier columns' fp32 sums on the rounded value, as the CPU adds them
#pragma unroll
      for (int c = 0; c < kCols; ++c) v[c] = core::add_rn(core::to_f32(y[c]), f[i][c]);
      from_floats(v, y);
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int64_t n = n0 + kCols * cg + c;
      if (n < p.N) out[m * p.N + n] = y[c];
    }
  }
}

// The most stages (4 .. kMaxStages) that let ceil(N / 32) CTAs stay on the SMs at once.
template <int kTilesM>
int ring_for(int64_t ctas, const char* op) {
  using S = RowsTile<kTilesM>;
  const int64_t per_sm = std::max<int64_t>(1, ceil_div(ctas, static_cast<int64_t>(sm_count(op))));
  const int64_t smem_sm = device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, op);
  const int64_t per_cta = smem_sm / per_sm - 1024;  // the driver's reserved kilobyte a CTA
  return static_cast<int>(std::clamp<int64_t>(per_cta / S::kStageBytes, 4, kMaxStages));
}

template <class T, int kTilesM, bool kAsync>
void launch_rows(RowsParams p, bool dependent, cudaStream_t stream) {
  const char* op = Int8LinearArgs::kName;
  auto* kernel = &int8_linear_rows_kernel<T, kTilesM, kAsync>;
  const int64_t ctas = ceil_div(p.N, kBN);
  p.ring = ring_for<kTilesM>(ctas, op);
  const int smem = RowsTile<kTilesM>::smem(p.ring);
  // Over 48 KB of dynamic shared memory needs the opt-in (a host-side attribute, capture-safe).
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), op,
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(ctas));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = dependent ? 1 : 0;
  check(cudaLaunchKernelEx(&config, kernel, p), op, "cudaLaunchKernelEx(int8_linear_rows)");
}

}  // namespace

KernelConfig int8_linear_rows_config(int64_t rows) {
  return KernelConfig{"rows_i8", rows <= 16 ? 16 : 32, kBN, kStageK, 0};  // the ring is picked per call
}

bool is_int8_linear_rows_config(const KernelConfig& config) { return config.family == "rows_i8"; }

void int8_linear_rows(const Int8LinearArgs& a, const int8_t* q, const float* row_stats, const uint32_t* row_bits,
                      cudaStream_t stream) {
  const char* op = Int8LinearArgs::kName;
  RowsParams p{};
  p.a = a.a.data;
  p.q = q;
  p.row_stats = row_stats;
  p.row_bits = row_bits;
  p.b = a.b.ptr<const int8_t>();
  p.b_stats = a.b_stats.ptr<const float>();
  p.bias = a.bias.present() ? a.bias.data : nullptr;
  p.bias_type = i8g::bias_type_of(a.bias);
  p.out = a.out.data;
  p.K = a.a.size(-1);
  p.rows = a.a.numel() / p.K;
  p.N = a.b.shape[0];
  p.words = ceil_div(p.K, int64_t{32});
  p.stages = static_cast<int>(ceil_div(p.K, int64_t{kStageK}));
  LOWBIT_REQUIRE(p.rows <= kInt8LinearRowsMax && ceil_div(p.N, kBN) <= INT32_MAX, ErrorCode::invalid_argument, op,
                 ": config '", int8_linear_rows_config(p.rows).name(), "' takes at most ", kInt8LinearRowsMax,
                 " rows of activations (got ", p.rows, ")");
  // cp.async where every 16-byte chunk is aligned: the codes (the workspace's start) and b, rows of whole chunks.
  const bool async = aligned16(q) && aligned16(p.b) && p.K % 16 == 0;
  const bool dependent = device_is_sm90(op);  // launched while the quantization runs
  with_float_type(a.a.dtype, op, "a", [&](auto t) {
    using T = decltype(t);
    if (p.rows <= 16) {
      async ? launch_rows<T, 1, true>(p, dependent, stream) : launch_rows<T, 1, false>(p, dependent, stream);
    } else {
      async ? launch_rows<T, 2, true>(p, dependent, stream) : launch_rows<T, 2, false>(p, dependent, stream);
    }
  });
}

}  // namespace lowbit::cuda
