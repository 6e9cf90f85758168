// sampled_addmm and bsr_softmax on CUDA (lowbit/ops/sparse.h,
// docs/sparse.md). Their outputs are the values of every stored block, so a
// launch first checks each batch's index arrays whole (row pointers from 0
// to nnz, never decreasing; columns in range and ascending in each row) into
// a flag in the workspace; the compute kernels then take a valid batch row
// by row and fill an invalid one with NaN, so every output is written
// without the host waiting to read the indices.
//
// sampled_addmm: a CTA a stored block (and output batch), 64 x 64 pieces of
// it, a thread 4 x 4 of them, K in chunks of 16 through shared memory, fp32
// sums. bsr_softmax: a warp a row of a block row, fp32 maximum and sum.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/broadcast.h"
#include "core/check.h"
#include "core/float_convert.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/warp.cuh"
#include "cuda/sparse/bsr_params.h"
#include "cuda/sparse/ops.h"

namespace lowbit::cuda {
namespace {

using sparse::kMaxBatchDims;

// A BSR operand's index arrays, per batch.
struct BsrIndex {
  const void* crow;
  const void* col;
  bool index64;
  int64_t rows, nnz, kcols, batches;
};

__device__ __forceinline__ int64_t index_of(const BsrIndex& x, const void* a, int64_t i) {
  return x.index64 ? static_cast<const int64_t*>(a)[i] : static_cast<int64_t>(static_cast<const int32_t*>(a)[i]);
}

// bad[b] |= 1 when batch b's index arrays fail a check; a thread a block row.
__global__ void __launch_bounds__(256) check_bsr_index(BsrIndex x, int* bad) {
  const int64_t b = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= x.rows) return;
  const int64_t crow0 = b * (x.rows + 1), col0 = b * x.nnz;
  const int64_t s = index_of(x, x.crow, crow0 + i), e = index_of(x, x.crow, crow0 + i + 1);
  bool fail = s < 0 || s > e || e > x.nnz;
  if (i == 0) fail |= s != 0;
  if (i == x.rows - 1) fail |= e != x.nnz;
  for (int64_t j = s; !fail && j < e; ++j) {
    const int64_t c = index_of(x, x.col, col0 + j);
    fail |= c < 0 || c >= x.kcols || (j > s && index_of(x, x.col, col0 + j - 1) >= c);
  }
  if (fail) atomicOr(bad + b, 1);
}

struct Broadcast {
  int nd;
  int64_t dims[kMaxBatchDims];
  int64_t stride[3][kMaxBatchDims];  // in whole operands, 0 where one repeats
};

__device__ __forceinline__ void offsets_of(const Broadcast& bc, int64_t ob, int64_t (&o)[3]) {
  o[0] = o[1] = o[2] = 0;
  for (int d = bc.nd - 1; d >= 0; --d) {
    const int64_t c = ob % bc.dims[d];
    ob /= bc.dims[d];
    for (int k = 0; k < 3; ++k) o[k] += c * bc.stride[k][d];
  }
}

Broadcast broadcast_of(const char* op, const std::vector<int64_t>& out, const std::vector<std::vector<int64_t>>& ops) {
  LOWBIT_REQUIRE(out.size() <= static_cast<size_t>(kMaxBatchDims), ErrorCode::invalid_argument, op, ": at most ",
                 kMaxBatchDims, " batch dims on cuda (got ", out.size(), ")");
  Broadcast bc{};
  bc.nd = static_cast<int>(out.size());
  for (size_t k = 0; k < ops.size(); ++k) {
    const std::vector<int64_t> s = core::broadcast_strides(ops[k], out);
    for (int d = 0; d < bc.nd; ++d) bc.stride[k][d] = s[static_cast<size_t>(d)];
  }
  for (int d = 0; d < bc.nd; ++d) bc.dims[d] = out[static_cast<size_t>(d)];
  return bc;
}

std::vector<int64_t> lead(const TensorRef& t, int tail) {
  const Shape s = t.sizes();
  return std::vector<int64_t>(s.begin(), s.end() - tail);
}

int64_t prod(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

BsrIndex index_of(const BsrRef& b) {
  BsrIndex x{};
  x.crow = b.crow_indices.data;
  x.col = b.col_indices.data;
  x.index64 = b.crow_indices.dtype == DType::i64;
  x.nnz = b.values.size(-3);
  x.rows = b.M / b.values.size(-2);
  x.kcols = b.K / b.values.size(-1);
  x.batches = prod(lead(b.values, 3));
  return x;
}

// Zeroes the flags, then checks every batch (one launch over block rows x batches).
void check_indices(const BsrIndex& x, int* bad, Stream stream, const char* op) {
  check(cudaMemsetAsync(bad, 0, sizeof(int) * static_cast<size_t>(x.batches), to_cuda(stream)), op,
        "cudaMemsetAsync");
  if (x.rows == 0) return;
  LOWBIT_REQUIRE(x.batches <= 65535, ErrorCode::invalid_argument, op, ": at most 65535 BSR batches on cuda (got ",
                 x.batches, ")");
  const dim3 grid(static_cast<unsigned>(ceil_div(x.rows, int64_t{256})), static_cast<unsigned>(x.batches));
  check_bsr_index<<<grid, 256, 0, to_cuda(stream)>>>(x, bad);
  check_launch(op, "check_bsr_index");
}

constexpr float kNaN = __builtin_nanf("");

struct SampledParams {
  BsrIndex x;
  const void* input;  // input's values, null when beta == 0
  const void* mat1;   // [*, M, Kd]
  const void* mat2;   // [*, Kd, N]
  void* out;          // [out batches, nnz, BM, BN]
  int BM, BN;
  int64_t M, N, Kd;
  float alpha, beta;
  Broadcast bc;  // out batches -> input (BSR), mat1, mat2
  const int* bad;
};

template <class T>
__global__ void __launch_bounds__(256) sampled_blocks(SampledParams p) {
  constexpr int kT = 64, kK = 16;
  __shared__ float as[kK][kT];  // mat1's piece, transposed: [k][row]
  __shared__ float bs[kK][kT];  // mat2's piece: [k][column]
  const int64_t j = blockIdx.x % p.x.nnz, ob = blockIdx.x / p.x.nnz;
  int64_t o[3];
  offsets_of(p.bc, ob, o);
  T* out = static_cast<T*>(p.out) + (ob * p.x.nnz + j) * p.BM * p.BN;
  const int64_t block_elems = static_cast<int64_t>(p.BM) * p.BN;
  if (p.bad[o[0]] != 0) {  // the block's row is unknown: NaN
    for (int64_t e = threadIdx.x; e < block_elems; e += blockDim.x) out[e] = core::from_f32<T>(kNaN);
    return;
  }
  // The block's row: the last whose pointer is <= j (row pointers checked: ascending from 0 to nnz).
  const int64_t crow0 = o[0] * (p.x.rows + 1);
  int64_t lo = 0, hi = p.x.rows - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (index_of(p.x, p.x.crow, crow0 + mid) <= j) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t row = lo, col = index_of(p.x, p.x.col, o[0] * p.x.nnz + j);
  const T* a = static_cast<const T*>(p.mat1) + o[1] * p.M * p.Kd + row * p.BM * p.Kd;
  const T* b = static_cast<const T*>(p.mat2) + o[2] * p.Kd * p.N + col * p.BN;
  const T* in = p.input != nullptr ? static_cast<const T*>(p.input) + (o[0] * p.x.nnz + j) * block_elems : nullptr;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int r0 = 0; r0 < p.BM; r0 += kT) {
    for (int c0 = 0; c0 < p.BN; c0 += kT) {
      float acc[4][4] = {};
      for (int64_t k0 = 0; k0 < p.Kd; k0 += kK) {
        __syncthreads();  // the previous chunk's reads are done
        for (int e = threadIdx.x; e < kT * kK; e += 256) {
          const int r = e / kK, k = e % kK;  // consecutive threads: consecutive k of a row of mat1
          as[k][r] = r0 + r < p.BM && k0 + k < p.Kd ? core::to_f32(a[(r0 + r) * p.Kd + k0 + k]) : 0.0f;
          const int kb = e / kT, c = e % kT;  // consecutive columns of a row of mat2
          bs[kb][c] = c0 + c < p.BN && k0 + kb < p.Kd ? core::to_f32(b[(k0 + kb) * p.N + c0 + c]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kK; ++k) {
          float av[4], bv[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            av[u] = as[k][ty * 4 + u];
            bv[u] = bs[k][tx * 4 + u];
          }
#pragma unroll
          for (int u = 0; u < 4; ++u) {
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[u][v] = fmaf(av[u], bv[v], acc[u][v]);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int r = r0 + ty * 4 + u;
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const int c = c0 + tx * 4 + v;
          if (r < p.BM && c < p.BN) {
            float s = p.alpha * acc[u][v];
            if (in != nullptr) s += p.beta * core::to_f32(in[r * p.BN + c]);
            out[r * p.BN + c] = core::from_f32<T>(s);
          }
        }
      }
    }
  }
}

struct SoftmaxParams {
  BsrIndex x;
  const void* values;
  void* out;
  int BM, BK;
  const int* bad;
};

// A CTA a block row of a batch; a warp a row of it at a time.
template <class T>
__global__ void __launch_bounds__(256) softmax_rows(SoftmaxParams p) {
  const int64_t i = blockIdx.x % p.x.rows, b = blockIdx.x / p.x.rows;
  const int64_t block_elems = static_cast<int64_t>(p.BM) * p.BK;
  const T* v = static_cast<const T*>(p.values) + b * p.x.nnz * block_elems;
  T* out = static_cast<T*>(p.out) + b * p.x.nnz * block_elems;
  if (p.bad[b] != 0) {  // rows unknown: this CTA's share of the batch's blocks (those j = i mod rows) NaN
    for (int64_t j = i; j < p.x.nnz; j += p.x.rows) {
      for (int64_t e = threadIdx.x; e < block_elems; e += blockDim.x) out[j * block_elems + e] = core::from_f32<T>(kNaN);
    }
    return;
  }
  const int64_t crow0 = b * (p.x.rows + 1);
  const int64_t s = index_of(p.x, p.x.crow, crow0 + i), e = index_of(p.x, p.x.crow, crow0 + i + 1);
  const int64_t count = (e - s) * p.BK;  // the row's stored elements
  const int lane = threadIdx.x % 32;
  for (int r = threadIdx.x / 32; r < p.BM; r += blockDim.x / 32) {
    // Element q of the row: column q % BK of block s + q / BK.
    const auto at = [&](int64_t q) { return (s + q / p.BK) * block_elems + static_cast<int64_t>(r) * p.BK + q % p.BK; };
    float peak = -INFINITY;
    for (int64_t q = lane; q < count; q += 32) peak = fmaxf(peak, core::to_f32(v[at(q)]));
    peak = warp_max(peak);
    float sum = 0.0f;
    for (int64_t q = lane; q < count; q += 32) sum += __expf(core::to_f32(v[at(q)]) - peak);
    sum = warp_sum(sum);
    const float inv = 1.0f / sum;
    for (int64_t q = lane; q < count; q += 32) out[at(q)] = core::from_f32<T>(__expf(core::to_f32(v[at(q)]) - peak) * inv);
  }
}

size_t bsr_index_workspace(const BsrRef& b) { return sizeof(int) * static_cast<size_t>(prod(lead(b.values, 3))); }

}  // namespace

void sampled_addmm(const SampledAddmmArgs& a, void* workspace, Stream stream) {
  const char* op = SampledAddmmArgs::kName;
  if (a.out_values.numel() == 0) return;
  DeviceGuard guard(a.mat1.device.index, op);
  SampledParams p{};
  p.x = index_of(a.input);
  p.bad = static_cast<const int*>(workspace);
  p.input = a.beta != 0.0 ? a.input.values.data : nullptr;
  p.mat1 = a.mat1.data;
  p.mat2 = a.mat2.data;
  p.out = a.out_values.data;
  p.BM = static_cast<int>(a.input.values.size(-2));
  p.BN = static_cast<int>(a.input.values.size(-1));
  p.M = a.input.M;
  p.N = a.input.K;
  p.Kd = a.mat1.size(-1);
  p.alpha = static_cast<float>(a.alpha);
  p.beta = static_cast<float>(a.beta);
  const std::vector<int64_t> out_batch = lead(a.out_values, 3);
  p.bc = broadcast_of(op, out_batch, {lead(a.input.values, 3), lead(a.mat1, 2), lead(a.mat2, 2)});
  check_indices(p.x, static_cast<int*>(workspace), stream, op);
  const int64_t grid = prod(out_batch) * p.x.nnz;
  LOWBIT_REQUIRE(grid <= INT32_MAX, ErrorCode::invalid_argument, op, ": too many blocks for the cuda grid (", grid, ")");
  with_float_type(a.mat1.dtype, op, "mat1", [&](auto t) {
    using T = decltype(t);
    sampled_blocks<T><<<static_cast<unsigned>(grid), 256, 0, to_cuda(stream)>>>(p);
    check_launch(op, "sampled_blocks");
  });
}
size_t sampled_addmm_workspace(const SampledAddmmArgs& a) { return bsr_index_workspace(a.input); }

void bsr_softmax(const BsrSoftmaxArgs& a, void* workspace, Stream stream) {
  const char* op = BsrSoftmaxArgs::kName;
  if (a.out_values.numel() == 0) return;
  DeviceGuard guard(a.input.values.device.index, op);
  SoftmaxParams p{};
  p.x = index_of(a.input);
  p.bad = static_cast<const int*>(workspace);
  p.values = a.input.values.data;
  p.out = a.out_values.data;
  p.BM = static_cast<int>(a.input.values.size(-2));
  p.BK = static_cast<int>(a.input.values.size(-1));
  if (p.x.rows == 0) return;
  check_indices(p.x, static_cast<int*>(workspace), stream, op);
  const int64_t grid = p.x.batches * p.x.rows;
  LOWBIT_REQUIRE(grid <= INT32_MAX, ErrorCode::invalid_argument, op, ": too many block rows for the cuda grid (", grid,
                 ")");
  with_float_type(a.input.values.dtype, op, "input.values", [&](auto t) {
    using T = decltype(t);
    softmax_rows<T><<<static_cast<unsigned>(grid), 256, 0, to_cuda(stream)>>>(p);
    check_launch(op, "softmax_rows");
  });
}
size_t bsr_softmax_workspace(const BsrSoftmaxArgs& a) { return bsr_index_workspace(a.input); }

}  // namespace lowbit::cuda
