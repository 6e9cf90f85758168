// flash_attention's front end (lowbit/ops/attention.h): the checks, the
// dispatch and the allocating call.
#include "lowbit/ops/attention.h"

#include <cmath>
#include <vector>

#include "core/check.h"
#include "ops/common.h"
#include "ops/dispatch.h"

namespace lowbit {
namespace {

struct Dims {
  int64_t B, Sq, H, D, Skv, Hkv, Dv;
};

// The dims of a call, its q, k and v checked.
Dims dims_of(const char* op, const TensorRef& q, const TensorRef& k, const TensorRef& v, KLayout layout) {
  LOWBIT_REQUIRE(layout == KLayout::bshd || layout == KLayout::bdhs, ErrorCode::invalid_argument, op,
                 ": k_layout must be bshd or bdhs (got value ", static_cast<int>(layout), ")");
  core::require_present(op, "q", q);
  core::require_dtype(op, "q", q, {DType::f16, DType::bf16, DType::f32});
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef*>{"q", &q}, {"k", &k}, {"v", &v}}) {
    core::require_present(op, name, *t);
    LOWBIT_REQUIRE(t->ndim == 4, ErrorCode::invalid_argument, op, ": ", name, " must be 4-D (",
                   name == std::string("k") && layout == KLayout::bdhs ? "[B, D, Hkv, Skv]"
                   : name == std::string("q")                          ? "[B, Sq, H, D]"
                                                                       : "[B, Skv, Hkv, D]",
                   "; got ", t->ndim, "-D ", core::shape_str(*t), ")");
    if (t != &q) core::require_dtype(op, name, *t, {q.dtype});
    core::require_contiguous(op, name, *t);
  }
  Dims d{};
  d.B = q.size(0), d.Sq = q.size(1), d.H = q.size(2), d.D = q.size(3);
  const bool t = layout == KLayout::bdhs;
  d.Skv = t ? k.size(3) : k.size(1), d.Hkv = k.size(2);
  const int64_t kD = t ? k.size(1) : k.size(3);
  d.Dv = v.size(3);
  LOWBIT_REQUIRE(d.D >= 1 && d.Dv >= 1, ErrorCode::invalid_argument, op, ": head dims must be positive (got D = ", d.D,
                 ", Dv = ", d.Dv, ")");
  LOWBIT_REQUIRE(k.size(0) == d.B && v.size(0) == d.B, ErrorCode::invalid_argument, op,
                 ": q, k and v must share the batch (got ", d.B, ", ", k.size(0), ", ", v.size(0), ")");
  LOWBIT_REQUIRE(kD == d.D, ErrorCode::invalid_argument, op, ": k's head dim must be q's ", d.D, " (got ", kD, ")");
  LOWBIT_REQUIRE(v.size(1) == d.Skv && v.size(2) == d.Hkv, ErrorCode::invalid_argument, op,
                 ": v must be [B, Skv, Hkv, Dv] with k's Skv ", d.Skv, " and Hkv ", d.Hkv, " (got ",
                 core::shape_str(v), ")");
  LOWBIT_REQUIRE(d.Hkv >= 1 && d.H % d.Hkv == 0, ErrorCode::invalid_argument, op,
                 ": q's heads must be a multiple of k's and v's (grouped-query; got H = ", d.H, ", Hkv = ", d.Hkv,
                 ")");
  return d;
}

