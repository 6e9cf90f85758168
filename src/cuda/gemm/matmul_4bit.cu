// bitsandbytes matmul_4bit / gemv_4bit on CUDA (Matmul4bitArgs), straight on
// a 4-bit QuantState's own storage: W [N, K] flattened row-major, two codes a
// byte (the even element in the high nibble), absmax over blocks of the
// flattened W (blocks may cross rows), optionally double-quantized.
//
// The entry point picks one of three paths (matmul_4bit.cuh): the fused
// tensor-core kernel for small M, dequantize + cuBLASLt above, and this
// file's CUDA-core kernel for what neither takes. The CUDA-core kernel:
// out[m, n] = Σ_k A[m, k] · (table[code] · absmax[block]) (+ bias[n]), the
// weight computed in fp32 exactly as dequantize_4bit (and the CPU) does, fp32
// products and sums. A warp owns a row of W and kBM rows of A: its lanes walk
// the row's 8-element chunks (aligned in the flattened W, so a chunk lies in
// one absmax block: blocks are multiples of 32) and the warp adds the lanes'
// sums.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/check.h"
#include "core/quant_math.h"
#include "core/tables.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/gemm/matmul_4bit.cuh"
#include "cuda/gemm/ops.h"

namespace lowbit::cuda {
namespace bnb4 {
namespace {

const char* const op = Matmul4bitArgs::kName;

// The fused kernel up to this M; dequantize + cuBLASLt above. On an H100
// over the Llama projection shapes the fused kernel was faster at every M up
// to 64 and the GEMM path at 128 (docs/gemm.md).
constexpr int64_t kFusedMaxM = 64;

struct CoreParams {
  const void* A = nullptr;
  FloatKind a_kind = FloatKind::f32;
  const uint8_t* packed = nullptr;
  const float* absmax = nullptr;     // f32 [blocks], or null when nested
  const uint8_t* qabsmax = nullptr;  // nested: u8 [blocks]
  const float* code2 = nullptr;      // nested: f32 [256]
  const float* absmax2 = nullptr;    // nested: f32 [blocks / blocksize2]
  const float* offset = nullptr;     // nested: f32 [1]
  int64_t blocksize2 = 256;
  const void* bias = nullptr;
  FloatKind bias_kind = FloatKind::f32;
  void* out = nullptr;
  FloatKind out_kind = FloatKind::f32;
  int64_t M = 0, N = 0, K = 0, blocksize = 64;
  float table[16] = {};
};

constexpr int kWarps = 8;  // rows of W a block
constexpr int kBM = 4;     // rows of A a warp carries

__global__ void __launch_bounds__(32 * kWarps) cuda_core_kernel(const CoreParams p) {
  __shared__ float table[16];
  if (threadIdx.x < 16) table[threadIdx.x] = p.table[threadIdx.x];
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (n >= p.N) return;
  const int64_t total = p.N * p.K;
  const int64_t row_begin = n * p.K, row_end = row_begin + p.K;
  const int64_t c_first = row_begin / 8, c_last = (row_end - 1) / 8;
  for (int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM; m0 < p.M; m0 += static_cast<int64_t>(gridDim.y) * kBM) {
    float acc[kBM] = {};
    for (int64_t c = c_first + lane; c <= c_last; c += 32) {
      const int64_t e0 = 8 * c;
      const int64_t b = e0 / p.blocksize;
      const float scale =
          p.qabsmax ? core::nested_absmax_decode(p.code2[p.qabsmax[b]], p.absmax2[b / p.blocksize2], p.offset[0])
                    : p.absmax[b];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t e = e0 + j;
        if (e < row_begin || e >= row_end || e >= total) continue;
        const uint32_t byte = __ldg(p.packed + e / 2);
        const uint32_t code = (j % 2 == 0) ? byte >> 4 : byte & 0xfu;
        const float w = __fmul_rn(table[code], scale);  // dequantize_4bit's value, bit for bit
        const int64_t k = e - row_begin;
#pragma unroll
        for (int t = 0; t < kBM; ++t) {
          if (m0 + t < p.M) acc[t] = fmaf(load_float(p.A, (m0 + t) * p.K + k, p.a_kind), w, acc[t]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kBM; ++t) {
      float v = acc[t];
#pragma unroll
      for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
      if (lane != 0 || m0 + t >= p.M) continue;
      if (p.bias) v = __fadd_rn(v, load_float(p.bias, n, p.bias_kind));
      store_float(p.out, (m0 + t) * p.N + n, p.out_kind, v);
    }
  }
}

// Null when the path runs these arguments, else why not.
const char* cannot_run(const Matmul4bitArgs& a, Path path) {
  switch (path) {
    case kFused: return fused_fits(a) ? nullptr : "the fused kernel does not take these dtypes, K or alignment";
    case kDequantGemm: return dequant_gemm_fits(a) ? nullptr : "cuBLASLt has no GEMM from A's dtype to out's";
    default: return nullptr;
  }
}

// The heuristic: the fused kernel for small M, dequantize + cuBLASLt above.
Path heuristic_path(const Matmul4bitArgs& a) {
  const bool fused = fused_fits(a), gemm = dequant_gemm_fits(a);
  if (fused && rows_of(a) <= kFusedMaxM) return kFused;
  if (gemm) return kDequantGemm;
  return fused ? kFused : kCudaCore;
}

// The path for these arguments: the forced one (an error where it cannot
// run), else the heuristic's.
Path path_of(const Matmul4bitArgs& a) {
  if (a.config.empty()) return heuristic_path(a);
  const std::string name = a.config.name();
  for (int i = 0; i < kNumPaths; ++i) {
    if (name != kPathNames[i]) continue;
    const char* why = cannot_run(a, static_cast<Path>(i));
    LOWBIT_REQUIRE(why == nullptr, ErrorCode::invalid_argument, op, ": config '", kPathNames[i],
                   "' cannot run here: ", why);
    return static_cast<Path>(i);
  }
  core::fail(ErrorCode::invalid_argument,
             core::cat(op, ": config '", name, "' is not a cuda path (fused, dequant_gemm or cuda_core)"));
}

}  // namespace

void run_cuda_core(const Matmul4bitArgs& a, cudaStream_t stream) {
  CoreParams p;
  p.A = a.A.data;
  p.a_kind = kind_of(a.A.dtype);
  p.packed = a.packed.ptr<const uint8_t>();
  if (a.nested.present()) {
    p.qabsmax = a.absmax.ptr<const uint8_t>();
    p.code2 = a.nested.code.ptr<const float>();
    p.absmax2 = a.nested.absmax.ptr<const float>();
    p.offset = a.nested.offset.ptr<const float>();
    p.blocksize2 = a.nested.blocksize;
  } else {
    p.absmax = a.absmax.ptr<const float>();
  }
  if (a.bias.present()) {
    p.bias = a.bias.data;
    p.bias_kind = kind_of(a.bias.dtype);
  }
  p.out = a.out.data;
  p.out_kind = kind_of(a.out.dtype);
  p.K = a.A.size(-1);
  p.M = rows_of(a);
  p.N = a.N;
  p.blocksize = a.blocksize;
  const float* t = a.type == Quant4Type::nf4 ? core::kNf4Table : core::kFp4Table;
  std::copy(t, t + 16, p.table);
  LOWBIT_REQUIRE(ceil_div(p.N, int64_t{kWarps}) <= (int64_t{1} << 31) - 1, ErrorCode::invalid_argument, op,
                 ": N = ", p.N, " is too large for cuda");
  const dim3 grid(static_cast<unsigned>(ceil_div(p.N, int64_t{kWarps})),
                  static_cast<unsigned>(std::min<int64_t>(ceil_div(p.M, int64_t{kBM}), 65535)));
  cuda_core_kernel<<<grid, 32 * kWarps, 0, stream>>>(p);
  check_launch(op, "cuda_core_kernel");
}

}  // namespace bnb4

void matmul_4bit(const Matmul4bitArgs& a, void* workspace, Stream stream) {
  if (a.A.numel() == 0) return;
  DeviceGuard guard(a.A.device.index, Matmul4bitArgs::kName);
  switch (bnb4::path_of(a)) {
    case bnb4::kFused: bnb4::run_fused(a, to_cuda(stream)); break;
    case bnb4::kDequantGemm: bnb4::run_dequant_gemm(a, workspace, to_cuda(stream)); break;
    default: bnb4::run_cuda_core(a, to_cuda(stream)); break;
  }
}

size_t matmul_4bit_workspace(const Matmul4bitArgs& a) {
  if (a.A.numel() == 0 || bnb4::path_of(a) != bnb4::kDequantGemm) return 0;
  return bnb4::dequant_gemm_workspace(a);
}

std::vector<KernelConfig> matmul_4bit_configs(const Matmul4bitArgs& a) {
  if (a.A.numel() == 0) return {};  // no rows: nothing runs
  DeviceGuard guard(a.A.device.index, Matmul4bitArgs::kName);
  const bnb4::Path first = bnb4::heuristic_path(a);
  std::vector<KernelConfig> out{{bnb4::kPathNames[first]}};
  for (int i = 0; i < bnb4::kNumPaths; ++i) {
    if (i != first && bnb4::cannot_run(a, static_cast<bnb4::Path>(i)) == nullptr) out.push_back({bnb4::kPathNames[i]});
  }
  return out;
}

}  // namespace lowbit::cuda
