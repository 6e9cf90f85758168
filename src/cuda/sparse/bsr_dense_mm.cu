// bsr_dense_addmm on CUDA (lowbit/ops/sparse.h, docs/sparse.md): the
// broadcast of batch dims and of input resolved on the host, then one launch:
// bsr_wgmma on sm_90a where blocks are 64 or 128 rows by a multiple of 64,
// else bsr_tiles where the operands fit the tensor cores, else bsr_generic.
// No workspace, no synchronization: the index arrays are checked by the
// kernels (bsr_tiles.cuh, bsr_wgmma.cuh).
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/broadcast.h"
#include "core/check.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/tma.h"
#include "cuda/sparse/bsr_tiles.cuh"
#include "cuda/sparse/bsr_wgmma.cuh"
#include "cuda/sparse/ops.h"

namespace lowbit::cuda {
namespace {

using sparse::BsrParams;
using sparse::BsrTileShape;
using sparse::BsrWgmmaShape;

BsrParams params_of(const BsrDenseAddmmArgs& a) {
  const char* op = BsrDenseAddmmArgs::kName;
  const BsrRef& b = a.bsr;
  BsrParams p{};
  p.values = b.values.data;
  p.crow = b.crow_indices.data;
  p.col = b.col_indices.data;
  p.index64 = b.crow_indices.dtype == DType::i64;
  p.dense = a.dense.data;
  p.out = a.out.data;
  p.nnz = b.values.size(-3);
  p.BM = static_cast<int>(b.values.size(-2));
  p.BK = static_cast<int>(b.values.size(-1));
  p.M = b.M;
  p.K = b.K;
  p.N = a.dense.size(-1);
  p.rows = b.M / p.BM;
  p.kcols = b.K / p.BK;
  const std::vector<int64_t> out_batch = core::lead_dims(a.out, 2);
  LOWBIT_REQUIRE(out_batch.size() <= static_cast<size_t>(sparse::kMaxBatchDims), ErrorCode::invalid_argument, op,
                 ": at most ", sparse::kMaxBatchDims, " batch dims on cuda (got ", out_batch.size(), ")");
  p.nd = static_cast<int>(out_batch.size());
  p.batches = 1;
  const std::vector<int64_t> bs = core::broadcast_strides(core::lead_dims(b.values, 3), out_batch);
  const std::vector<int64_t> ds = core::broadcast_strides(core::lead_dims(a.dense, 2), out_batch);
  for (int i = 0; i < p.nd; ++i) {
    p.dims[i] = out_batch[static_cast<size_t>(i)];
    p.bsr_stride[i] = bs[static_cast<size_t>(i)];
    p.dense_stride[i] = ds[static_cast<size_t>(i)];
    p.batches *= p.dims[i];
  }
  if (a.beta != 0.0 && a.input.present()) {
    p.input = a.input.data;
    const std::vector<int64_t> is = core::broadcast_strides(core::lead_dims(a.input, 0), core::lead_dims(a.out, 0));
    for (int i = 0; i < p.nd; ++i) p.input_stride[i] = is[static_cast<size_t>(i)];
    p.input_sm = is[static_cast<size_t>(p.nd)];
    p.input_sn = is[static_cast<size_t>(p.nd) + 1];
  }
  p.alpha = static_cast<float>(a.alpha);
  p.beta = static_cast<float>(a.beta);
  p.ialpha = static_cast<int32_t>(a.alpha);  // integral and in range for int8 (checked by the op)
  p.ibeta = static_cast<int32_t>(a.beta);
  return p;
}

// Launches kernel over every (batch, block row, column panel of `cols`).
template <class Kernel>
void launch(Kernel* kernel, const BsrParams& p, int cols, int threads, size_t smem, Stream stream, const char* name) {
  const char* op = BsrDenseAddmmArgs::kName;
  const int64_t n_tiles = ceil_div(p.N, static_cast<int64_t>(cols));
  const int64_t grid = p.batches * p.rows * n_tiles;
  LOWBIT_REQUIRE(grid <= INT32_MAX, ErrorCode::invalid_argument, op, ": too many output tiles for the cuda grid (",
                 grid, ")");
  if (smem > 48 * 1024) {
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), op,
          "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  }
  kernel<<<static_cast<unsigned>(grid), threads, smem, to_cuda(stream)>>>(p, n_tiles);
  check_launch(op, name);
}

template <class Tag, class St, int BM>
void launch_tiles(const BsrParams& p, Stream stream) {
  const auto go = [&](auto kc) {
    constexpr int KC = decltype(kc)::value;
    using S = BsrTileShape<BM, KC>;
    launch(&sparse::bsr_tiles<Tag, St, BM, KC>, p, S::kTN, S::kThreads, S::kSmem, stream, "bsr_tiles");
  };
  if (p.BK % 32 == 0) {
    go(std::integral_constant<int, 32>{});
  } else {
    go(std::integral_constant<int, 16>{});
  }
}

// Whether bsr_tiles takes the call: 16-bit values in 16-row multiples up to 128 and 16-column multiples, every
// 16-byte piece a cp.async can copy whole.
bool tiles_fit(const BsrDenseAddmmArgs& a, const BsrParams& p) {
  const DType t = a.bsr.values.dtype;
  return (t == DType::f16 || t == DType::bf16) && (p.BM == 16 || p.BM == 32 || p.BM == 64 || p.BM == 128) &&
         p.BK % 16 == 0 && p.N % 8 == 0 && aligned16(p.values) && aligned16(p.dense) &&
         (reinterpret_cast<uintptr_t>(p.out) & 3u) == 0;
}

// Whether bsr_wgmma takes the call: an sm_90 device, 16-bit values in blocks of 64 or 128 rows by a multiple of 64
// columns, TMA's alignment, and coordinates within int32.
bool wgmma_fits(const BsrDenseAddmmArgs& a, const BsrParams& p) {
  return tiles_fit(a, p) && (p.BM == 64 || p.BM == 128) && p.BK % 64 == 0 && p.nnz > 0 &&
         p.nnz * p.BM <= INT32_MAX && p.K <= INT32_MAX && p.N <= INT32_MAX &&
         device_is_sm90(BsrDenseAddmmArgs::kName);
}

template <class Tag, class St, int BM>
void launch_wgmma(const BsrDenseAddmmArgs& a, const BsrParams& p, Stream stream) {
  const char* op = BsrDenseAddmmArgs::kName;
  constexpr int kStages = 3;  // two CTAs an SM at BM = 128, three at 64
  using S = BsrWgmmaShape<BM, kStages>;
  const uint64_t bsr_batches = static_cast<uint64_t>(a.bsr.values.numel() / (p.nnz * p.BM * p.BK));
  const uint64_t dense_batches = static_cast<uint64_t>(a.dense.numel() / (p.K * p.N));
  const CUtensorMap map_a =
      tensor_map_3d(p.values, 2, bsr_batches, static_cast<uint64_t>(p.nnz * p.BM), static_cast<uint64_t>(p.BK),
                    static_cast<uint64_t>(p.BK) * 2, static_cast<uint64_t>(p.nnz * p.BM * p.BK) * 2, BM, op);
  const CUtensorMap map_b = tensor_map_3d(p.dense, 2, dense_batches, static_cast<uint64_t>(p.K),
                                          static_cast<uint64_t>(p.N), static_cast<uint64_t>(p.N) * 2,
                                          static_cast<uint64_t>(p.K * p.N) * 2, S::kKStep, op);
  const auto kernel = &sparse::bsr_wgmma<Tag, St, BM, kStages>;
  const int64_t n_tiles = ceil_div(p.N, static_cast<int64_t>(S::kTN));
  const int64_t grid = p.batches * p.rows * n_tiles;
  LOWBIT_REQUIRE(grid <= INT32_MAX, ErrorCode::invalid_argument, op, ": too many output tiles for the cuda grid (",
                 grid, ")");
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(S::kSmem)), op,
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  kernel<<<static_cast<unsigned>(grid), S::kThreads, S::kSmem, to_cuda(stream)>>>(map_a, map_b, p, n_tiles);
  check_launch(op, "bsr_wgmma");
}

}  // namespace