// The dims of a kvcache call, its q, caches, lengths and block table checked.
Dims kvcache_dims_of(const FlashAttentionKvcacheArgs& a) {
  const char* op = FlashAttentionKvcacheArgs::kName;
  core::require_present(op, "q", a.q);
  core::require_dtype(op, "q", a.q, {DType::f16, DType::bf16, DType::f32});
  const bool paged = a.block_table.present();
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef*>{"q", &a.q}, {"k_cache", &a.k_cache},
                                {"v_cache", &a.v_cache}}) {
    core::require_present(op, name, *t);
    LOWBIT_REQUIRE(t->ndim == 4, ErrorCode::invalid_argument, op, ": ", name, " must be 4-D (",
                   t == &a.q ? "[B, Sq, H, D]" : paged ? "[pages, P, Hkv, D]" : "[B, S_max, Hkv, D]", "; got ",
                   t->ndim, "-D ", core::shape_str(*t), ")");
    if (t != &a.q) core::require_dtype(op, name, *t, {a.q.dtype});
    core::require_contiguous(op, name, *t);
  }
  Dims d{};
  d.B = a.q.size(0), d.Sq = a.q.size(1), d.H = a.q.size(2), d.D = a.q.size(3);
  d.Skv = a.k_cache.size(1), d.Hkv = a.k_cache.size(2), d.Dv = a.v_cache.size(3);
  LOWBIT_REQUIRE(d.D >= 1 && d.Dv >= 1, ErrorCode::invalid_argument, op, ": head dims must be positive (got D = ", d.D,
                 ", Dv = ", d.Dv, ")");
  LOWBIT_REQUIRE(a.k_cache.size(3) == d.D, ErrorCode::invalid_argument, op, ": k_cache's head dim must be q's ", d.D,
                 " (got ", a.k_cache.size(3), ")");
  LOWBIT_REQUIRE(a.v_cache.size(0) == a.k_cache.size(0) && a.v_cache.size(1) == d.Skv && a.v_cache.size(2) == d.Hkv,
                 ErrorCode::invalid_argument, op, ": v_cache must share k_cache's leading dims ",
                 core::shape_str(a.k_cache), " (got ", core::shape_str(a.v_cache), ")");
  LOWBIT_REQUIRE(d.Hkv >= 1 && d.H % d.Hkv == 0, ErrorCode::invalid_argument, op,
                 ": q's heads must be a multiple of the caches' (grouped-query; got H = ", d.H, ", Hkv = ", d.Hkv,
                 ")");
  if (!paged) {
    LOWBIT_REQUIRE(a.k_cache.size(0) == d.B, ErrorCode::invalid_argument, op,
                   ": a contiguous k_cache holds one sequence per batch row: ", d.B, " (got ", a.k_cache.size(0),
                   "; give block_table for a paged cache)");
  } else {
    // [B, max_pages]: the shape check names both shapes.
    ops::require_shaped(op, "block_table", a.block_table, {DType::i32},
                        {d.B, a.block_table.ndim == 2 ? a.block_table.size(1) : 0});
  }
  ops::require_shaped(op, "cache_seqlens", a.cache_seqlens, {DType::i32}, {d.B});
  return d;
}

