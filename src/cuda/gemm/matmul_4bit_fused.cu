// matmul_4bit's fused path: a tensor-core GEMV / small GEMM straight on
// bitsandbytes' packed 4-bit codes (fp16/bf16 A, K a multiple of 32).
//
// Memory-bound: every byte of codes is read once, in 8- or 4-byte loads, and
// decoded in registers; the activations come through L1 (every block reads
// the same rows of A).
//
// Work split. A block owns 16 rows of W (one m16 tile of mma.m16n8k16, the
// rows of W in the MMA's M) and 8·kMT rows of A (the MMA's N; A tiles of 8,
// 16 or 32 rows, more blocks past 32); its 8 warps split K into contiguous
// ranges of spans and add their sums in shared memory at the end in a fixed
// order (deterministic). A span is kSpan = 8·kLB consecutive elements of a
// row: lane (g, c) = (lane / 4, lane % 4) loads kLB bytes of rows g and g + 8
// at byte kLB·c of the span, so a warp-wide load covers each row's span whole
// (one 32-byte sector for kLB = 8).
//
// Fragment order. Byte 2j of a lane's span (elements 4j and 4j + 1, the even
// one in the high nibble) is the lane's pair of k slots (2c, 2c + 1) in MMA
// step j, byte 2j + 1 its slots (2c + 8, 2c + 9): so step j's sixteen k slots
// are elements 2kLB·c + 4j + {0..3} for c = 0..3, and the B fragment of step j
// is the activations' 32-bit words 2j and 2j + 1 of the lane's 2kLB elements.
// A byte becomes its two slots by one shared-memory load from a 256-entry
// table of value pairs, one copy per lane (no bank conflicts).
//
// Scaling. All sixteen k slots of a step lie in one span, and a span lies in
// one absmax block (the span is aligned in the flattened W and no longer than
// a block: kLB = 8 needs blocks of 64 or more, kLB = 4 takes 32), so the MMAs
// of a span multiply table values and their sum is scaled once per row:
// out += Σ_span absmax · (A · table[code]) in fp32. The table values are
// rounded to A's dtype (MMA operands); the rest is fp32.
#include <cuda_runtime.h>

#include "core/check.h"
#include "core/tables.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx/copy.cuh"
#include "cuda/gemm/matmul_4bit.cuh"
#include "cuda/gemm/mma.cuh"
#include "cuda/quant/dequantize.cuh"

namespace lowbit::cuda::bnb4 {
namespace {

using gemm::BF16;
using gemm::F16;

const char* const op = Matmul4bitArgs::kName;

constexpr int kWarps = 8;  // split K within a block
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16;  // rows of W a block (the MMA's M)

struct FusedParams {
  const uint16_t* A = nullptr;  // [M, K] fp16/bf16
  const uint8_t* packed = nullptr;
  AbsmaxSource absmax{};
  int log2_block = 6;
  const void* bias = nullptr;
  FloatKind bias_kind = FloatKind::f32;
  void* out = nullptr;
  FloatKind out_kind = FloatKind::f16;
  int64_t M = 0, N = 0, K = 0;
  float table[16] = {};
};

// Byte i of a span's code words.
template <int kWords>
__device__ __forceinline__ uint32_t code_byte(const uint32_t (&w)[kWords], int i) {
  return (w[i / 4] >> (8 * (i % 4))) & 0xffu;
}

// Codes are read once: past L1 (it keeps A and the absmax). Volatile keeps
// each batch's loads ahead of the MMAs of the batch before it.
template <int kLB>
__device__ __forceinline__ void load_codes(const uint8_t* p, uint32_t (&w)[kLB / 4]) {
  if constexpr (kLB == 8) {
    ptx::ld_global_nc_na_v2(w, p);
  } else {
    ptx::ld_global_nc_na_u32(w[0], p);
  }
}

// Blocks an SM should hold (registers) per kMT.
template <int kMT>
inline constexpr int kMinBlocks = kMT == 1 ? 3 : 2;

// Spans of codes a batch holds: two batches per warp, one in flight while
// the other is multiplied.
constexpr int kU = 4;

// A batch: the codes of kU spans of a lane's two rows, and the absmax of
// span c of the group (lane c of a row loads one, the lanes swap them).
template <int kLB>
struct Batch {
  uint32_t a[kU][kLB / 4], b[kU][kLB / 4];
  AbsmaxSource::Fetched scale_a, scale_b;  // finished in multiply: the nested lookup waits for nothing in load
};

// kLB: bytes of codes a lane loads per row and span (8 or 4).
// kMT: n8 tiles of A rows a block carries (M up to 8·kMT per block).
// A warp walks its own contiguous range of spans in batches of kU, loading
// the next batch before multiplying the current one (the first before the
// table is filled); lane c loads the absmax of span c of a batch for its two
// rows (one nested decode per four spans) and the lanes of a row swap them
// by shuffles.
template <class T, int kLB, int kMT>
__global__ void __launch_bounds__(kThreads, kMinBlocks<kMT>) fused_kernel(const FusedParams p) {
  constexpr int kSpan = 8 * kLB;         // elements of a row per span
  constexpr int kSteps = kLB / 2;        // m16n8k16 steps per span
  constexpr int kWords = kLB / 4;        // code words a lane loads per row and span
  constexpr int kAWords = kLB;           // A words (pairs) a lane loads per span and n8 tile
  static_assert(kU == 4, "a batch's four scales sit in the four lanes of a row");
  // [256 bytes][32 lanes] value pairs; then [kWarps][8·kMT][16] partial sums.
  __shared__ __align__(16) uint32_t smem[256 * 32];
  __shared__ float values[16];
  static_assert(kWarps * 8 * kMT * kRows <= 256 * 32, "the sums fit where the table was");

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * 8 * kMT;
  // Rows past N repeat the last row; their sums are never stored.
  const int64_t row_a = min(n0 + g, p.N - 1), row_b = min(n0 + g + 8, p.N - 1);
  const int64_t e_a = row_a * p.K, e_b = row_b * p.K;  // flattened index of the rows' first elements
  const uint8_t* w_a = p.packed + e_a / 2 + kLB * c;
  const uint8_t* w_b = p.packed + e_b / 2 + kLB * c;
  const uint16_t* a_row[kMT];
#pragma unroll
  for (int t = 0; t < kMT; ++t) {
    const int64_t m = m0 + 8 * t + g;
    a_row[t] = m < p.M ? p.A + m * p.K + 2 * kLB * c : nullptr;
  }
  const uint32_t* tab = smem + lane;
  // This warp's spans: whole batches.
  const int64_t spans = p.K / kSpan;
  const int64_t per_warp = (spans + kU * kWarps - 1) / (kU * kWarps) * kU;
  const int64_t begin = warp * per_warp, end = min(spans, begin + per_warp);

  auto load = [&](Batch<kLB>& x, int64_t s0) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t s = s0 + u;
      if (s < end) {
        load_codes<kLB>(w_a + s * (kSpan / 2), x.a[u]);
        load_codes<kLB>(w_b + s * (kSpan / 2), x.b[u]);
      } else {
#pragma unroll
        for (int q = 0; q < kWords; ++q) x.a[u][q] = x.b[u][q] = 0u;
      }
    }
    const int64_t s = s0 + c;
    x.scale_a = s < end ? p.absmax.fetch((e_a + s * kSpan) >> p.log2_block) : AbsmaxSource::Fetched{};
    x.scale_b = s < end ? p.absmax.fetch((e_b + s * kSpan) >> p.log2_block) : AbsmaxSource::Fetched{};
  };

