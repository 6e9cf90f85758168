// The CPU fast path's tile engine. A task owns an [mb, nt] block of the
// output; for each chunk of kc columns it dequantizes the W tile [nt, kc]
// into fp32 (a decoder of the weight's storage) and accumulates the block
// with a register-blocked, vectorized dot-product kernel. Tasks spread over
// OpenMP threads; each W tile is decoded once per M block, so for M <= mb
// every weight element is decoded exactly once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/quant/parallel.h"
#include "lowbit/ops/kernel_config.h"
#include "lowbit/tensor.h"

namespace lowbit::core::cpu::gemm {

// Floats per k-step of the dot kernel (one AVX-512 register); A rows and W
// tiles are zero-padded to a multiple of it.
inline constexpr int kVec = 16;

struct TileConfig {
  int mb;  // output rows (of A) per task
  int nt;  // output columns (rows of W) per task
  int kc;  // columns of K per dequantized W tile; a multiple of kVec
};

// From GEMV-like to GEMM-like. The W tile [nt, kc] (<= 64 KB) and the
// accumulators [mb, nt] (<= 32 KB) live on each thread's stack, sized to
// stay in L1/L2 while the A block [mb, kc] streams through.
inline constexpr TileConfig kTileConfigs[] = {
    {8, 16, 512},    // small M: long K chunks, the tile is used by <= 8 rows
    {32, 32, 256},   // mid M
    {128, 64, 256},  // large M: a decoded tile serves 128 rows
};
inline constexpr int kNumTileConfigs = static_cast<int>(sizeof(kTileConfigs) / sizeof(kTileConfigs[0]));
inline constexpr int kMaxTileFloats = 64 * 256;
inline constexpr int kMaxAccFloats = 128 * 64;

// A tile config by value: family "cpu", block_m = mb, block_n = nt, block_k = kc.
KernelConfig kernel_config_of(const TileConfig& c);
// The configs for the prepared M (rows when none was prepared), best first.
std::vector<KernelConfig> tile_configs(int64_t rows, int64_t prepared_m);
// The config to run: `config` when given (one of kTileConfigs, else an error
// naming them), else the first of tile_configs.
const TileConfig& pick_tile_config(const char* op, const KernelConfig& config, int64_t rows, int64_t prepared_m);

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// c[i * ldc + j] += Σ_{k < kp} a[i * lda + k] · w[j * ldw + k] for i < mr,
// j < nr; kp a multiple of kVec (dot.cpp, one variant per instruction set).
void tile_dot(const float* a, int64_t lda, int mr, const float* w, int64_t ldw, int nr, int64_t kp, float* c,
              int64_t ldc);

// A [M, K] (f32/f16/bf16) into fp32 rows of lda floats (zero past K), its
// columns gathered through perm when given (perm[k] in [0, K)).
void prepare_a(const TensorRef& A, const int32_t* perm, int64_t M, int64_t K, int64_t lda, float* a32);

// decode(n0, nr, k0, kc, kp, tile): rows n0 .. n0+nr-1 of W, columns k0 ..
// k0+kc-1, dequantized into tile[r * kp + (k - k0)], zero in [kc, kp).
// store(m, n0, nr, acc): writes acc[0 .. nr-1] as out[m, n0 .. n0+nr-1].
template <class Decode, class Store>
void run_tiles(int64_t M, int64_t N, int64_t K, const float* a32, int64_t lda, const TileConfig& cfg,
               const Decode& decode, const Store& store) {
  const int64_t mblocks = (M + cfg.mb - 1) / cfg.mb;
  const int64_t nblocks = (N + cfg.nt - 1) / cfg.nt;
  // M-blocks of one N-tile are neighbours, so a thread's run of tasks reuses A.
  parallel_for(mblocks * nblocks, M * N * K / 8 + N * K, [&](int64_t task) {
    const int64_t m0 = (task % mblocks) * cfg.mb;
    const int64_t n0 = (task / mblocks) * cfg.nt;
    const int mr = static_cast<int>(std::min<int64_t>(cfg.mb, M - m0));
    const int nr = static_cast<int>(std::min<int64_t>(cfg.nt, N - n0));
    alignas(64) float tile[kMaxTileFloats];
    alignas(64) float acc[kMaxAccFloats];
    std::fill(acc, acc + mr * cfg.nt, 0.0f);
    for (int64_t k0 = 0; k0 < K; k0 += cfg.kc) {
      const int64_t kc = std::min<int64_t>(cfg.kc, K - k0);
      const int64_t kp = round_up(kc, kVec);
      decode(n0, nr, k0, kc, kp, tile);
      tile_dot(a32 + m0 * lda + k0, lda, mr, tile, kp, nr, kp, acc, cfg.nt);
    }
    for (int i = 0; i < mr; ++i) store(m0 + i, n0, nr, acc + i * cfg.nt);
  });
}

}  // namespace lowbit::core::cpu::gemm
