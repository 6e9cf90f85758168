// The C ABI of the attention ops (lowbit/c/lowbit.h, "attention"): DLTensors
// in, the op's Args out, then the op's own check and run.
#include "capi/capi.h"
#include "lowbit/ops/attention.h"

using namespace lowbit;  // NOLINT(google-build-using-namespace): this file only forwards
using capi::guarded;
using capi::run_op;
using capi::to_ref;

lowbit_status lowbit_flash_attention(const DLTensor* q, const DLTensor* k, const DLTensor* v, int causal, double scale,
                                     int k_layout, DLTensor* out, DLTensor* lse, void* stream) {
  constexpr const char* op = FlashAttentionArgs::kName;
  return guarded(op, [&] {
    const FlashAttentionArgs x{to_ref(op, "q", q),     to_ref(op, "k", k),   to_ref(op, "v", v),
                               to_ref(op, "out", out), to_ref(op, "lse", lse), scale,
                               causal != 0,            static_cast<KLayout>(k_layout)};
    run_op(x, x.q.device, stream);
  });
}

lowbit_status lowbit_flash_attention_varlen(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                            const DLTensor* cu_seqlens_q, const DLTensor* cu_seqlens_k, int causal,
                                            double scale, DLTensor* out, DLTensor* lse, void* stream) {
  constexpr const char* op = FlashAttentionVarlenArgs::kName;
  return guarded(op, [&] {
    const FlashAttentionVarlenArgs x{to_ref(op, "q", q),
                                     to_ref(op, "k", k),
                                     to_ref(op, "v", v),
                                     to_ref(op, "cu_seqlens_q", cu_seqlens_q),
                                     to_ref(op, "cu_seqlens_k", cu_seqlens_k),
                                     to_ref(op, "out", out),
                                     to_ref(op, "lse", lse),
                                     scale,
                                     causal != 0};
    run_op(x, x.q.device, stream);
  });
}

lowbit_status lowbit_flash_attention_kvcache(const DLTensor* q, const DLTensor* k_cache, const DLTensor* v_cache,
                                             const DLTensor* cache_seqlens, const DLTensor* block_table, int causal,
                                             double scale, DLTensor* out, DLTensor* lse, void* stream) {
  constexpr const char* op = FlashAttentionKvcacheArgs::kName;
  return guarded(op, [&] {
    const FlashAttentionKvcacheArgs x{to_ref(op, "q", q),
                                      to_ref(op, "k_cache", k_cache),
                                      to_ref(op, "v_cache", v_cache),
                                      to_ref(op, "cache_seqlens", cache_seqlens),
                                      to_ref(op, "block_table", block_table),
                                      to_ref(op, "out", out),
                                      to_ref(op, "lse", lse),
                                      scale,
                                      causal != 0};
    run_op(x, x.q.device, stream);
  });
}
