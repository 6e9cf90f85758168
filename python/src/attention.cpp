// Bindings of the attention ops (include/lowbit/ops/attention.h): into `out`
// (and `lse`) when given, else new arrays; returns (out, lse or None).
#include "lowbit/ops/attention.h"

#include <optional>
#include <string>

#include "arrays.h"

namespace lowbit::python {
namespace {

KLayout k_layout_of(const std::string& name) {
  if (name == "bshd") return KLayout::bshd;
  if (name == "bdhs") return KLayout::bdhs;
  throw Error(ErrorCode::invalid_argument,
              "flash_attention: k_layout must be 'bshd' or 'bdhs' (got '" + name + "')");
}

// Into the caller's out (and lse), returning None; else through `allocate` (the op's allocating call, given the
// filled Args), returning (out, lse or None).
template <class Args, class Allocate>
nb::object run_or_allocate(Args& x, const std::optional<OutArray>& out, const std::optional<OutArray>& lse,
                           bool return_lse, const CallContext& ctx, const Allocate& allocate) {
  if (out) {
    x.out = to_ref(Args::kName, "out", *out);
    if (lse) x.lse = to_ref(Args::kName, "lse", *lse);
    run_op(x, x.q.device, ctx.stream);
    return nb::none();
  }
  const FlashAttentionResult r = without_gil([&] { return allocate(x); });
  if (!return_lse) return nb::make_tuple(to_py(r.out), nb::none());
  return nb::make_tuple(to_py(r.out), to_py(r.lse, "lse"));
}

nb::object flash_attention_py(const InArray& q, const InArray& k, const InArray& v, bool causal, double scale,
                              const std::string& k_layout, bool return_lse, const std::optional<OutArray>& out,
                              const std::optional<OutArray>& lse, nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const char* op = FlashAttentionArgs::kName;
  FlashAttentionArgs x{to_ref(op, "q", q), to_ref(op, "k", k), to_ref(op, "v", v), {}, {}, scale, causal,
                       k_layout_of(k_layout)};
  return run_or_allocate(x, out, lse, return_lse, ctx, [&](const FlashAttentionArgs& a) {
    return flash_attention(a.q, a.k, a.v, causal, scale, return_lse, a.k_layout, ctx.stream);
  });
}

nb::object kvcache_py(const InArray& q, const InArray& k_cache, const InArray& v_cache, const InArray& cache_seqlens,
                      const std::optional<InArray>& block_table, bool causal, double scale, bool return_lse,
                      const std::optional<OutArray>& out, const std::optional<OutArray>& lse, nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const char* op = FlashAttentionKvcacheArgs::kName;
  FlashAttentionKvcacheArgs x{to_ref(op, "q", q),
                              to_ref(op, "k_cache", k_cache),
                              to_ref(op, "v_cache", v_cache),
                              to_ref(op, "cache_seqlens", cache_seqlens),
                              to_ref(op, "block_table", block_table),
                              {},
                              {},
                              scale,
                              causal};
  return run_or_allocate(x, out, lse, return_lse, ctx, [&](const FlashAttentionKvcacheArgs& a) {
    return flash_attention_kvcache(a.q, a.k_cache, a.v_cache, a.cache_seqlens, a.block_table, causal, scale,
                                   return_lse, ctx.stream);
  });
}

nb::object varlen_py(const InArray& q, const InArray& k, const InArray& v, const InArray& cu_seqlens_q,
                     const InArray& cu_seqlens_k, bool causal, double scale, bool return_lse,
                     const std::optional<OutArray>& out, const std::optional<OutArray>& lse, nb::handle stream_arg) {
  const CallContext ctx = call_context(stream_arg);
  const CallScope scope(ctx);
  const char* op = FlashAttentionVarlenArgs::kName;
  FlashAttentionVarlenArgs x{to_ref(op, "q", q),
                             to_ref(op, "k", k),
                             to_ref(op, "v", v),
                             to_ref(op, "cu_seqlens_q", cu_seqlens_q),
                             to_ref(op, "cu_seqlens_k", cu_seqlens_k),
                             {},
                             {},
                             scale,
                             causal};
  return run_or_allocate(x, out, lse, return_lse, ctx, [&](const FlashAttentionVarlenArgs& a) {
    return flash_attention_varlen(a.q, a.k, a.v, a.cu_seqlens_q, a.cu_seqlens_k, causal, scale, return_lse,
                                  ctx.stream);
  });
}

}  // namespace

void bind_attention(nb::module_& m) {
  using nb::arg;
  m.def("flash_attention", &flash_attention_py, arg("q"), arg("k"), arg("v"), arg("causal"), arg("scale"),
        arg("k_layout"), arg("return_lse"), arg("out").none(), arg("lse").none(), arg("stream") = 0,
        "Attention softmax(scale q k^T) v; (out, lse or None), or None when out was given.");
  m.def("flash_attention_kvcache", &kvcache_py, arg("q"), arg("k_cache"), arg("v_cache"), arg("cache_seqlens"),
        arg("block_table").none(), arg("causal"), arg("scale"), arg("return_lse"), arg("out").none(),
        arg("lse").none(), arg("stream") = 0,
        "Attention against a KV cache (contiguous, or paged with block_table); as flash_attention.");
  m.def("flash_attention_varlen", &varlen_py, arg("q"), arg("k"), arg("v"), arg("cu_seqlens_q"), arg("cu_seqlens_k"),
        arg("causal"), arg("scale"), arg("return_lse"), arg("out").none(), arg("lse").none(), arg("stream") = 0,
        "Attention over sequences packed along the tokens (cu_seqlens offsets); as flash_attention.");
}

}  // namespace lowbit::python
