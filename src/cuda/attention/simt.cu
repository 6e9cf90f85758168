// The attention kernels beside the tensor-core one (docs/attention.md, "On CUDA"):
//
// attention_simt: the slow path, for what the tensor-core kernel does not
//   take (float32; head dims not multiples of 8 or above 256; views not
//   16-byte aligned; bdhs keys not a multiple of 8). A warp a (token, head):
//   its keys 32 at a time, a lane a key's score (fp32 sums over D), the
//   chunk's maximum and sum across the warp (online softmax), then each
//   lane's 4 of Dv's columns weighted by the chunk's probabilities in turn.
//   Dv above 128 walks the keys again for each further 128 columns.
// combine_splits: the split key ranges' partials (each normalized by its
//   own sum, with its log-sum-exp) merged with weights exp(lse_s - lse).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "core/float_convert.h"
#include "cuda/attention/kernels.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/warp.cuh"

namespace lowbit::cuda::attention {
namespace {

constexpr int kWarps = 4;  // rows a CTA
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

template <class T>
__global__ void __launch_bounds__(32 * kWarps) attention_simt(const __grid_constant__ FlashParams p) {
  constexpr int kCols = 4;  // Dv's columns a lane holds
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t row = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;  // token * H + h
  if (row >= p.total_q * p.H) return;
  const int64_t token = row / p.H;
  const int h = static_cast<int>(row % p.H), g = h / p.group;
  const auto* q = static_cast<const T*>(p.q) + row * p.D;
  const auto* k = static_cast<const T*>(p.k);
  const auto* v = static_cast<const T*>(p.v);

  // The token's sequence, its query index and keys; bad: lengths, offsets or pages out of range.
  int b = 0;
  int64_t i = 0, Sq = p.Sq, Skv = p.Skv, key_row0 = 0;
  bool bad = false;
  if (p.form == Form::varlen) {
    int lo = 0, hi = p.B - 1;  // the last sequence starting at or before the token
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.cu_q[mid] <= token) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    b = lo;
    const int64_t q0 = p.cu_q[b], q1 = p.cu_q[b + 1], k0 = p.cu_k[b], k1 = p.cu_k[b + 1];
    bad = q0 < 0 || q0 > token || q1 <= token || q1 > p.total_q || k0 < 0 || k1 < k0 || k1 > p.total_k;
    i = token - q0;
    Sq = q1 - q0;
    Skv = bad ? 0 : k1 - k0;
    key_row0 = bad ? 0 : k0;
  } else {
    b = static_cast<int>(token / p.Sq);
    i = token % p.Sq;
    if (p.form == Form::kvcache) {
      Skv = p.seqlens[b];
      bad = Skv < 0 || Skv > p.capacity;
      if (bad) Skv = 0;
      key_row0 = p.table != nullptr ? 0 : int64_t{b} * p.Skv;
    } else {
      key_row0 = int64_t{b} * p.Skv;
    }
  }
  const int64_t count = p.causal ? max(int64_t{0}, min(Skv, i + Skv - Sq + 1)) : Skv;
  const int64_t P = p.Skv;  // paged: the page size
  if (p.table != nullptr) {
    bool bad_page = false;
    for (int64_t pg = lane; pg * P < count; pg += 32) {
      const int page = p.table[int64_t{b} * p.max_pages + pg];
      bad_page |= page < 0 || page >= p.pages;
    }
    bad |= __any_sync(0xffffffffu, bad_page);
  }
  T* const out = static_cast<T*>(p.out) + row * p.Dv;
  if (bad) {
    for (int e = lane; e < p.Dv; e += 32) out[e] = core::from_f32<T>(NAN);
    if (lane == 0 && p.lse != nullptr) p.lse[lse_index(p, b, h, i, token)] = NAN;
    return;
  }
  const auto key_row = [&](int64_t j) {
    return p.table != nullptr ? int64_t{p.table[int64_t{b} * p.max_pages + j / P]} * P + j % P : key_row0 + j;
  };
  const float sl = p.scale_log2;

