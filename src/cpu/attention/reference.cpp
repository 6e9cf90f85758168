// The attention ops on the CPU (lowbit/ops/attention.h). The reference
// ("cpu-reference"), per (batch, head, query): the scores in float64, their
// maximum, the exponentials' sum, the weighted sum of v in float64, each
// output rounded once (to float32, then to the dtype); the log-sum-exp in
// float64, rounded to float32. The fast path ("cpu") does the same steps in
// float32, vectorized (attend_f32).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/float_convert.h"
#include "core/registry.h"
#include "cpu/quant/elementwise.h"
#include "cpu/quant/parallel.h"
#include "cpu/register.h"
#include "lowbit/ops/attention.h"

namespace lowbit::core::cpu {
namespace {

// One query's attention over `count` keys: k_at(j, d) and v_row(j) read
// them; out_row gets the result (zeros when count is 0), *lse its log-sum-exp
// (-inf then) when lse is not null.
template <class T, class KAt, class VRow>
void attend(const T* qi, int64_t D, int64_t Dv, int64_t count, double scale, const KAt& k_at, const VRow& v_row,
            T* out_row, float* lse) {
  if (count <= 0) {  // no key: zeros, and a log-sum-exp of -inf
    for (int64_t e = 0; e < Dv; ++e) out_row[e] = from_f32<T>(0.0f);
    if (lse) *lse = -std::numeric_limits<float>::infinity();
    return;
  }
  std::vector<double> s(static_cast<size_t>(count));
  double peak = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < count; ++j) {
    double dot = 0.0;
    for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(to_f32(qi[d])) * to_f32(k_at(j, d));
    s[static_cast<size_t>(j)] = scale * dot;
    peak = std::max(peak, s[static_cast<size_t>(j)]);
  }
  double sum = 0.0;
  for (int64_t j = 0; j < count; ++j) sum += std::exp(s[static_cast<size_t>(j)] - peak);
  std::vector<double> acc(static_cast<size_t>(Dv), 0.0);
  for (int64_t j = 0; j < count; ++j) {
    const double p = std::exp(s[static_cast<size_t>(j)] - peak) / sum;
    const T* vj = v_row(j);
    for (int64_t e = 0; e < Dv; ++e) acc[static_cast<size_t>(e)] += p * to_f32(vj[e]);
  }
  for (int64_t e = 0; e < Dv; ++e) out_row[e] = from_f32<T>(static_cast<float>(acc[static_cast<size_t>(e)]));
  if (lse) *lse = static_cast<float>(peak + std::log(sum));
}

// The same in float32: q and each key row converted once, the dot products
// in 16 lane sums (each lane's order fixed, so the compiler vectorizes them
// and the result does not depend on the ISA), the exponentials and the
// weighted sum of v in float32, the division last.
template <class T, class KAt, class VRow>
void attend_f32(const T* qi, int64_t D, int64_t Dv, int64_t count, double scale, const KAt& k_at, const VRow& v_row,
                T* out_row, float* lse) {
  if (count <= 0) {
    for (int64_t e = 0; e < Dv; ++e) out_row[e] = from_f32<T>(0.0f);
    if (lse) *lse = -std::numeric_limits<float>::infinity();
    return;
  }
  constexpr int kLanes = 16;
  thread_local std::vector<float> qf, kf, s, acc;
  const int64_t Dp = (D + kLanes - 1) / kLanes * kLanes;  // padded with zeros
  qf.assign(static_cast<size_t>(Dp), 0.0f);
  kf.assign(static_cast<size_t>(Dp), 0.0f);
  s.resize(static_cast<size_t>(count));
  acc.assign(static_cast<size_t>(Dv), 0.0f);
  for (int64_t d = 0; d < D; ++d) qf[static_cast<size_t>(d)] = to_f32(qi[d]);
  const float sc = static_cast<float>(scale);
  float peak = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < count; ++j) {
    for (int64_t d = 0; d < D; ++d) kf[static_cast<size_t>(d)] = to_f32(k_at(j, d));
    float part[kLanes] = {};
    for (int64_t d0 = 0; d0 < Dp; d0 += kLanes) {
      for (int l = 0; l < kLanes; ++l) part[l] += qf[static_cast<size_t>(d0 + l)] * kf[static_cast<size_t>(d0 + l)];
    }
    float dot = 0.0f;
    for (float x : part) dot += x;
    s[static_cast<size_t>(j)] = sc * dot;
    peak = std::max(peak, s[static_cast<size_t>(j)]);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < count; ++j) {
    s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - peak);
    sum += s[static_cast<size_t>(j)];
  }
  for (int64_t j = 0; j < count; ++j) {
    const float p = s[static_cast<size_t>(j)];
    const T* vj = v_row(j);
    for (int64_t e = 0; e < Dv; ++e) acc[static_cast<size_t>(e)] += p * to_f32(vj[e]);
  }
  const float inv = 1.0f / sum;
  for (int64_t e = 0; e < Dv; ++e) out_row[e] = from_f32<T>(acc[static_cast<size_t>(e)] * inv);
  if (lse) *lse = peak + std::log(sum);
}

