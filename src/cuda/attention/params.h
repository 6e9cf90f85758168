// What the attention kernels (docs/attention.md, "On CUDA") are given: one
// struct for the three forms of the op, host and device code alike.
//
// Every form is a batch of sequences. Sequence b has Sq queries (tokens
// token0 .. token0 + Sq - 1 of q, each with H heads) and Skv keys; key j of
// kv head g is row key_row(b, j) of k and v, seen as [rows, Hkv, D] and
// [rows, Hkv, Dv]:
//   dense    token0 = b * Sq,          key_row = b * Skv + j
//            (k_layout bdhs: k[b, d, g, j] instead)
//   varlen   token0 = cu_q[b],         key_row = cu_k[b] + j,   Sq, Skv from cu_q, cu_k
//   kvcache  token0 = b * Sq,          key_row = b * S_max + j (contiguous), or
//            table[b, j / P] * P + j % P (paged);              Skv = seqlens[b]
// The lengths and offsets are read on the device; the host knows only the
// shapes.
#pragma once

#include <cstdint>

namespace lowbit::cuda::attention {

enum class Form : int32_t { dense, varlen, kvcache };

struct FlashParams {
  const void* q;           // [total_q, H, D]
  const void* k;           // [rows, Hkv, D], or [B, D, Hkv, Skv] (bdhs)
  const void* v;           // [rows, Hkv, Dv]
  void* out;               // [total_q, H, Dv]
  float* lse;              // null unless asked for: [B, H, Sq], varlen [H, total_q]
  float* part_o;           // splits > 1: [splits, total_q * H, Dv], each range's output normalized by its own sum
  float* part_lse;         // splits > 1: [splits, total_q * H], each range's log-sum-exp (-inf: no key)
  const int32_t* cu_q;     // varlen [B + 1]
  const int32_t* cu_k;     // varlen [B + 1]
  const int32_t* seqlens;  // kvcache [B]
  const int32_t* table;    // kvcache [B, max_pages]; null: a contiguous cache
  Form form;
  int32_t bdhs;                     // dense: k as [B, D, Hkv, Skv]
  int32_t causal;                   // query i sees keys j <= i + Skv - Sq
  int32_t B, H, Hkv, group, D, Dv;  // group = H / Hkv: the query heads of a kv head
  int32_t Sq;                       // dense, kvcache: queries per sequence
  int32_t Skv;                      // dense: keys per sequence; kvcache: S_max (contiguous) or P (paged)
  int32_t max_pages;                // paged: block_table's columns
  int32_t pages;                    // paged: the cache's pages
  int32_t capacity;                 // kvcache: the most keys a sequence holds (S_max, or max_pages * P)
  int64_t total_q;                  // q's tokens
  int64_t total_k;                  // varlen: k's tokens
  int32_t m_tiles;                  // dense, kvcache: M tiles of a (sequence, kv head)
  int32_t splits;                   // key ranges a (sequence, kv head, M tile) is cut into (1: none)
  int32_t split_tiles;              // key tiles of a range
  float scale_log2;                 // scale * log2(e): scores in the base-2 domain
};

// The lse index of query i (token `token`) of sequence b, head h.
__host__ __device__ inline int64_t lse_index(const FlashParams& p, int b, int h, int64_t i, int64_t token) {
  return p.form == Form::varlen ? int64_t{h} * p.total_q + token : (int64_t{b} * p.H + h) * p.Sq + i;
}

}  // namespace lowbit::cuda::attention