  float acc[kMT][4] = {};
  auto multiply = [&](const Batch<kLB>& x, int64_t s0) {
    const float lane_scale_a = p.absmax.finish(x.scale_a), lane_scale_b = p.absmax.finish(x.scale_b);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (s0 + u >= end) break;  // warp-uniform
      const int64_t s = s0 + u;
      uint32_t act[kMT][kAWords];
#pragma unroll
      for (int t = 0; t < kMT; ++t) {
#pragma unroll
        for (int q = 0; q < kAWords / 4; ++q) {
          const uint4 v = a_row[t] ? __ldg(reinterpret_cast<const uint4*>(a_row[t] + s * kSpan) + q)
                                   : make_uint4(0, 0, 0, 0);
          act[t][4 * q] = v.x;
          act[t][4 * q + 1] = v.y;
          act[t][4 * q + 2] = v.z;
          act[t][4 * q + 3] = v.w;
        }
      }
      float part[kMT][4] = {};
#pragma unroll
      for (int j = 0; j < kSteps; ++j) {
        const uint32_t a0 = tab[code_byte(x.a[u], 2 * j) * 32];
        const uint32_t a1 = tab[code_byte(x.b[u], 2 * j) * 32];
        const uint32_t a2 = tab[code_byte(x.a[u], 2 * j + 1) * 32];
        const uint32_t a3 = tab[code_byte(x.b[u], 2 * j + 1) * 32];
#pragma unroll
        for (int t = 0; t < kMT; ++t) gemm::mma_m16n8k16<T>(part[t], a0, a1, a2, a3, act[t][2 * j], act[t][2 * j + 1]);
      }
      const int from = (lane & ~3) | u;
      const float scale_a = __shfl_sync(0xffffffffu, lane_scale_a, from);
      const float scale_b = __shfl_sync(0xffffffffu, lane_scale_b, from);
#pragma unroll
      for (int t = 0; t < kMT; ++t) {
        acc[t][0] = fmaf(part[t][0], scale_a, acc[t][0]);
        acc[t][1] = fmaf(part[t][1], scale_a, acc[t][1]);
        acc[t][2] = fmaf(part[t][2], scale_b, acc[t][2]);
        acc[t][3] = fmaf(part[t][3], scale_b, acc[t][3]);
      }
    }
  };

  Batch<kLB> x, y;
  load(x, begin);

  if (threadIdx.x < 16) values[threadIdx.x] = p.table[threadIdx.x];
  __syncthreads();
  // Word i is byte i / 32's pair for lane i % 32; consecutive threads store
  // consecutive 16 bytes (no bank conflicts).
  for (int i = threadIdx.x * 4; i < 256 * 32; i += kThreads * 4) {
    const int b = i >> 5;
    const uint32_t v = gemm::pack2<T>(values[b >> 4], values[b & 15]);  // the even element (high nibble) low
    *reinterpret_cast<uint4*>(smem + i) = make_uint4(v, v, v, v);
  }
  __syncthreads();

  for (int64_t s0 = begin; s0 < end; s0 += 2 * kU) {
    load(y, s0 + kU);
    multiply(x, s0);
    load(x, s0 + 2 * kU);
    multiply(y, s0 + kU);
  }

  // The warps' sums: [warp][column of the block's A rows][row of W].
  __syncthreads();  // every warp is done with the table
  float* sums = reinterpret_cast<float*>(smem);
  constexpr int kCols = 8 * kMT;