// The dims of a varlen call (B: the sequences; Sq, Skv: total_q, total_k), its arrays checked.
Dims varlen_dims_of(const FlashAttentionVarlenArgs& a) {
  const char* op = FlashAttentionVarlenArgs::kName;
  core::require_present(op, "q", a.q);
  core::require_dtype(op, "q", a.q, {DType::f16, DType::bf16, DType::f32});
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef*>{"q", &a.q}, {"k", &a.k}, {"v", &a.v}}) {
    core::require_present(op, name, *t);
    LOWBIT_REQUIRE(t->ndim == 3, ErrorCode::invalid_argument, op, ": ", name, " must be 3-D (",
                   t == &a.q ? "[total_q, H, D]" : "[total_k, Hkv, D]", "; got ", t->ndim, "-D ", core::shape_str(*t),
                   ")");
    if (t != &a.q) core::require_dtype(op, name, *t, {a.q.dtype});
    core::require_contiguous(op, name, *t);
  }
  Dims d{};
  d.Sq = a.q.size(0), d.H = a.q.size(1), d.D = a.q.size(2);
  d.Skv = a.k.size(0), d.Hkv = a.k.size(1), d.Dv = a.v.size(2);
  LOWBIT_REQUIRE(d.D >= 1 && d.Dv >= 1, ErrorCode::invalid_argument, op, ": head dims must be positive (got D = ", d.D,
                 ", Dv = ", d.Dv, ")");
  LOWBIT_REQUIRE(a.k.size(2) == d.D, ErrorCode::invalid_argument, op, ": k's head dim must be q's ", d.D, " (got ",
                 a.k.size(2), ")");
  LOWBIT_REQUIRE(a.v.size(0) == d.Skv && a.v.size(1) == d.Hkv, ErrorCode::invalid_argument, op,
                 ": v must be [total_k, Hkv, Dv] with k's total_k ", d.Skv, " and Hkv ", d.Hkv, " (got ",
                 core::shape_str(a.v), ")");
  LOWBIT_REQUIRE(d.Hkv >= 1 && d.H % d.Hkv == 0, ErrorCode::invalid_argument, op,
                 ": q's heads must be a multiple of k's and v's (grouped-query; got H = ", d.H, ", Hkv = ", d.Hkv,
                 ")");
  core::require_present(op, "cu_seqlens_q", a.cu_seqlens_q);
  LOWBIT_REQUIRE(a.cu_seqlens_q.ndim == 1 && a.cu_seqlens_q.size(0) >= 1, ErrorCode::invalid_argument, op,
                 ": cu_seqlens_q must be 1-D [B + 1] (got ", core::shape_str(a.cu_seqlens_q), ")");
  d.B = a.cu_seqlens_q.size(0) - 1;
  ops::require_shaped(op, "cu_seqlens_q", a.cu_seqlens_q, {DType::i32}, {d.B + 1});
  ops::require_shaped(op, "cu_seqlens_k", a.cu_seqlens_k, {DType::i32}, {d.B + 1});
  return d;
}

}  // namespace

void check(const FlashAttentionVarlenArgs& a) {
  const char* op = FlashAttentionVarlenArgs::kName;
  const Dims d = varlen_dims_of(a);
  ops::require_shaped(op, "out", a.out, {a.q.dtype}, {d.Sq, d.H, d.Dv});
  if (a.lse.present()) ops::require_shaped(op, "lse", a.lse, {DType::f32}, {d.H, d.Sq});
  LOWBIT_REQUIRE(std::isfinite(a.scale), ErrorCode::invalid_argument, op,
                 ": scale must be finite (0: 1 / sqrt(D); got ", a.scale, ")");
  core::require_same_device(op, {{"q", &a.q},
                                 {"k", &a.k},
                                 {"v", &a.v},
                                 {"cu_seqlens_q", &a.cu_seqlens_q},
                                 {"cu_seqlens_k", &a.cu_seqlens_k},
                                 {"out", &a.out},
                                 {"lse", &a.lse}});
}
size_t workspace_size(const FlashAttentionVarlenArgs& a) { return ops::backend_workspace(a, a.q.device); }
void run(const FlashAttentionVarlenArgs& a, void* ws, Stream s) { ops::dispatch(a, a.q.device, ws, s); }

FlashAttentionResult flash_attention_varlen(const TensorRef& q, const TensorRef& k, const TensorRef& v,
                                            const TensorRef& cu_seqlens_q, const TensorRef& cu_seqlens_k, bool causal,
                                            double scale, bool return_lse, Stream stream) {
  FlashAttentionVarlenArgs x{q, k, v, cu_seqlens_q, cu_seqlens_k, {}, {}, scale, causal};
  const Dims d = varlen_dims_of(x);
  FlashAttentionResult r;
  r.out = Tensor::empty({d.Sq, d.H, d.Dv}, q.dtype, q.device, stream);
  if (return_lse) r.lse = Tensor::empty({d.H, d.Sq}, DType::f32, q.device, stream);
  x.out = r.out.ref();
  x.lse = r.lse.ref();
  ops::run_with_workspace(x, q.device, stream);
  return r;
}

