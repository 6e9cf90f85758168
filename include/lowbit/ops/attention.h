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

struct FlashAttentionResult {
  Tensor out;
  Tensor lse;  // absent unless asked for
};

// The allocating call: out (and lse when return_lse) on q's device.
FlashAttentionResult flash_attention(const TensorRef& q, const TensorRef& k, const TensorRef& v, bool causal = false,
                                     double scale = 0.0, bool return_lse = false, KLayout k_layout = KLayout::bshd,
                                     Stream stream = {});

}  // namespace lowbit