  for (int e0 = 0; e0 < p.Dv; e0 += 32 * kCols) {
    float mx = -INFINITY, sum = 0.0f, acc[kCols] = {};
    for (int64_t j0 = 0; j0 < count; j0 += 32) {
      const int64_t j = j0 + lane;
      float s = -INFINITY;
      if (j < count) {
        float dot = 0.0f;
        if (p.bdhs) {
          for (int d = 0; d < p.D; ++d)
            dot += core::to_f32(q[d]) * core::to_f32(k[((int64_t{b} * p.D + d) * p.Hkv + g) * p.Skv + j]);
        } else {
          const T* kj = k + (key_row(j) * p.Hkv + g) * p.D;
          for (int d = 0; d < p.D; ++d) dot += core::to_f32(q[d]) * core::to_f32(kj[d]);
        }
        s = dot * sl;
      }
      const float m_new = fmaxf(mx, warp_max(s));
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(mx - base), pj = exp2f(s - base);
      mx = m_new;
      sum = sum * alpha + warp_sum(pj);
#pragma unroll
      for (int u = 0; u < kCols; ++u) acc[u] *= alpha;
      const int n = static_cast<int>(min(int64_t{32}, count - j0));
      for (int jj = 0; jj < n; ++jj) {
        const float w = __shfl_sync(0xffffffffu, pj, jj);
        const T* vj = v + (key_row(j0 + jj) * p.Hkv + g) * p.Dv;
#pragma unroll
        for (int u = 0; u < kCols; ++u) {
          const int e = e0 + lane + 32 * u;
          if (e < p.Dv) acc[u] += w * core::to_f32(vj[e]);
        }
      }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // no key: zeros
#pragma unroll
    for (int u = 0; u < kCols; ++u) {
      const int e = e0 + lane + 32 * u;
      if (e < p.Dv) out[e] = core::from_f32<T>(acc[u] * inv);
    }
    if (e0 == 0 && lane == 0 && p.lse != nullptr) {
      p.lse[lse_index(p, b, h, i, token)] = sum > 0.0f ? (mx + log2f(sum)) * kLn2 : -INFINITY;
    }
  }
}

template <class T>
__global__ void __launch_bounds__(32 * kWarps) combine_splits(const __grid_constant__ FlashParams p) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t row = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;  // token * H + h
  const int64_t rows = p.total_q * p.H;
  if (row >= rows) return;
  float mx = -INFINITY;
  bool nan = false;
  for (int s = lane; s < p.splits; s += 32) {
    const float x = p.part_lse[s * rows + row];
    nan |= x != x;
    mx = fmaxf(mx, x);
  }
  mx = warp_max(mx);
  nan = __any_sync(0xffffffffu, nan);
  const float base = mx == -INFINITY ? 0.0f : mx;  // every range empty: zeros and -inf
  float sum = 0.0f;
  for (int s = lane; s < p.splits; s += 32) sum += exp2f((p.part_lse[s * rows + row] - base) * kLog2e);
  sum = warp_sum(sum);
  const float inv = nan ? NAN : sum > 0.0f ? 1.0f / sum : 0.0f;
  T* const out = static_cast<T*>(p.out) + row * p.Dv;
  for (int e = lane; e < p.Dv; e += 32) {
    float acc = 0.0f;
    for (int s = 0; s < p.splits; ++s) {
      const float w = exp2f((p.part_lse[s * rows + row] - base) * kLog2e);
      if (w > 0.0f) acc += w * p.part_o[(s * rows + row) * p.Dv + e];
    }
    out[e] = core::from_f32<T>(acc * inv);
  }
  if (lane == 0 && p.lse != nullptr) {
    const int64_t token = row / p.H, b = token / p.Sq;
    const float lse = nan ? NAN : sum > 0.0f ? base + logf(sum) : -INFINITY;
    p.lse[lse_index(p, static_cast<int>(b), static_cast<int>(row % p.H), token % p.Sq, token)] = lse;
  }
}

unsigned rows_grid(const FlashParams& p, const char* op) {
  const int64_t blocks = ceil_div(p.total_q * p.H, int64_t{kWarps});
  LOWBIT_REQUIRE(blocks <= INT32_MAX, ErrorCode::invalid_argument, op,
                 ": too many (token, head) rows for the cuda grid (", p.total_q * p.H, ")");
  return static_cast<unsigned>(blocks);
}

}  // namespace

void launch_simt(const FlashParams& p, DType dtype, Stream stream, const char* op) {
  with_float_type(dtype, op, "q", [&](auto t) {
    attention_simt<decltype(t)><<<rows_grid(p, op), 32 * kWarps, 0, to_cuda(stream)>>>(p);
    check_launch(op, "attention_simt");
  });
}

void launch_combine(const FlashParams& p, DType dtype, Stream stream, const char* op) {
  with_float_type(dtype, op, "q", [&](auto t) {
    combine_splits<decltype(t)><<<rows_grid(p, op), 32 * kWarps, 0, to_cuda(stream)>>>(p);
    check_launch(op, "combine_splits");
  });
}

}  // namespace lowbit::cuda::attention
