// Warp-level tensor-core instructions (sm_80+): mma.sync m16n8k16 with fp32
// accumulators, mma.sync m16n8k32 on s8 (s32 accumulators) and on e4m3
// (sm_89+), and the ldmatrix /
// stmatrix fragment moves of shared memory.
#pragma once

#include <cstdint>

#include "cuda/common/ptx/copy.cuh"

namespace lowbit::cuda::ptx {

// c[4] += a[16x16] · b[16x8] on fp16 operands (fragments as PTX lays them out for m16n8k16).
__device__ __forceinline__ void mma_m16n8k16_f16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                 uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// The same on bf16 operands.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// c[4] += a[16x32] · b[32x8] on s8 operands into s32, exact (wrapping past
// 2^31); the registers are laid out as mma_m16n8k32_e4m3's below.
__device__ __forceinline__ void mma_m16n8k32_s8(int32_t (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// c[4] += a[16x32] · b[32x8] on e4m3 operands (sm_89+; PTX ISA 8.4 for sm_90).
// With g = lane / 4 and t = lane % 4, each register holds 4 bytes of K:
//   a0: row g,     k 4t..4t+3     a1: row g + 8, k 4t..4t+3
//   a2: row g,     k 16+4t..+3    a3: row g + 8, k 16+4t..+3
//   b0: column g,  k 4t..4t+3     b1: column g,  k 16+4t..+3
//   c0, c1: row g, columns 2t, 2t+1;  c2, c3: row g + 8, the same columns.
// For rows with contiguous K these are the registers ldmatrix_x4 gives on
// 8x16-byte matrices (each b16 pair of a row is 4 bytes of K).
__device__ __forceinline__ void mma_m16n8k32_e4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
#endif

// Four 8x8 b16 matrices; lane i gives the row address of matrix i / 8, row
// i % 8 (16 contiguous bytes); lane l receives row l / 4, columns 2(l % 4),
// 2(l % 4) + 1 of each matrix: for rows of M with contiguous K these are
// the B fragments (b0, b1) of two m16n8k16 steps.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix_x4(r, smem_addr(row)); }

// ldmatrix_x4 transposed: lane l receives column l / 4, rows 2(l % 4),
// 2(l % 4) + 1 of each matrix: for rows of K with contiguous N (a row-major
// [K, N] operand) these are the B fragments (b0, b1) of m16n8k16 steps.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row));
}

// Four 8x8 matrices of 16-bit values: lane l's register i holds row l / 4,
// columns 2 (l % 4) + {0, 1} of matrix i (an mma accumulator fragment's
// layout); lane 8i + j gives the address of row j of matrix i (16 bytes).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// Four 8x8 matrices of 16-bit values stored transposed: lane l's register i
// holds row l / 4, columns 2 (l % 4) + {0, 1} of matrix i; lane 8i + j gives
// the address of row j of matrix i's transpose (its column j).
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

}  // namespace lowbit::cuda::ptx