// attend (float64, the reference) or attend_f32 (the fast path).
template <bool kFast, class T, class KAt, class VRow>
void attend_as(const T* qi, int64_t D, int64_t Dv, int64_t count, double scale, const KAt& k_at, const VRow& v_row,
               T* out_row, float* lse) {
  if constexpr (kFast) {
    attend_f32(qi, D, Dv, count, scale, k_at, v_row, out_row, lse);
  } else {
    attend(qi, D, Dv, count, scale, k_at, v_row, out_row, lse);
  }
}

// The keys query i of Sq sees among `keys`: all, or causally those j <= i + keys - Sq (bottom-right).
int64_t visible(bool causal, int64_t i, int64_t Sq, int64_t keys) {
  return causal ? std::max<int64_t>(0, std::min(keys, i + keys - Sq + 1)) : keys;
}

double scale_of(double scale, int64_t D) { return scale != 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(D)); }

template <bool kFast, class T>
void dense_attention(const FlashAttentionArgs& a) {
  const bool t = a.k_layout == KLayout::bdhs;
  const int64_t B = a.q.size(0), Sq = a.q.size(1), H = a.q.size(2), D = a.q.size(3);
  const int64_t Skv = t ? a.k.size(3) : a.k.size(1), Hkv = a.k.size(2), Dv = a.v.size(3);
  const int64_t group = H / Hkv;
  const double scale = scale_of(a.scale, D);
  const T* q = a.q.ptr<const T>();
  const T* k = a.k.ptr<const T>();
  const T* v = a.v.ptr<const T>();
  T* out = a.out.ptr<T>();
  float* lse = a.lse.present() ? a.lse.ptr<float>() : nullptr;
  parallel_for(B * H * Sq, B * H * Sq * Skv * (D + Dv), [&](int64_t task) {
    const int64_t i = task % Sq, h = task / Sq % H, b = task / Sq / H, g = h / group;
    // k[b, j, g, d] (bshd) or k[b, d, g, j] (bdhs).
    const auto k_at = [&](int64_t j, int64_t d) {
      return t ? k[((b * D + d) * Hkv + g) * Skv + j] : k[((b * Skv + j) * Hkv + g) * D + d];
    };
    const auto v_row = [&](int64_t j) { return v + ((b * Skv + j) * Hkv + g) * Dv; };
    attend_as<kFast>(q + ((b * Sq + i) * H + h) * D, D, Dv, visible(a.causal, i, Sq, Skv), scale, k_at, v_row,
                     out + ((b * Sq + i) * H + h) * Dv, lse ? lse + (b * H + h) * Sq + i : nullptr);
  });
}

