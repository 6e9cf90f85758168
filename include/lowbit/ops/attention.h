// Attention (docs/attention.md): BitBLAS' FlashAtten grown into the form a
// serving stack calls.
//
//   flash_attention: out = softmax(scale · q · kᵀ + mask) · v per batch and
//     head, q [B, Sq, H, D], k and v [B, Skv, Hkv, D] and [B, Skv, Hkv, Dv]
//     (k as [B, D, Hkv, Skv] with KLayout::bdhs, FlashAtten's "ntn"); head
//     h reads kv head h / (H / Hkv) (grouped-query; multi-query when
//     Hkv = 1). scale 0 means 1 / sqrt(D). causal: query i sees the keys
//     j <= i + Skv - Sq (aligned bottom-right, as flash-attn; torch's SDPA
//     aligns top-left: j <= i, the same when Sq == Skv). A query that sees no
//     key gives zeros and a log-sum-exp of -inf. lse (optional) [B, H, Sq]
//     float32: log(sum_j exp(s_j)) of each query's scores s_j (natural
//     log), so callers can merge partial attentions.
//   flash_attention_kvcache: the same for queries against a KV cache (decode,
//     chunked prefill): sequence b's keys are the first cache_seqlens[b]
//     tokens of its cache, token j at k_cache[b, j] (contiguous, k_cache
//     [B, S_max, Hkv, D]) or at row j % P of page block_table[b, j / P]
//     (paged as vLLM lays it out, k_cache [pages, P, Hkv, D]); causal as
//     above with Skv = cache_seqlens[b]. The lengths and pages live on the
//     device: the CPU checks them (an error naming the entry).
//   flash_attention_varlen: a batch of sequences of their own lengths packed
//     along the token axis: q [total_q, H, D], k and v [total_k, Hkv, D/Dv];
//     sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1
//     and its keys those of cu_seqlens_k; causal as above per sequence;
//     lse [H, total_q] (flash-attn's varlen layout).
//   The reference sums in float64 and rounds each output once.
#pragma once

#include <cstdint>

#include "lowbit/ops/declare_op.h"
#include "lowbit/tensor.h"

namespace lowbit {

enum class KLayout : uint8_t {
  bshd,  // [B, Skv, Hkv, D], as q and v ("nnn")
  bdhs,  // [B, D, Hkv, Skv] ("ntn")
};

struct FlashAttentionArgs {
  static constexpr const char* kName = "flash_attention";
  TensorRef q;    // f16/bf16/f32 [B, Sq, H, D], contiguous
  TensorRef k;    // q's dtype, [B, Skv, Hkv, D] or [B, D, Hkv, Skv] (k_layout), contiguous
  TensorRef v;    // q's dtype [B, Skv, Hkv, Dv], contiguous
  TensorRef out;  // q's dtype [B, Sq, H, Dv], contiguous
  TensorRef lse;  // f32 [B, H, Sq], contiguous; optional
  double scale = 0.0;
  bool causal = false;
  KLayout k_layout = KLayout::bshd;
};

LOWBIT_DECLARE_OP(FlashAttentionArgs)

struct FlashAttentionKvcacheArgs {
  static constexpr const char* kName = "flash_attention_kvcache";
  TensorRef q;              // f16/bf16/f32 [B, Sq, H, D], contiguous
  TensorRef k_cache;        // q's dtype: [B, S_max, Hkv, D], or [pages, P, Hkv, D] with block_table; contiguous
  TensorRef v_cache;        // q's dtype, k_cache's leading dims, then Dv; contiguous
  TensorRef cache_seqlens;  // i32 [B]: the cache tokens sequence b's queries see
  TensorRef block_table;    // i32 [B, max_pages]: optional (paged); the first ceil(cache_seqlens[b] / P) are read
  TensorRef out;            // q's dtype [B, Sq, H, Dv], contiguous
  TensorRef lse;            // f32 [B, H, Sq], contiguous; optional
  double scale = 0.0;
  bool causal = false;
};

LOWBIT_DECLARE_OP(FlashAttentionKvcacheArgs)

struct FlashAttentionResult {
  Tensor out;
  Tensor lse;  // absent unless asked for
};

// The allocating call: out (and lse when return_lse) on q's device.
FlashAttentionResult flash_attention(const TensorRef& q, const TensorRef& k, const TensorRef& v, bool causal = false,
                                     double scale = 0.0, bool return_lse = false, KLayout k_layout = KLayout::bshd,
                                     Stream stream = {});

struct FlashAttentionVarlenArgs {
  static constexpr const char* kName = "flash_attention_varlen";
  TensorRef q;             // f16/bf16/f32 [total_q, H, D], contiguous
  TensorRef k;             // q's dtype [total_k, Hkv, D], contiguous
  TensorRef v;             // q's dtype [total_k, Hkv, Dv], contiguous
  TensorRef cu_seqlens_q;  // i32 [B + 1]: 0, then each sequence's end row, non-decreasing, ending at total_q
  TensorRef cu_seqlens_k;  // i32 [B + 1], likewise ending at total_k
  TensorRef out;           // q's dtype [total_q, H, Dv], contiguous
  TensorRef lse;           // f32 [H, total_q], contiguous; optional
  double scale = 0.0;
  bool causal = false;
};

LOWBIT_DECLARE_OP(FlashAttentionVarlenArgs)

// The allocating call of flash_attention_varlen.
FlashAttentionResult flash_attention_varlen(const TensorRef& q, const TensorRef& k, const TensorRef& v,
                                            const TensorRef& cu_seqlens_q, const TensorRef& cu_seqlens_k,
                                            bool causal = false, double scale = 0.0, bool return_lse = false,
                                            Stream stream = {});

// The allocating call of flash_attention_kvcache (block_table absent: a contiguous cache).
FlashAttentionResult flash_attention_kvcache(const TensorRef& q, const TensorRef& k_cache, const TensorRef& v_cache,
                                             const TensorRef& cache_seqlens, const TensorRef& block_table = {},
                                             bool causal = false, double scale = 0.0, bool return_lse = false,
                                             Stream stream = {});

}  // namespace lowbit
