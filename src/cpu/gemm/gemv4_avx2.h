// The AVX2 + FMA few-rows kernels of 4-bit weights (gemv4_avx2.cpp), which
// gemv_bnb4.cpp picks where AVX-512 is absent. A is fp32 in their own order
// (permute_a), the steps 64 elements of K; blocks of 32 or a multiple of 64.
#pragma once

#include <cstdint>

#include "cpu/gemm/kernels.h"

namespace lowbit::core::cpu::gemm::avx2 {

// Whether K and the blocks fit the kernels' 64-element steps.
bool fits(int64_t K, int64_t blocksize);
// Where element j (< 64) of a step goes in the step's 64 floats, codes in `order`, for the kernel whose table
// values are `bytes` wide (2: bf16, rows_bf16; 4: fp32, row_f32).
int64_t a_position(int64_t j, Nibbles order, int bytes);
// One A row (bf16 a16, else fp32 a32; columns perm[k] when perm is given) into ap (K floats) in a_position order.
void permute_a(const uint16_t* a16, const float* a32, const int32_t* perm, int64_t K, Nibbles order, int bytes,
               float* ap);
// gemv4_rows_bf16 on A from permute_a: acc16 gets 8 lane sums and 8 zeros a pair. The table's bf16 values.
void rows_bf16(const Gemv4Rows& w, int64_t K, int64_t blocksize, const Gemv4Table& t, const float* ap, int64_t ldap,
               int rows, float* acc16);
// bnb4_gemv_row on A from permute_a (high nibble first): the table's fp32 values.
void row_f32(const uint8_t* codes, int64_t K, int64_t blocksize, const float* scales, const Gemv4Table& t,
             const float* ax, int64_t ldx, int rows, float* out);

}  // namespace lowbit::core::cpu::gemm::avx2
