// matmul_4bit's fused path: a tensor-core GEMV / small GEMM straight on
// bitsandbytes' packed 4-bit codes (fp16/bf16 A, K a multiple of 32).
//
// Memory-bound: every byte of codes is read once, in 8- or 4-byte loads, and
// decoded in registers; the activations come through L1 (every block reads
// the same rows of A).
//
// Work split. A block owns 16 rows of W (one m16 tile of mma.m16n8k16, the
// rows of W in the MMA's M) and 8·kMT rows of A (the MMA's N); its 8 warps
// split K, interleaved by span, and add their sums in shared memory at the end
// in a fixed order (deterministic). A span is kSpan = 8·kLB consecutive
// elements of a row: lane (g, c) = (lane / 4, lane % 4) loads kLB bytes of
// rows g and g + 8 at byte kLB·c of the span, so a warp-wide load covers each
// row's span whole (one 32-byte sector for kLB = 8).
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

// kLB: bytes of codes a lane loads per row and span (8 or 4).
// kMT: n8 tiles of A rows a block carries (M up to 8·kMT per block).
template <class T, int kLB, int kMT>
__global__ void __launch_bounds__(kThreads) fused_kernel(const FusedParams p) {
  constexpr int kSpan = 8 * kLB;          // elements of a row per span
  constexpr int kSteps = kLB / 2;         // m16n8k16 steps per span
  constexpr int kWords = kLB / 4;         // code words a lane loads per row and span
  constexpr int kAWords = kLB;            // A words (pairs) a lane loads per span and n8 tile
  constexpr int kU = kMT == 1 ? 4 : 2;    // spans a warp has in flight
  // [256 bytes][32 lanes] value pairs; then [kWarps][8·kMT][16] partial sums.
  __shared__ __align__(16) uint32_t smem[256 * 32];
  __shared__ float values[16];
  static_assert(kWarps * 8 * kMT * kRows <= 256 * 32, "the sums fit where the table was");

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
  const int64_t spans = p.K / kSpan;

  float acc[kMT][4] = {};
  for (int64_t s0 = warp; s0 < spans; s0 += kWarps * kU) {
    uint32_t codes_a[kU][kWords], codes_b[kU][kWords], act[kU][kMT][kAWords];
    float scale_a[kU], scale_b[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t s = s0 + static_cast<int64_t>(u) * kWarps;
      const bool live = s < spans;
      if constexpr (kLB == 8) {
        const uint2 x = live ? __ldg(reinterpret_cast<const uint2*>(w_a + s * (kSpan / 2))) : make_uint2(0, 0);
        const uint2 y = live ? __ldg(reinterpret_cast<const uint2*>(w_b + s * (kSpan / 2))) : make_uint2(0, 0);
        codes_a[u][0] = x.x;
        codes_a[u][1] = x.y;
        codes_b[u][0] = y.x;
        codes_b[u][1] = y.y;
      } else {
        codes_a[u][0] = live ? __ldg(reinterpret_cast<const uint32_t*>(w_a + s * (kSpan / 2))) : 0u;
        codes_b[u][0] = live ? __ldg(reinterpret_cast<const uint32_t*>(w_b + s * (kSpan / 2))) : 0u;
      }
      scale_a[u] = live ? p.absmax((e_a + s * kSpan) >> p.log2_block) : 0.0f;
      scale_b[u] = live ? p.absmax((e_b + s * kSpan) >> p.log2_block) : 0.0f;
#pragma unroll
      for (int t = 0; t < kMT; ++t) {
#pragma unroll
        for (int q = 0; q < kAWords / 4; ++q) {
          const uint4 v = live && a_row[t] ? __ldg(reinterpret_cast<const uint4*>(a_row[t] + s * kSpan) + q)
                                           : make_uint4(0, 0, 0, 0);
          act[u][t][4 * q] = v.x;
          act[u][t][4 * q + 1] = v.y;
          act[u][t][4 * q + 2] = v.z;
          act[u][t][4 * q + 3] = v.w;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (s0 + static_cast<int64_t>(u) * kWarps >= spans) break;  // warp-uniform
      float part[kMT][4] = {};
#pragma unroll
      for (int j = 0; j < kSteps; ++j) {
        const uint32_t a0 = tab[code_byte(codes_a[u], 2 * j) * 32];
        const uint32_t a1 = tab[code_byte(codes_b[u], 2 * j) * 32];
        const uint32_t a2 = tab[code_byte(codes_a[u], 2 * j + 1) * 32];
        const uint32_t a3 = tab[code_byte(codes_b[u], 2 * j + 1) * 32];
#pragma unroll
        for (int t = 0; t < kMT; ++t) {
          gemm::mma16816<T>(part[t], a0, a1, a2, a3, act[u][t][2 * j], act[u][t][2 * j + 1]);
        }
      }
#pragma unroll
      for (int t = 0; t < kMT; ++t) {
        acc[t][0] = fmaf(part[t][0], scale_a[u], acc[t][0]);
        acc[t][1] = fmaf(part[t][1], scale_a[u], acc[t][1]);
        acc[t][2] = fmaf(part[t][2], scale_b[u], acc[t][2]);
        acc[t][3] = fmaf(part[t][3], scale_b[u], acc[t][3]);
      }
    }
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

template <class T, int kLB>
void launch(const FusedParams& p, cudaStream_t stream) {
  const int64_t row_tiles = ceil_div(p.N, int64_t{kRows});
  if (p.M <= 8) {
    fused_kernel<T, kLB, 1><<<dim3(1, static_cast<unsigned>(row_tiles)), kThreads, 0, stream>>>(p);
  } else {
    const int64_t m_tiles = ceil_div(p.M, int64_t{16});
    fused_kernel<T, kLB, 2>
        <<<dim3(static_cast<unsigned>(m_tiles), static_cast<unsigned>(row_tiles)), kThreads, 0, stream>>>(p);
  }
  check_launch(op, "fused_kernel");
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
