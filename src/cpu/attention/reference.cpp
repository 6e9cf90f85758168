// The attention ops on the CPU (lowbit/ops/attention.h). The reference
// ("cpu-reference"), per (batch, head, query): the scores in float64, their
// maximum, the exponentials' sum, the weighted sum of v in float64, each
// output rounded once (to float32, then to the dtype); the log-sum-exp in
// float64, rounded to float32. The fast path ("cpu") runs blocks of queries
// in float32 with FlashAttention's online softmax (blocked.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/float_convert.h"
#include "core/registry.h"
#include "cpu/attention/blocked.h"
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

// Rows r < nq of a block of one (sequence, kv head): the fast path's blocked kernel, or the reference one row
// at a time.
// k_at(j, d) is key j's element d; k_line is blocked.h's (keys as rows, or with kKT as rows of one element).
template <bool kFast, bool kKT, class T, class QRow, class Count, class KAt, class KLine, class VRow, class OutRow,
          class Lse>
void attend_rows(int64_t nq, int64_t D, int64_t Dv, double scale, const QRow& q_row, const Count& count,
                 const KAt& k_at, const KLine& k_line, const VRow& v_row, const OutRow& out_row, const Lse& lse) {
  if constexpr (kFast) {
    attention::attend_block_f32<T, kKT>(nq, D, Dv, scale, q_row, count, k_line, v_row, out_row, lse);
  } else {
    for (int64_t r = 0; r < nq; ++r) attend(q_row(r), D, Dv, count(r), scale, k_at, v_row, out_row(r), lse(r));
  }
}

// Queries a block of one (sequence, kv head) takes: its rows are each query's `group` heads (packed row r is
// query r / group of head g * group + r % group), so the grouped heads share each key chunk's conversion; the
// reference takes one query (its rows one at a time).
template <bool kFast>
int64_t block_queries(int64_t group) {
  return kFast ? std::max<int64_t>(1, attention::kQueryRows / group) : 1;
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
  const int64_t qn = block_queries<kFast>(group), blocks = (Sq + qn - 1) / qn;
  parallel_for(B * Hkv * blocks, B * H * Sq * Skv * (D + Dv), [&](int64_t task) {
    const int64_t i0 = task % blocks * qn, g = task / blocks % Hkv, b = task / blocks / Hkv;
    const auto query = [&](int64_t r) { return i0 + r / group; };
    const auto head = [&](int64_t r) { return g * group + r % group; };
    // k[b, j, g, d] (bshd) or k[b, d, g, j] (bdhs).
    const auto k_at = [&](int64_t j, int64_t d) {
      return t ? k[((b * D + d) * Hkv + g) * Skv + j] : k[((b * Skv + j) * Hkv + g) * D + d];
    };
    const auto v_row = [&](int64_t j) { return v + ((b * Skv + j) * Hkv + g) * Dv; };
    const auto block = [&](auto kt, const auto& k_line) {
      attend_rows<kFast, decltype(kt)::value, T>(
          std::min(qn, Sq - i0) * group, D, Dv, scale,
          [&](int64_t r) { return q + ((b * Sq + query(r)) * H + head(r)) * D; },
          [&](int64_t r) { return visible(a.causal, query(r), Sq, Skv); }, k_at, k_line, v_row,
          [&](int64_t r) { return out + ((b * Sq + query(r)) * H + head(r)) * Dv; },
          [&](int64_t r) { return lse ? lse + (b * H + head(r)) * Sq + query(r) : nullptr; });
    };
    if (t) {
      block(std::true_type{}, [&](int64_t d) { return k + ((b * D + d) * Hkv + g) * Skv; });
    } else {
      block(std::false_type{}, [&](int64_t j) { return k + ((b * Skv + j) * Hkv + g) * D; });
    }
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
  const int64_t qn = block_queries<kFast>(group), blocks = (Sq + qn - 1) / qn;
  parallel_for(B * Hkv * blocks, B * H * Sq * capacity * (D + Dv), [&](int64_t task) {
    const int64_t i0 = task % blocks * qn, g = task / blocks % Hkv, b = task / blocks / Hkv;
    const auto query = [&](int64_t r) { return i0 + r / group; };
    const auto head = [&](int64_t r) { return g * group + r % group; };
    // The cache row of token j: [slot, row within it].
    const auto row_of = [&](int64_t j) {
      return paged ? int64_t{table[b * pages + j / rows]} * rows + j % rows : b * rows + j;
    };
    const auto k_at = [&](int64_t j, int64_t d) { return k[(row_of(j) * Hkv + g) * D + d]; };
    const auto k_line = [&](int64_t j) { return k + (row_of(j) * Hkv + g) * D; };
    const auto v_row = [&](int64_t j) { return v + (row_of(j) * Hkv + g) * Dv; };
    attend_rows<kFast, false, T>(std::min(qn, Sq - i0) * group, D, Dv, scale,
                                 [&](int64_t r) { return q + ((b * Sq + query(r)) * H + head(r)) * D; },
                                 [&](int64_t r) { return visible(a.causal, query(r), Sq, lens[b]); }, k_at, k_line,
                                 v_row, [&](int64_t r) { return out + ((b * Sq + query(r)) * H + head(r)) * Dv; },
                                 [&](int64_t r) { return lse ? lse + (b * H + head(r)) * Sq + query(r) : nullptr; });
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
  // The blocks of queries: each within one sequence, from its first token.
  const int64_t qn = block_queries<kFast>(group);
  std::vector<std::pair<int32_t, int32_t>> blocks;  // (sequence, first token)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t r = cq[b]; r < cq[b + 1]; r += qn) blocks.emplace_back(static_cast<int32_t>(b), static_cast<int32_t>(r));
  }
  const double scale = scale_of(a.scale, D);
  const T* q = a.q.ptr<const T>();
  const T* k = a.k.ptr<const T>();
  const T* v = a.v.ptr<const T>();
  T* out = a.out.ptr<T>();
  float* lse = a.lse.present() ? a.lse.ptr<float>() : nullptr;
  const int64_t nblocks = static_cast<int64_t>(blocks.size());
  parallel_for(nblocks * Hkv, total_q * H * std::max<int64_t>(total_k, 1) * (D + Dv), [&](int64_t task) {
    const int64_t g = task % Hkv, b = blocks[static_cast<size_t>(task / Hkv)].first;
    const int64_t row0 = blocks[static_cast<size_t>(task / Hkv)].second;
    const auto token = [&](int64_t r) { return row0 + r / group; };
    const auto head = [&](int64_t r) { return g * group + r % group; };
    const int64_t k0 = ck[b], keys = ck[b + 1] - ck[b], Sq = cq[b + 1] - cq[b], i0 = row0 - cq[b];
    const auto k_at = [&](int64_t j, int64_t d) { return k[((k0 + j) * Hkv + g) * D + d]; };
    const auto k_line = [&](int64_t j) { return k + ((k0 + j) * Hkv + g) * D; };
    const auto v_row = [&](int64_t j) { return v + ((k0 + j) * Hkv + g) * Dv; };
    attend_rows<kFast, false, T>(std::min(qn, cq[b + 1] - row0) * group, D, Dv, scale,
                                 [&](int64_t r) { return q + (token(r) * H + head(r)) * D; },
                                 [&](int64_t r) { return visible(a.causal, i0 + r / group, Sq, keys); }, k_at, k_line,
                                 v_row, [&](int64_t r) { return out + (token(r) * H + head(r)) * Dv; },
                                 [&](int64_t r) { return lse ? lse + head(r) * total_q + token(r) : nullptr; });
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