// The cache's keys of each sequence: the first cache_seqlens[b] tokens, row j at
// k_cache[b, j] (contiguous) or k_cache[block_table[b, j / P], j % P] (paged).
template <bool kFast, class T>
void kvcache_attention(const FlashAttentionKvcacheArgs& a) {
  const char* op = FlashAttentionKvcacheArgs::kName;
  const bool paged = a.block_table.present();
  const int64_t B = a.q.size(0), Sq = a.q.size(1), H = a.q.size(2), D = a.q.size(3);
  const int64_t rows = a.k_cache.size(1), Hkv = a.k_cache.size(2), Dv = a.v_cache.size(3);
  const int64_t pages = paged ? a.block_table.size(1) : 1, slots = a.k_cache.size(0);
  const int64_t capacity = paged ? pages * rows : rows, group = H / Hkv;
  const int32_t* lens = a.cache_seqlens.ptr<const int32_t>();
  const int32_t* table = paged ? a.block_table.ptr<const int32_t>() : nullptr;
  // Every length and every page a sequence uses, checked before anything is written.
  for (int64_t b = 0; b < B; ++b) {
    LOWBIT_REQUIRE(lens[b] >= 0 && lens[b] <= capacity, ErrorCode::invalid_argument, op, ": cache_seqlens[", b,
                   "] must be in [0, ", capacity, "] (got ", lens[b], ")");
    for (int64_t p = 0; paged && p * rows < lens[b]; ++p) {
      const int32_t page = table[b * pages + p];
      LOWBIT_REQUIRE(page >= 0 && page < slots, ErrorCode::invalid_argument, op, ": block_table[", b, ", ", p,
                     "] must be a page of the cache in [0, ", slots, ") (got ", page, ")");
    }
  }
  const double scale = scale_of(a.scale, D);
  const T* q = a.q.ptr<const T>();
  const T* k = a.k_cache.ptr<const T>();
  const T* v = a.v_cache.ptr<const T>();
  T* out = a.out.ptr<T>();
  float* lse = a.lse.present() ? a.lse.ptr<float>() : nullptr;
  parallel_for(B * H * Sq, B * H * Sq * capacity * (D + Dv), [&](int64_t task) {
    const int64_t i = task % Sq, h = task / Sq % H, b = task / Sq / H, g = h / group;
    // The cache row of token j: [slot, row within it].
    const auto row_of = [&](int64_t j) {
      return paged ? int64_t{table[b * pages + j / rows]} * rows + j % rows : b * rows + j;
    };
    const auto k_at = [&](int64_t j, int64_t d) { return k[(row_of(j) * Hkv + g) * D + d]; };
    const auto v_row = [&](int64_t j) { return v + (row_of(j) * Hkv + g) * Dv; };
    attend_as<kFast>(q + ((b * Sq + i) * H + h) * D, D, Dv, visible(a.causal, i, Sq, lens[b]), scale, k_at, v_row,
                     out + ((b * Sq + i) * H + h) * Dv, lse ? lse + (b * H + h) * Sq + i : nullptr);
  });
}

// cu[0] = 0, never decreasing, cu[B] = total: checked before anything is written.
void check_offsets(const char* op, const char* name, const int32_t* cu, int64_t B, int64_t total) {
  LOWBIT_REQUIRE(cu[0] == 0, ErrorCode::invalid_argument, op, ": ", name, "[0] must be 0 (got ", cu[0], ")");
  for (int64_t b = 0; b < B; ++b) {
    LOWBIT_REQUIRE(cu[b + 1] >= cu[b], ErrorCode::invalid_argument, op, ": ", name, " must not decrease (", name, "[",
                   b, "] = ", cu[b], ", ", name, "[", b + 1, "] = ", cu[b + 1], ")");
  }
  LOWBIT_REQUIRE(cu[B] == total, ErrorCode::invalid_argument, op, ": ", name, "[", B, "] must be the ",
                 "tokens' total ", total, " (got ", cu[B], ")");
}

