// The vectorized loops of the CPU matmul fast path: the dot-product tile
// kernel (dot.cpp) and the decoders that dequantize runs of packed codes
// (decode.cpp). Each is built for several instruction sets and picked at run
// time, so the library stays portable while hot loops use wide vectors.
#pragma once

#include <cstdint>

#include "core/weight_format.h"

namespace lowbit::core::cpu::gemm {

// out[i] = table16[code of element k0 + i] for i < len: codes of `bits`
// (1, 2 or 4) in a rows-layout stream; k0 % 8 == 0 (group and tile starts
// are). table16 holds 16 floats, of which the first 2^bits are read.
void decode_small(const uint8_t* row, int bits, int64_t k0, int64_t len, const float* table16, float* out);
// A whole row of K 4-bit codes (groups of gl, gl even or >= K) as bf16: group g's value of code c is
// dequant(rule, vtab16[c], scales[g], zeros[g]) (1 and 0 where null) rounded to bf16 as f32_to_bf16; 32 codes
// a vpermw on AVX-512 BW.
void decode4_row_bf16(const uint8_t* row, int64_t K, int64_t gl, const float* vtab16, DequantRule rule,
                      const float* scales, const float* zeros, uint16_t* out);
// out[i] = table16[code of element e0 + i] * scale for i < len: bitsandbytes'
// 4-bit stream (two codes a byte, the high nibble first), one block's run.
void decode_bnb4(const uint8_t* packed, int64_t e0, int64_t len, const float* table16, float scale, float* out);
// The few-rows products of low-bit weights (gemv_bnb4.cpp on AVX-512; the
// Highway kernels of gemv4_hwy.cpp and gemv8_hwy.cpp elsewhere and for other
// code widths): each W row streamed once, its codes decoded in registers.
struct Gemv4Table {
  float values[16];           // the codes' values
  uint16_t bf16[32];          // the same rounded to bf16, twice (vpermw reads 5 index bits)
  uint8_t bf16_bytes[2][16];  // byte b of each bf16 value (vpshufb tables)
  uint8_t f32_bytes[4][16];   // byte b of each fp32 value
  // For zero-point code z (gemv4_table with zeros): values[i] - values[z] rounded to bf16, twice, and its bytes.
  uint16_t zero_bf16[16][32];
  uint8_t zero_bf16_bytes[16][2][16];
  // 8-bit codes (gemv8_table): their kind (sint, uint, fp8) and every code's value (zero points).
  WeightKind kind8;
  const float* vtab256;
};
// The tables of values16; the zero-point ones only where `zeros` (256 roundings a call otherwise wasted).
Gemv4Table gemv4_table(const float* values16, bool zeros);
Gemv4Table gemv8_table(WeightKind kind, const float* vtab256);
// The order of two 4-bit codes in a byte: bitsandbytes' (the first element in the high nibble) or the rows
// layout's (in the low one).
enum class Nibbles { high_first, low_first };
// fp32 A, 4-bit codes of either order (bnb4_gemv_fits: a CPU with a kernel,
// K and the blocksize it takes): out[m] = Σ_k a_m[k] · w[k] for rows <= 4
// rows of A against one row of W (row: its K / 2 bytes, scales: its blocks'
// absmax or scales), each A row first reordered by bnb4_split_a for the
// codes' order into ax (ldx floats apart). The weights are the table's fp32
// values.
bool bnb4_gemv_fits(int64_t K, int64_t blocksize);
// The most rows of A the few-rows path takes in groups of 4 (from 4 rows on,
// where it beats the tiles on this CPU's kernel): 4 on AVX-512, 64 with the
// Highway kernel.
int64_t bnb4_gemv_max_rows();
void bnb4_split_a(const float* a, int64_t K, Nibbles order, float* ax);
void bnb4_gemv_row(const uint8_t* row, int64_t K, int64_t blocksize, const float* scales, const Gemv4Table& t,
                   const float* ax, int64_t ldx, int rows, float* out);
// bf16 A, codes of `bits` (gemv4_bf16_fits: K, the blocksize and zero points
// the kernel takes: the AVX-512 BF16 one, 4-bit codes only, K a multiple of
// 128 and blocks of 32, 64 or a multiple of 128 (128 with zero points); the
// Highway ones (gemv4_hwy.h) 1, 2 and 4 bits, K whole steps and blocks of
// whole 16-byte spans of codes that divide a step or are whole steps; and
// 8 bits (gemv8_hwy.h: int8, uint8 and fp8 E4M3 by gemv8_table, exact
// weights), K and blocks whole steps), for
// w.count (1 or 2) rows of W at once: acc16 ([w.count][rows][16] floats)
// gets each (W row, A row) pair's 16 lane sums (their total is the dot
// product). Zero points (codes into the table, as quantized zeros are) make
// a block's weights (value − values[zero]) · scale, rounded to bf16 (small
// integers: exact). Without them the table is the values rounded to bf16.
// A is bf16 (a_bf16) or fp32: fp32 A takes the Highway kernels, whose
// products are fp32 (the AVX-512 BF16 kernel rounds A to bf16), so its
// weights are exact where the table's values are exact in bf16.
// permute_a_bf16 orders each A row (bf16 a, else fp32 a32; columns perm[k]
// when perm is given) as the kernel reads it, into ap of
// gemv4_a_bytes(bits, a_bf16) bytes an element (bf16 for AVX-512, fp32 for
// Highway), for 4-bit codes of either nibble order:
// bitsandbytes' high nibble first or the rows layout's low nibble first (1
// and 2 bits: the rows layout's, low bits first). Products and sums in fp32
// (vdpbf16ps: bf16 subnormals count as zero).
struct Gemv4Rows {
  const uint8_t* codes[2];  // each row's packed codes
  const float* scales[2];   // each row's blocks' scales
  const uint8_t* zeros[2];  // each row's blocks' zero-point codes, or null
  int count;                // rows: 1 or 2
};
bool gemv4_bf16_fits(int64_t K, int64_t blocksize, int bits, bool zeros, bool a_bf16);
// The most rows of A the few-rows path takes for codes of `bits`, where it beats the large-M path (oneDNN):
// 64 for the AVX-512 BF16 kernel; for the Highway ones 32 (1, 2, 4 bits) and 16 (8 bits; 8 on fp32 A).
int64_t gemv4_bf16_max_rows(int bits, bool a_bf16);
int64_t gemv4_a_bytes(int bits, bool a_bf16);
void permute_a_bf16(const uint16_t* a, const float* a32, const int32_t* perm, int64_t K, int bits, Nibbles order,
                    void* ap);
// ap: the first of `rows` permuted rows, ldap elements apart.
void gemv4_rows_bf16(const Gemv4Rows& w, int64_t K, int64_t blocksize, int bits, const Gemv4Table& t, const void* ap,
                     int64_t ldap, int rows, float* acc16, bool a_bf16);
// 8-bit codes: int8 / uint8 values converted, fp8 (E4M3) decoded, any other
// kind through vtab[256].
void decode_bytes(const uint8_t* row, WeightKind kind, int64_t k0, int64_t len, const float* vtab, float* out);
// f16 / bf16 codes converted exactly (core::f16_to_f32's values).
void decode_halves(const uint8_t* row, bool bf16, int64_t k0, int64_t len, float* out);
// t[i] = dequant(rule, t[i], s, z) for i < len: the same fp32 steps, no FMA.
void apply_rule(DequantRule rule, float* t, int64_t len, float s, float z);

}  // namespace lowbit::core::cpu::gemm