void bsr_dense_addmm(const BsrDenseAddmmArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = BsrDenseAddmmArgs::kName;
  if (a.out.numel() == 0) return;
  DeviceGuard guard(a.dense.device.index, op);
  const BsrParams p = params_of(a);
  if (wgmma_fits(a, p)) {
    const auto by_bm = [&](auto tag, auto st) {
      using Tag = decltype(tag);
      using St = decltype(st);
      if (p.BM == 64) {
        launch_wgmma<Tag, St, 64>(a, p, stream);
      } else {
        launch_wgmma<Tag, St, 128>(a, p, stream);
      }
    };
    if (a.bsr.values.dtype == DType::f16) {
      by_bm(gemm::F16{}, core::Half{});
    } else {
      by_bm(gemm::BF16{}, core::BFloat16{});
    }
    return;
  }
  if (tiles_fit(a, p)) {
    const auto by_bm = [&](auto tag, auto st) {
      using Tag = decltype(tag);
      using St = decltype(st);
      switch (p.BM) {
        case 16: launch_tiles<Tag, St, 16>(p, stream); break;
        case 32: launch_tiles<Tag, St, 32>(p, stream); break;
        case 64: launch_tiles<Tag, St, 64>(p, stream); break;
        default: launch_tiles<Tag, St, 128>(p, stream); break;
      }
    };
    if (a.bsr.values.dtype == DType::f16) {
      by_bm(gemm::F16{}, core::Half{});
    } else {
      by_bm(gemm::BF16{}, core::BFloat16{});
    }
    return;
  }
  if (a.bsr.values.dtype == DType::i8) {
    launch(&sparse::bsr_generic<int8_t, uint32_t, int32_t>, p, 128, 128, 0, stream, "bsr_generic");
    return;
  }
  with_float_type(a.bsr.values.dtype, op, "bsr.values", [&](auto t) {
    using T = decltype(t);
    launch(&sparse::bsr_generic<T, float, T>, p, 128, 128, 0, stream, "bsr_generic");
  });
}

}  // namespace lowbit::cuda
