// int8_linear_grad_input on CUDA (LLM.int8's input gradient, docs/int8.md):
// grad_a[m, k] = sum over ascending n of grad_out[m, n] * w[n, k], w the
// dequantized weight (int8_decode of b[n, k] with b_stats[n]), each product
// and sum rounded in fp32 (int8_fp32_step), one rounding to the output: the
// CPU's steps, so the bits are the CPU's.
//
// A CTA owns kRows rows by kThreads columns of grad_a, a thread a column:
// it loads its column's 32 codes of a round at once (coalesced bytes, all
// in flight) and decodes each once for all kRows rows, whose grad_out
// values (and the round's b_stats) go through shared memory. Each output is
// a chain of N dependent steps, so the work is spread as thin as it takes
// to give every SM threads: 4 rows by 128 columns a CTA up to a few
// thousand rows x columns, 16 by 256 beyond.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/float_convert.h"
#include "core/quant_math.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/gemm/ops.h"

namespace lowbit::cuda {
namespace {

constexpr int kChunk = 32;  // values of n a shared-memory round

template <class T, int kRows, int kThreads>
__global__ void __launch_bounds__(kThreads) int8_grad_input_tiles(const T* g, const int8_t* b, const float* b_stats,
                                                                  int64_t rows, int64_t N, int64_t K, T* out) {
  static_assert(kRows % 4 == 0, "rows by 4: one 16-byte shared load a step of 4 rows");
  // [n][row], rows padded by 4: 16-byte aligned rows whose transposing writes spread over the banks.
  __shared__ __align__(16) float gs[kChunk][kRows + 4];
  __shared__ float ss[kChunk];  // b_stats of the round
  const int64_t k = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  for (int64_t m0 = static_cast<int64_t>(blockIdx.y) * kRows; m0 < rows;
       m0 += static_cast<int64_t>(gridDim.y) * kRows) {
    float acc[kRows] = {};
    for (int64_t n0 = 0; n0 < N; n0 += kChunk) {
      const int count = static_cast<int>(min(static_cast<int64_t>(kChunk), N - n0));
      // This column's codes of the round, all loads in flight at once (each step's chain waits on none).
      int8_t q[kChunk];
#pragma unroll
      for (int j = 0; j < kChunk; ++j) q[j] = k < K && j < count ? __ldg(b + (n0 + j) * K + k) : int8_t{0};
      __syncthreads();  // the previous round's reads are done
      for (int i = threadIdx.x; i < kChunk * kRows; i += kThreads) {
        const int r = i / kChunk, j = i % kChunk;  // consecutive threads: consecutive n of a row
        const int64_t m = m0 + r, n = n0 + j;
        gs[j][r] = m < rows && n < N ? core::to_f32(g[m * N + n]) : 0.0f;
      }
      if (threadIdx.x < kChunk) ss[threadIdx.x] = threadIdx.x < count ? b_stats[n0 + threadIdx.x] : 0.0f;
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        if (j < count) {
          const float w = core::int8_decode(q[j], ss[j]);
#pragma unroll
          for (int r = 0; r < kRows; r += 4) {
            const float4 gv = *reinterpret_cast<const float4*>(&gs[j][r]);
            acc[r] = core::int8_fp32_step(acc[r], gv.x, w);
            acc[r + 1] = core::int8_fp32_step(acc[r + 1], gv.y, w);
            acc[r + 2] = core::int8_fp32_step(acc[r + 2], gv.z, w);
            acc[r + 3] = core::int8_fp32_step(acc[r + 3], gv.w, w);
          }
        }
      }
    }
    if (k < K) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (m0 + r < rows) out[(m0 + r) * K + k] = core::from_f32<T>(acc[r]);
      }
    }
  }
}

}  // namespace

void int8_linear_grad_input(const Int8LinearGradInputArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = Int8LinearGradInputArgs::kName;
  // Rows from grad_a: N may be 0 (grad_a is then zeros).
  const int64_t N = a.b.shape[0], K = a.b.shape[1], rows = K == 0 ? 0 : a.grad_a.numel() / K;
  if (rows == 0) return;
  DeviceGuard guard(a.grad_out.device.index, op);
  with_float_type(a.grad_out.dtype, op, "grad_out", [&](auto t) {
    using T = decltype(t);
    const auto launch = [&](auto kernel, int rows_a_cta, int threads) {
      const int64_t strips = ceil_div(K, static_cast<int64_t>(threads));
      LOWBIT_REQUIRE(strips <= INT32_MAX, ErrorCode::invalid_argument, op, ": K too large for the cuda kernel's grid (",
                     K, ")");
      const dim3 grid(static_cast<unsigned>(strips),
                      static_cast<unsigned>(std::min<int64_t>(ceil_div(rows, rows_a_cta), 65535)));
      kernel<<<grid, threads, 0, to_cuda(stream)>>>(a.grad_out.ptr<const T>(), a.b.ptr<const int8_t>(),
                                                    a.b_stats.ptr<const float>(), rows, N, K, a.grad_a.ptr<T>());
      check_launch(op, "int8_grad_input_tiles");
    };
    // Thin CTAs until the outputs give each SM a few thousand threads.
    if (rows * K <= int64_t{4096} * sm_count(op)) {
      launch(&int8_grad_input_tiles<T, 4, 128>, 4, 128);
    } else {
      launch(&int8_grad_input_tiles<T, 16, 256>, 16, 256);
    }
  });
}

}  // namespace lowbit::cuda
