// The CPU attention's float32 path (reference.cpp's "cpu"): a block of up
// to kQueryRows queries of one (sequence, head) against the keys in chunks
// of kKeyChunk, the online softmax of FlashAttention over the chunks.
//
//   - A chunk's keys go to float32 once per block, K transposed ([D, chunk]:
//     a query's scores of 16 keys are 16 lanes of one sum over d) and V as
//     rows padded to whole vectors, so the products run as register tiles of
//     4 queries x 16 keys (scores) and 4 queries x 32 columns (P·V).
//   - A block of up to kFewRows rows (decode: a query's grouped heads) reads
//     K as rows (rows_scores: 8 keys' sums at once, no transposition, which
//     few queries would not repay).
//   - Each query's arithmetic is its own, in a fixed order (the chunks from
//     key 0, d and key ascending in each sum, no FMA contraction), so its
//     result depends only on whether its block has more than kFewRows rows,
//     which the forms of the op (dense, cache, packed) decide alike, not on
//     the ISA the loops were built for.
//   - exp is a polynomial the loops vectorize (blocked.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/float_convert.h"

namespace lowbit::core::cpu::attention {

inline constexpr int64_t kQueryRows = 128;  // queries a block
inline constexpr int64_t kKeyChunk = 128;  // keys a chunk
inline constexpr int64_t kFewRows = 16;    // blocks of up to this many rows read K as rows
inline constexpr int64_t kPrefetchRows = 4;  // keys ahead whose k and v rows are prefetched

// Scores of 4 queries (q4: 4 rows of D floats) against the chunk's keys
// [0, kc) of kt ([D, ld] float32): s4[r * ld + j] = scale * q_r · k_j.
void chunk_scores(const float* q4, int64_t D, const float* kt, int64_t ld, int64_t kc, float scale, float* s4);
// o4 (4 rows of ldo floats, Dvp of them used, a multiple of 32) += p4 (4 rows
// of ld weights, kc of them) times v ([kc, ldo] float32 rows).
void chunk_weighted_sum(const float* p4, int64_t ld, int64_t kc, const float* v, int64_t ldo, int64_t Dvp, float* o4);
// The scores of a few rows (nq rows of q, Dp floats apart): s[r * lds + j] = scale * q_r · k_j, k_j the rows
// of kr ([kc rounded up to 8, Dp] float32, Dp a multiple of 8, q and the rows zero past D), each sum in 8 lanes
// over d, then its lanes in pairs; scores up to kc rounded up to 8 are written.
void rows_scores(const float* q, int64_t nq, int64_t Dp, const float* kr, int64_t kc, float scale, float* s,
                 int64_t lds);
// o (Dvp, a multiple of 32) += p (kc weights) times v ([kc, Dvp] float32 rows).
void row_weighted_sum(const float* p, int64_t kc, const float* v, int64_t Dvp, float* o);
// One row's step over a chunk of scores x [0, n), the keys from `seen` on
// hidden: x becomes the weights exp(x - peak') (0 where hidden), with peak'
// the row's new maximum; sum and the row's output o (Dvp) are rescaled to it
// and sum gains the weights. seen > 0.
void row_step(float* x, int64_t n, int64_t seen, float& peak, float& sum, float* o, int64_t Dvp);

// One block: rows r < nq, query r at q_row(r) (T, D of them) seeing keys
// [0, count(r)); k_line(j) is key j's row (D of T), or with kKT k_line(d)
// the keys' elements d in key order (k stored [.., D, .., keys]); v_row(j) its v row (T, Dv);
// out_row(r) gets the output, lse(r) (when not null) the log-sum-exp. A row
// without keys gets zeros and -inf. Scratch is the calling thread's.
template <class T, bool kKT, class QRow, class Count, class KLine, class VRow, class OutRow, class Lse>
void attend_block_f32(int64_t nq, int64_t D, int64_t Dv, double scale, const QRow& q_row, const Count& count,
                      const KLine& k_line, const VRow& v_row, const OutRow& out_row, const Lse& lse) {
  constexpr int64_t kc_max = kKeyChunk;
  const int64_t Dvp = (Dv + 31) / 32 * 32, rows4 = (nq + 3) / 4 * 4;
  thread_local std::vector<float> q, kt, v, s, o, peak, sum, row;
  thread_local std::vector<int64_t> counts;
  // A block of few rows (a query's heads that share a kv head, or one head alone) reads k as rows: no
  // transposition. Its q rows are Dp floats apart, zero past D.
  const bool few = nq <= kFewRows && !kKT;
  const int64_t Dp = (D + 7) / 8 * 8, qd = few ? Dp : D;
  q.assign(static_cast<size_t>(rows4 * qd), 0.0f);
  kt.resize(static_cast<size_t>((few ? Dp : D) * kc_max));
  row.resize(static_cast<size_t>(D));
  v.resize(static_cast<size_t>(kc_max * Dvp));
  s.resize(static_cast<size_t>(rows4 * kc_max));
  o.assign(static_cast<size_t>(rows4 * Dvp), 0.0f);
  peak.assign(static_cast<size_t>(rows4), -std::numeric_limits<float>::infinity());
  sum.assign(static_cast<size_t>(rows4), 0.0f);
  int64_t keys = 0;
  counts.resize(static_cast<size_t>(nq));
  for (int64_t r = 0; r < nq; ++r) {
    const T* qr = q_row(r);
    for (int64_t d = 0; d < D; ++d) q[static_cast<size_t>(r * qd + d)] = to_f32(qr[d]);
    counts[static_cast<size_t>(r)] = count(r);
    keys = std::max(keys, counts[static_cast<size_t>(r)]);
  }
  const float sc = static_cast<float>(scale);
  for (int64_t j0 = 0; j0 < keys; j0 += kc_max) {
    const int64_t kc = std::min(kc_max, keys - j0);
    if constexpr (kKT) {
      for (int64_t d = 0; d < D; ++d) {
        const T* kd = k_line(d) + j0;
        float* dst = kt.data() + d * kc_max;
        for (int64_t j = 0; j < kc; ++j) dst[j] = to_f32(kd[j]);
      }
    }
    for (int64_t j = 0; j < kc; ++j) {
      // Rows a few keys ahead: a head's keys lie a token's heads apart (paged: pages apart), past the hardware
      // prefetchers' reach, so each row would otherwise wait on its own misses.
      if (j + kPrefetchRows < keys - j0) {
        const char* kn = kKT ? nullptr : reinterpret_cast<const char*>(k_line(j0 + j + kPrefetchRows));
        const char* vn = reinterpret_cast<const char*>(v_row(j0 + j + kPrefetchRows));
        for (int64_t off = 0; off < D * static_cast<int64_t>(sizeof(T)); off += 64) {
          if (kn) __builtin_prefetch(kn + off);
        }
        for (int64_t off = 0; off < Dv * static_cast<int64_t>(sizeof(T)); off += 64) __builtin_prefetch(vn + off);
      }
      if constexpr (!kKT) {
        const T* kj = k_line(j0 + j);
        if (few) {  // as a row
          float* dst = kt.data() + j * Dp;
          for (int64_t d = 0; d < D; ++d) dst[d] = to_f32(kj[d]);
          for (int64_t d = D; d < Dp; ++d) dst[d] = 0.0f;
        } else {  // the row converted whole, then its elements to their columns
          for (int64_t d = 0; d < D; ++d) row[static_cast<size_t>(d)] = to_f32(kj[d]);
          for (int64_t d = 0; d < D; ++d) kt[static_cast<size_t>(d * kc_max + j)] = row[static_cast<size_t>(d)];
        }
      }
      const T* vj = v_row(j0 + j);
      float* vr = v.data() + j * Dvp;
      for (int64_t e = 0; e < Dv; ++e) vr[e] = to_f32(vj[e]);
      for (int64_t e = Dv; e < Dvp; ++e) vr[e] = 0.0f;
    }
    // A tile of 4 rows none of which sees this chunk's keys (causal rows above the diagonal) skips it.
    const auto sees = [&](int64_t r0) {
      int64_t most = 0;
      for (int64_t r = r0; r < std::min(r0 + 4, nq); ++r) most = std::max(most, counts[static_cast<size_t>(r)]);
      return most > j0;
    };
    if (few) {
      int64_t nr = nq;  // rows past the last that sees the chunk are skipped (causal)
      while (nr > 0 && counts[static_cast<size_t>(nr - 1)] <= j0) --nr;
      rows_scores(q.data(), nr, Dp, kt.data(), kc, sc, s.data(), kc_max);
    } else {
      for (int64_t r0 = 0; r0 < nq; r0 += 4) {
        if (sees(r0)) chunk_scores(q.data() + r0 * D, D, kt.data(), kc_max, kc, sc, s.data() + r0 * kc_max);
      }
    }
    for (int64_t r = 0; r < nq; ++r) {
      float* sr = s.data() + r * kc_max;
      const int64_t seen = std::clamp<int64_t>(counts[static_cast<size_t>(r)] - j0, 0, kc);
      if (seen == 0) {  // nothing new for this row: its weights are 0
        std::fill(sr, sr + kc, 0.0f);
        continue;
      }
      row_step(sr, kc, seen, peak[static_cast<size_t>(r)], sum[static_cast<size_t>(r)], o.data() + r * Dvp, Dvp);
    }
    if (few && nq == 1) {
      if (counts[0] > j0) row_weighted_sum(s.data(), kc, v.data(), Dvp, o.data());
    } else {
      for (int64_t r0 = 0; r0 < nq; r0 += 4) {
        if (sees(r0)) chunk_weighted_sum(s.data() + r0 * kc_max, kc_max, kc, v.data(), Dvp, Dvp, o.data() + r0 * Dvp);
      }
    }
  }
  for (int64_t r = 0; r < nq; ++r) {
    T* dst = out_row(r);
    float* l = lse(r);
    const float total = sum[static_cast<size_t>(r)];
    if (counts[static_cast<size_t>(r)] <= 0) {
      for (int64_t e = 0; e < Dv; ++e) dst[e] = from_f32<T>(0.0f);
      if (l) *l = -std::numeric_limits<float>::infinity();
      continue;
    }
    const float inv = 1.0f / total;
    for (int64_t e = 0; e < Dv; ++e) dst[e] = from_f32<T>(o[static_cast<size_t>(r * Dvp + e)] * inv);
    if (l) *l = peak[static_cast<size_t>(r)] + std::log(total);
  }
}

}  // namespace lowbit::core::cpu::attention
