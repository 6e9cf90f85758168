// What a matmul kernel launch reads (plain data, filled on the host by
// src/cuda/gemm/matmul.cu from MatmulArgs, passed by value).
#pragma once

#include <cstdint>

namespace lowbit::cuda::gemm {

enum class OutKind : uint8_t { f32, f16, bf16 };
// The dtype of the tiles layout's scales (kept as given), and its bytes.
enum class ScaleKind : uint8_t { f32, f16, bf16 };
constexpr int scale_bytes(ScaleKind k) { return k == ScaleKind::f32 ? 4 : 2; }

struct Params {
  // A [M, K] fp16/bf16 bits, rows lda apart; perm i32 [K] (A's column of
  // packed column k) or null. Kernels reading A directly (small M tiles)
  // get A with perm applied, 16-byte aligned rows and zeros up to a whole
  // chunk (a copy in the workspace when the caller's A is not so).
  const uint16_t* A = nullptr;
  const int32_t* perm = nullptr;
  int64_t lda = 0;
  int64_t M = 0, N = 0, K = 0;
  bool a_vec = false;  // A's rows 16-byte aligned and no perm: 16-byte loads

  // The packed weight in the `tiles` layout (src/core/weight_format.h):
  // qweight holds tiles, k_tiles of them per row tile; the scales
  // (tscale, [G, np] of scale_kind) and zero codes (zcodes, u8 [G, np]) are
  // transposed, np = N padded to 16.
  int64_t k_tiles = 0;
  int64_t np = 0;
  const void* tscale = nullptr;
  ScaleKind scale_kind = ScaleKind::f32;
  const uint8_t* zcodes = nullptr;

  // The packed weight in the `rows` layout (docs/gemm.md).
  const uint8_t* qweight = nullptr;
  int64_t row_bytes = 0;
  const float* scale = nullptr;     // f32 [N, G] or null (no scaling)
  const float* zeros = nullptr;     // f32 [N, G] (original / rescale) or null
  const uint8_t* qzeros = nullptr;  // quantized zeros: G streams of N codes, qzeros_bytes apart
  int64_t qzeros_bytes = 0;
  const float* bias = nullptr;  // f32 [N] or null
  int64_t gs = 0;               // group length (K for one group per row)
  int gs_shift = -1;            // log2(gs) when a power of two
  int64_t G = 1;

  // Output: out [M, N], or with splits > 1 fp32 partial sums [splits, M, N]
  // that the reduce kernel adds in split order (then bias, then rounding).
  void* out = nullptr;
  OutKind out_kind = OutKind::f32;
  float* partial = nullptr;
  int64_t k_split = 0;  // columns per split (a multiple of the kernel's K step)
  int splits = 1;

  // The format (src/core/weight_format.h): type, dequantization rule, bits.
  uint8_t wtype = 0;  // WeightType
  uint8_t rule = 0;   // core::DequantRule
  int bits = 4;
  // Integer codes under a magic number (decoders.cuh): value - zero =
  // x * code_mul - (code_mul * magic + code_bias + zero), x = magic + (code ^ sign flip).
  uint32_t xor_word = 0;
  float code_mul = 1.0f;
  float code_bias = 0.0f;
  float table[16] = {};  // 4-bit table kinds
};

}  // namespace lowbit::cuda::gemm