template <bool kFast, class T>
void varlen_attention(const FlashAttentionVarlenArgs& a) {
  const char* op = FlashAttentionVarlenArgs::kName;
  const int64_t total_q = a.q.size(0), H = a.q.size(1), D = a.q.size(2);
  const int64_t total_k = a.k.size(0), Hkv = a.k.size(1), Dv = a.v.size(2), group = H / Hkv;
  const int64_t B = a.cu_seqlens_q.size(0) - 1;
  const int32_t* cq = a.cu_seqlens_q.ptr<const int32_t>();
  const int32_t* ck = a.cu_seqlens_k.ptr<const int32_t>();
  check_offsets(op, "cu_seqlens_q", cq, B, total_q);
  check_offsets(op, "cu_seqlens_k", ck, B, total_k);
  std::vector<int32_t> seq_of(static_cast<size_t>(total_q));  // each query row's sequence
  for (int64_t b = 0; b < B; ++b)
    std::fill(seq_of.begin() + cq[b], seq_of.begin() + cq[b + 1], static_cast<int32_t>(b));
  const double scale = scale_of(a.scale, D);
  const T* q = a.q.ptr<const T>();
  const T* k = a.k.ptr<const T>();
  const T* v = a.v.ptr<const T>();
  T* out = a.out.ptr<T>();
  float* lse = a.lse.present() ? a.lse.ptr<float>() : nullptr;
  parallel_for(total_q * H, total_q * H * std::max<int64_t>(total_k, 1) * (D + Dv), [&](int64_t task) {
    const int64_t row = task / H, h = task % H, g = h / group, b = seq_of[static_cast<size_t>(row)];
    const int64_t k0 = ck[b], keys = ck[b + 1] - ck[b], Sq = cq[b + 1] - cq[b], i = row - cq[b];
    const auto k_at = [&](int64_t j, int64_t d) { return k[((k0 + j) * Hkv + g) * D + d]; };
    const auto v_row = [&](int64_t j) { return v + ((k0 + j) * Hkv + g) * Dv; };
    attend_as<kFast>(q + (row * H + h) * D, D, Dv, visible(a.causal, i, Sq, keys), scale, k_at, v_row,
                     out + (row * H + h) * Dv, lse ? lse + h * total_q + row : nullptr);
  });
}

template <bool kFast>
void flash_attention_cpu(const FlashAttentionArgs& a, void* /*workspace*/, Stream /*stream*/) {
  if (a.out.numel() == 0) return;
  with_float_type(a.q.dtype, FlashAttentionArgs::kName, [&](auto type) { dense_attention<kFast, decltype(type)>(a); });
}

template <bool kFast>
void flash_attention_varlen_cpu(const FlashAttentionVarlenArgs& a, void* /*workspace*/, Stream /*stream*/) {
  with_float_type(a.q.dtype, FlashAttentionVarlenArgs::kName,
                  [&](auto type) { varlen_attention<kFast, decltype(type)>(a); });
}

template <bool kFast>
void flash_attention_kvcache_cpu(const FlashAttentionKvcacheArgs& a, void* /*workspace*/, Stream /*stream*/) {
  if (a.out.numel() == 0) return;
  with_float_type(a.q.dtype, FlashAttentionKvcacheArgs::kName,
                  [&](auto type) { kvcache_attention<kFast, decltype(type)>(a); });
}

}  // namespace

void register_attention_ops() {
  OpRegistry<FlashAttentionArgs>::add({"cpu-reference", DeviceType::cpu, 0, flash_attention_cpu<false>});
  OpRegistry<FlashAttentionArgs>::add({"cpu", DeviceType::cpu, 10, flash_attention_cpu<true>});
  OpRegistry<FlashAttentionVarlenArgs>::add({"cpu-reference", DeviceType::cpu, 0, flash_attention_varlen_cpu<false>});
  OpRegistry<FlashAttentionVarlenArgs>::add({"cpu", DeviceType::cpu, 10, flash_attention_varlen_cpu<true>});
  OpRegistry<FlashAttentionKvcacheArgs>::add({"cpu-reference", DeviceType::cpu, 0, flash_attention_kvcache_cpu<false>});
  OpRegistry<FlashAttentionKvcacheArgs>::add({"cpu", DeviceType::cpu, 10, flash_attention_kvcache_cpu<true>});
}

}  // namespace lowbit::core::cpu
