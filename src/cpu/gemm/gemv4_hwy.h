// The portable few-rows kernels of 4-bit weights (gemv4_hwy.cpp), one
// Highway source built for each SIMD target (SSE4, AVX2, AVX-512 on x86;
// NEON, SVE on Arm) and picked at run time by the CPU's features under
// LOWBIT_CPU_ISA's cap. gemv_bnb4.cpp takes them where its AVX-512 kernels
// do not run, and for codes of 1, 2 and 4 bits. A is fp32 in the kernels' own
// order (permute_a); a step is one vector of code bytes: 8 / bits elements
// of K a byte.
#pragma once

#include <cstdint>

#include "cpu/gemm/kernels.h"

namespace lowbit::core::cpu::gemm::hwy_gemv4 {

struct Kernels {
  int64_t bytes;     // code bytes a step: 16 (128-bit vectors), 32 (256-bit), 64 (512-bit)
  const char* name;  // the Highway target, for messages and benchmarks
  // gemv4_rows_bf16 on A from permute_a: acc16 gets the kernel's lane sums (zeros past them) a pair. The
  // table's bf16 values.
  void (*rows_bf16)(const Gemv4Rows& w, int64_t K, int64_t blocksize, int bits, const Gemv4Table& t, const float* ap,
                    int64_t ldap, int rows, float* acc16);
  // bnb4_gemv_row on A from permute_a (high nibble first): the table's fp32 values.
  void (*row_f32)(const uint8_t* codes, int64_t K, int64_t blocksize, const float* scales, const Gemv4Table& t,
                  const float* ax, int64_t ldx, int rows, float* out);
};

// The kernels of the best target this CPU and LOWBIT_CPU_ISA allow (read once).
const Kernels& kernels();
// The elements of K a step of codes of `bits` takes.
inline int64_t step_of(const Kernels& k, int bits) { return k.bytes * (8 / bits); }
// Whether K and the blocks fit a step of `step` elements of codes of `bits`: K whole steps, blocks of whole
// 16-byte spans of codes that divide a step or are whole steps (whole steps where there are zero points).
bool fits(int64_t step, int bits, int64_t K, int64_t blocksize, bool zeros);
// Where element j (< step) of a step goes in the step's floats, codes of `bits` (4-bit ones in `order`), for
// the kernel whose table values are `bytes` wide (2: bf16, rows_bf16; 4: fp32, row_f32).
int64_t a_position(int64_t step, int bits, int64_t j, Nibbles order, int bytes);
// One A row (bf16 a16, else fp32 a32; columns perm[k] when perm is given) into ap (K floats) in a_position
// order.
void permute_a(int64_t step, int bits, const uint16_t* a16, const float* a32, const int32_t* perm, int64_t K,
               Nibbles order, int bytes, float* ap);

}  // namespace lowbit::core::cpu::gemm::hwy_gemv4
