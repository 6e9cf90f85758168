// The GEMM for large M on the CPU: oneDNN's bf16 matmul, where the build
// found oneDNN (LOWBIT_WITH_ONEDNN; docs/gemm.md). The matmuls hand it bf16
// activations and cache-sized panels of their weight dequantized to bf16.
#pragma once

#include <cstdint>

namespace lowbit::core::cpu::gemm {

// Whether this build has oneDNN.
bool onednn_available();

// c[m][j] = sum over k of a[m][k] * w[j][k] for m < M, j < n: a bf16 rows lda apart, w bf16 rows of K, c fp32
// rows ldc apart; fp32 sums (oneDNN's order). Primitives are cached per shape. Only when onednn_available().
void onednn_bf16_matmul(int64_t M, int64_t n, int64_t K, const uint16_t* a, int64_t lda, const uint16_t* w, float* c,
                        int64_t ldc);

// out[i] = x[i] rounded to bf16 (nearest even; NaN stays NaN), as core::f32_to_bf16.
void round_bf16(const float* x, int64_t count, uint16_t* out);

}  // namespace lowbit::core::cpu::gemm
