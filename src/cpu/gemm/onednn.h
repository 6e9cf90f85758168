// The GEMM for large M on the CPU: oneDNN's matmul, where the build found
// oneDNN (LOWBIT_WITH_ONEDNN; docs/gemm.md). The matmuls hand it their
// activations and cache-sized panels of their weight dequantized, both in
// bf16 (bf16 activations) or both in fp32 (others).
#pragma once

#include <cstdint>

namespace lowbit::core::cpu::gemm {

// Whether this build has oneDNN.
bool onednn_available();
// Whether oneDNN runs bf16 matmuls on this CPU (its bf16 kernels need AVX-512; asked once).
bool onednn_bf16_available();

// c[m][j] = sum over k of a[m][k] * w[j][k] for m < M, j < n: a rows lda apart, w rows of K, c fp32 rows ldc
// apart; fp32 sums (oneDNN's order). a and w bf16 (onednn_bf16_matmul, where onednn_bf16_available()) or fp32 (onednn_f32_matmul: exact
// products). Primitives are cached per shape. Only when onednn_available().
void onednn_bf16_matmul(int64_t M, int64_t n, int64_t K, const uint16_t* a, int64_t lda, const uint16_t* w, float* c,
                        int64_t ldc);
void onednn_f32_matmul(int64_t M, int64_t n, int64_t K, const float* a, int64_t lda, const float* w, float* c,
                       int64_t ldc);

}  // namespace lowbit::core::cpu::gemm