void check(const FlashAttentionKvcacheArgs& a) {
  const char* op = FlashAttentionKvcacheArgs::kName;
  const Dims d = kvcache_dims_of(a);
  ops::require_shaped(op, "out", a.out, {a.q.dtype}, {d.B, d.Sq, d.H, d.Dv});
  if (a.lse.present()) ops::require_shaped(op, "lse", a.lse, {DType::f32}, {d.B, d.H, d.Sq});
  LOWBIT_REQUIRE(std::isfinite(a.scale), ErrorCode::invalid_argument, op,
                 ": scale must be finite (0: 1 / sqrt(D); got ", a.scale, ")");
  core::require_same_device(op, {{"q", &a.q},
                                 {"k_cache", &a.k_cache},
                                 {"v_cache", &a.v_cache},
                                 {"cache_seqlens", &a.cache_seqlens},
                                 {"block_table", &a.block_table},
                                 {"out", &a.out},
                                 {"lse", &a.lse}});
}
size_t workspace_size(const FlashAttentionKvcacheArgs& a) { return ops::backend_workspace(a, a.q.device); }
void run(const FlashAttentionKvcacheArgs& a, void* ws, Stream s) { ops::dispatch(a, a.q.device, ws, s); }

FlashAttentionResult flash_attention_kvcache(const TensorRef& q, const TensorRef& k_cache, const TensorRef& v_cache,
                                             const TensorRef& cache_seqlens, const TensorRef& block_table, bool causal,
                                             double scale, bool return_lse, Stream stream) {
  FlashAttentionKvcacheArgs x{q, k_cache, v_cache, cache_seqlens, block_table, {}, {}, scale, causal};
  const Dims d = kvcache_dims_of(x);
  FlashAttentionResult r;
  r.out = Tensor::empty({d.B, d.Sq, d.H, d.Dv}, q.dtype, q.device, stream);
  if (return_lse) r.lse = Tensor::empty({d.B, d.H, d.Sq}, DType::f32, q.device, stream);
  x.out = r.out.ref();
  x.lse = r.lse.ref();
  ops::run_with_workspace(x, q.device, stream);
  return r;
}

void check(const FlashAttentionArgs& a) {
  const char* op = FlashAttentionArgs::kName;
  const Dims d = dims_of(op, a.q, a.k, a.v, a.k_layout);
  ops::require_shaped(op, "out", a.out, {a.q.dtype}, {d.B, d.Sq, d.H, d.Dv});
  if (a.lse.present()) ops::require_shaped(op, "lse", a.lse, {DType::f32}, {d.B, d.H, d.Sq});
  LOWBIT_REQUIRE(std::isfinite(a.scale), ErrorCode::invalid_argument, op,
                 ": scale must be finite (0: 1 / sqrt(D); got ", a.scale, ")");
  core::require_same_device(op, {{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"out", &a.out}, {"lse", &a.lse}});
}
size_t workspace_size(const FlashAttentionArgs& a) { return ops::backend_workspace(a, a.q.device); }
void run(const FlashAttentionArgs& a, void* ws, Stream s) { ops::dispatch(a, a.q.device, ws, s); }

FlashAttentionResult flash_attention(const TensorRef& q, const TensorRef& k, const TensorRef& v, bool causal,
                                     double scale, bool return_lse, KLayout k_layout, Stream stream) {
  const Dims d = dims_of(FlashAttentionArgs::kName, q, k, v, k_layout);
  FlashAttentionResult r;
  r.out = Tensor::empty({d.B, d.Sq, d.H, d.Dv}, q.dtype, q.device, stream);
  if (return_lse) r.lse = Tensor::empty({d.B, d.H, d.Sq}, DType::f32, q.device, stream);
  ops::run_with_workspace(FlashAttentionArgs{q, k, v, r.out, r.lse.ref(), scale, causal, k_layout}, q.device, stream);
  return r;
}

}  // namespace lowbit