#pragma unroll
  for (int t = 0; t < kMT; ++t) {
    float* base = sums + (warp * kCols + 8 * t + 2 * c) * kRows;
    base[g] = acc[t][0];
    base[kRows + g] = acc[t][1];
    base[g + 8] = acc[t][2];
    base[kRows + g + 8] = acc[t][3];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kCols * kRows; i += kThreads) {
    const int col = i / kRows, r = i % kRows;
    const int64_t m = m0 + col, n = n0 + r;
    if (m >= p.M || n >= p.N) continue;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += sums[(w * kCols + col) * kRows + r];
    if (p.bias) v = __fadd_rn(v, load_float(p.bias, n, p.bias_kind));
    store_float(p.out, m * p.N + n, p.out_kind, v);
  }
}

// Bytes of codes a lane loads per row and span: 8 where spans of 64 fit K and
// the blocks, else 4 (spans of 32: any K multiple of 32, any blocksize).
int span_bytes(const Matmul4bitArgs& a) { return a.A.size(-1) % 64 == 0 && a.blocksize >= 64 ? 8 : 4; }

template <class T, int kLB, int kMT>
void launch_tiles(const FusedParams& p, cudaStream_t stream) {
  const int64_t m_tiles = ceil_div(p.M, int64_t{8 * kMT});
  const dim3 grid(static_cast<unsigned>(m_tiles), static_cast<unsigned>(ceil_div(p.N, int64_t{kRows})));
  fused_kernel<T, kLB, kMT><<<grid, kThreads, 0, stream>>>(p);
  check_launch(op, "fused_kernel");
}

// A tiles of 8, 16 or 32 rows: the fewest that hold M (up to 32).
template <class T, int kLB>
void launch(const FusedParams& p, cudaStream_t stream) {
  if (p.M <= 8) {
    launch_tiles<T, kLB, 1>(p, stream);
  } else if (p.M <= 16) {
    launch_tiles<T, kLB, 2>(p, stream);
  } else {
    launch_tiles<T, kLB, 4>(p, stream);
  }
}

}  // namespace

bool fused_fits(const Matmul4bitArgs& a) {
  if (a.A.dtype != DType::f16 && a.A.dtype != DType::bf16) return false;
  const int64_t K = a.A.size(-1);
  // Row tiles go in grid.y (at most 65535), A row tiles in grid.x.
  if (K % 32 != 0 || ceil_div(a.N, int64_t{kRows}) > 65535 || ceil_div(rows_of(a), int64_t{8}) > (int64_t{1} << 31) - 1)
    return false;
  const auto addr = [](const void* q) { return reinterpret_cast<uintptr_t>(q); };
  return addr(a.A.data) % 16 == 0 && addr(a.packed.data) % static_cast<uintptr_t>(span_bytes(a)) == 0;
}

void run_fused(const Matmul4bitArgs& a, cudaStream_t stream) {
  FusedParams p;
  p.A = a.A.ptr<const uint16_t>();
  p.packed = a.packed.ptr<const uint8_t>();
  Dequantize4bitArgs source;  // AbsmaxSource reads the absmax and nested state as dequantize_4bit does
  source.absmax = a.absmax;
  source.nested = a.nested;
  p.absmax = absmax_source(source);
  p.log2_block = log2_exact(a.blocksize);
  if (a.bias.present()) {
    p.bias = a.bias.data;
    p.bias_kind = kind_of(a.bias.dtype);
  }
  p.out = a.out.data;
  p.out_kind = kind_of(a.out.dtype);
  p.K = a.A.size(-1);
  p.M = rows_of(a);
  p.N = a.N;
  const float* t = a.type == Quant4Type::nf4 ? core::kNf4Table : core::kFp4Table;
  for (int i = 0; i < 16; ++i) p.table[i] = t[i];
  const bool f16 = a.A.dtype == DType::f16;
  if (span_bytes(a) == 8) {
    f16 ? launch<F16, 8>(p, stream) : launch<BF16, 8>(p, stream);
  } else {
    f16 ? launch<F16, 4>(p, stream) : launch<BF16, 4>(p, stream);
  }
}

}  // namespace lowbit::cuda::bnb4
