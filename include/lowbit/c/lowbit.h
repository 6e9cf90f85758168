/* lowbit C ABI: the quantization ops, the mixed-precision matmul with its
 * importers, and bitsandbytes' matmul_4bit, over DLPack tensors (docs/c.md).
 *
 * Every op takes caller-allocated DLTensors (outputs included) and returns a
 * lowbit_status. On failure, lowbit_last_error() holds a message naming the
 * op, the argument, what was expected and what was given; it is thread-local
 * and reset to "" by every call that succeeds. No C++ exception ever crosses
 * this boundary.
 *
 * Tensors:
 *   - devices kDLCPU and kDLCUDA (device_id = CUDA ordinal); all tensors of
 *     one call on the same device;
 *   - dtypes: kDLFloat 32/16, kDLBfloat 16, kDLInt 8/32/64, kDLUInt 8, and
 *     fp8 as DLPack >= 1.0 encodes it (LOWBIT_DL_FLOAT8_E4M3FN = 10,
 *     LOWBIT_DL_FLOAT8_E5M2 = 12, bits 8). Frameworks without fp8 in their
 *     DLPack export may pass a uint8 tensor wherever an op wants
 *     float8_e4m3fn: the bytes are read as E4M3FN codes;
 *   - lanes must be 1; byte_offset is honoured; strides NULL means
 *     contiguous row-major, otherwise they are in elements (most ops require
 *     contiguous tensors and say so).
 *   - An optional tensor argument is NULL when absent.
 *
 * Streams: `stream` is a cudaStream_t (NULL = the default stream); CPU ops
 * ignore it and finish before returning. Scratch memory, where an op needs
 * any, is allocated and released by the call itself, stream-ordered on
 * `stream`: no call waits for the device.
 */
#ifndef LOWBIT_C_LOWBIT_H_
#define LOWBIT_C_LOWBIT_H_

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define LOWBIT_C_API
#else
#define LOWBIT_C_API __attribute__((visibility("default")))
#endif

/* The library version this header belongs to (compare with lowbit_version()
 * at run time). Kept equal to the CMake project version: the build checks. */
#define LOWBIT_VERSION_MAJOR 0
#define LOWBIT_VERSION_MINOR 1
#define LOWBIT_VERSION_PATCH 0
#define LOWBIT_VERSION_STRING "0.1.0"

/* DLPack >= 1.0 type codes, by number: the DLPack 0.6 header (Debian's)
 * does not define them, and a newer header defines them as enumerators. */
#define LOWBIT_DL_FLOAT8_E4M3FN 10
#define LOWBIT_DL_FLOAT8_E5M2 12

/* Values equal lowbit::ErrorCode (include/lowbit/error.h). */
typedef enum lowbit_status {
  LOWBIT_OK = 0,
  LOWBIT_INVALID_ARGUMENT = 1,  /* a shape, size, option or layout the op does not accept */
  LOWBIT_UNSUPPORTED_DTYPE = 2, /* a dtype the op (or this backend) does not handle */
  LOWBIT_DEVICE_MISMATCH = 3,   /* tensors of one call on different devices */
  LOWBIT_NO_BACKEND = 4,        /* no backend built for the device / op */
  LOWBIT_OUT_OF_MEMORY = 5,
  LOWBIT_DEVICE_ERROR = 6, /* the CUDA runtime reported a failure */
  LOWBIT_IO_ERROR = 7,
  LOWBIT_FORMAT_ERROR = 8,
  LOWBIT_INTERNAL = 9
} lowbit_status;

typedef enum lowbit_quant4_type { LOWBIT_QUANT4_NF4 = 0, LOWBIT_QUANT4_FP4 = 1 } lowbit_quant4_type;

/* A double-quantized absmax (bitsandbytes nested / compress_statistics):
 * absmax[b] = code[q[b]] * absmax2[b / blocksize] + offset[0]. */
typedef struct lowbit_nested_absmax {
  const DLTensor* code;   /* float32 [256] */
  const DLTensor* absmax; /* float32 [ceil(nblocks / blocksize)] */
  const DLTensor* offset; /* float32 [1] */
  int64_t blocksize;      /* 256 for 4-bit states */
} lowbit_nested_absmax;

/* ------------------------------------------------------------- library */

/* Message of the last failing call on this thread; "" after a success. */
LOWBIT_C_API const char* lowbit_last_error(void);
/* "ok", "invalid_argument", ...; "unknown" for values outside the enum. */
LOWBIT_C_API const char* lowbit_status_name(lowbit_status status);
/* "MAJOR.MINOR.PATCH" of the library loaded. */
LOWBIT_C_API const char* lowbit_version(void);
/* CUDA devices visible (0 without the CUDA backend or on failure, with
 * lowbit_last_error() set in that case). */
LOWBIT_C_API int lowbit_cuda_device_count(void);

/* ------------------------------------------------------------ 8-bit blockwise */

/* absmax[b] = max|x| over block b; out[i] = index of the code value nearest
 * to x[i] / absmax. input float32/float16/bfloat16 [n], code float32 [256],
 * out uint8 [n], absmax float32 [ceil(n / blocksize)]. */
LOWBIT_C_API lowbit_status lowbit_quantize_blockwise(const DLTensor* input, const DLTensor* code, DLTensor* out,
                                                     DLTensor* absmax, int64_t blocksize, void* stream);

/* out[i] = code[q[i]] * absmax[i / blocksize]. absmax is uint8 when `nested`
 * is given, float32 otherwise; out float32/float16/bfloat16 [n]. */
LOWBIT_C_API lowbit_status lowbit_dequantize_blockwise(const DLTensor* input, const DLTensor* code,
                                                       const DLTensor* absmax, const lowbit_nested_absmax* nested,
                                                       DLTensor* out, int64_t blocksize, void* stream);

/* ------------------------------------------------------------ 8-bit tensor-wise */

/* out[i] = index of the code value nearest to input[i] (no scale).
 * input float32/float16/bfloat16 [n], code float32 [256] sorted, out uint8 [n]. */
LOWBIT_C_API lowbit_status lowbit_quantize_no_absmax(const DLTensor* input, const DLTensor* code, DLTensor* out,
                                                     void* stream);
/* out[i] = code[input[i]]; out float32/float16/bfloat16 [n]. */
LOWBIT_C_API lowbit_status lowbit_dequantize_no_absmax(const DLTensor* input, const DLTensor* code, DLTensor* out,
                                                       void* stream);
/* absmax[0] = max|x| over the whole input (written on the input's device);
 * out[i] = index of the code value nearest to input[i] / absmax[0]. */
LOWBIT_C_API lowbit_status lowbit_quantize_tensorwise(const DLTensor* input, const DLTensor* code, DLTensor* out,
                                                      DLTensor* absmax, void* stream);
/* out[i] = code[input[i]] * absmax[0]. */
LOWBIT_C_API lowbit_status lowbit_dequantize_tensorwise(const DLTensor* input, const DLTensor* code,
                                                        const DLTensor* absmax, DLTensor* out, void* stream);

/* In place: mean[0] = mean(values); values -= mean[0] (the first step of
 * nested absmax quantization; fixed summation order). */
LOWBIT_C_API lowbit_status lowbit_absmax_center(DLTensor* values, DLTensor* mean, void* stream);

/* --------------------------------------------------------------- 4-bit */

/* NF4/FP4 codes packed two per byte, the even element in the high nibble.
 * out uint8 [(n + 1) / 2], absmax float32 [ceil(n / blocksize)]. */
LOWBIT_C_API lowbit_status lowbit_quantize_4bit(const DLTensor* input, DLTensor* out, DLTensor* absmax,
                                                int64_t blocksize, lowbit_quant4_type type, void* stream);

/* n comes from `out` (float32/float16/bfloat16). */
LOWBIT_C_API lowbit_status lowbit_dequantize_4bit(const DLTensor* input, const DLTensor* absmax,
                                                  const lowbit_nested_absmax* nested, DLTensor* out, int64_t blocksize,
                                                  lowbit_quant4_type type, void* stream);

/* ---------------------------------------------------- FP8 (DeepSeek-V3) */

/* 1 x block scaling over the last dim: out float8_e4m3fn (or uint8) like
 * input, scale float32 [..., K / block]; ue8m0 != 0 rounds scales up to
 * powers of two. */
LOWBIT_C_API lowbit_status lowbit_act_quant(const DLTensor* input, DLTensor* out, DLTensor* scale, int64_t block,
                                            int ue8m0, void* stream);

/* block x block scaling: input [N, K], out float8_e4m3fn (or uint8) [N, K],
 * scale float32 [ceil(N / block), ceil(K / block)]. */
LOWBIT_C_API lowbit_status lowbit_weight_quant(const DLTensor* input, DLTensor* out, DLTensor* scale, int64_t block,
                                               void* stream);

/* input float8_e4m3fn (or uint8) [N, K] -> out float32/float16/bfloat16. */
LOWBIT_C_API lowbit_status lowbit_weight_dequant(const DLTensor* input, const DLTensor* scale, DLTensor* out,
                                                 int64_t block, void* stream);

/* Block-scaled FP8 GEMM (DeepSeek-V3; docs/formats.md, "FP8 block GEMM"):
 * out[..., N] = sum over 128-wide K blocks kb of (a[..., kb] . b[:, kb]^T)
 * * a_s[..., kb] * b_s[n / 128, kb] (+ bias). a float8_e4m3fn (or uint8) [..., K],
 * K a multiple of 16; a_s float32 [..., ceil(K/128)]; b float8_e4m3fn (or
 * uint8) [N, K]; b_s float32 [ceil(N/128), ceil(K/128)]; bias float32 [N] or
 * NULL; out float32/float16/bfloat16 [..., N]. All contiguous. */
LOWBIT_C_API lowbit_status lowbit_fp8_gemm(const DLTensor* a, const DLTensor* a_s, const DLTensor* b,
                                           const DLTensor* b_s, const DLTensor* bias, DLTensor* out, void* stream);
/* Grouped, contiguous layout: a [M, K], a_s [M, ceil(K/128)], b [E, N, K],
 * b_s [E, ceil(N/128), ceil(K/128)], m_indices int32 [M] (the expert of each
 * row; -1: padding, its output row zeros), out [M, N]. */
LOWBIT_C_API lowbit_status lowbit_fp8_grouped_gemm_contiguous(const DLTensor* a, const DLTensor* a_s,
                                                              const DLTensor* b, const DLTensor* b_s,
                                                              const DLTensor* m_indices, DLTensor* out,
                                                              void* stream);
/* Grouped, masked layout: a [E, max_m, K], a_s [E, max_m, ceil(K/128)],
 * b [E, N, K], b_s [E, ceil(N/128), ceil(K/128)], masked_m int32 [E] on a's
 * device (expert e's first masked_m[e] rows; its other output rows zeros),
 * out [E, max_m, N]. */
LOWBIT_C_API lowbit_status lowbit_fp8_grouped_gemm_masked(const DLTensor* a, const DLTensor* a_s, const DLTensor* b,
                                                          const DLTensor* b_s, const DLTensor* masked_m, DLTensor* out,
                                                          void* stream);

/* ---------------------------------------------------------- int8 (LLM.int8) */

/* Row-wise int8: out int8 like input, row_stats float32 [rows]; with
 * threshold > 0, outlier_mask uint8 [K] (required then, NULL otherwise
 * allowed) marks outlier columns, which are zeroed in out. */
LOWBIT_C_API lowbit_status lowbit_int8_vectorwise_quant(const DLTensor* input, DLTensor* out, DLTensor* row_stats,
                                                        DLTensor* outlier_mask, float threshold, void* stream);

LOWBIT_C_API lowbit_status lowbit_int8_vectorwise_dequant(const DLTensor* input, const DLTensor* row_stats,
                                                          DLTensor* out, void* stream);

/* int8 GEMM (docs/int8.md): out int32 [..., N] = a int8 [..., K] . b int8
 * [N, K]^T, exact (K at most 131071). */
LOWBIT_C_API lowbit_status lowbit_int8_linear_matmul(const DLTensor* a, const DLTensor* b, DLTensor* out,
                                                     void* stream);
/* out[m, n] = float(a[m, n]) * (row_stats[m] * col_stats[n]) * (1 / 127^2)
 * (+ bias[n]), in float32 in that order: a int32 [..., N], row_stats float32
 * [rows], col_stats float32 [N], bias float32/float16/bfloat16 [N] or NULL,
 * out float32/float16/bfloat16 [..., N]. */
LOWBIT_C_API lowbit_status lowbit_int8_mm_dequant(const DLTensor* a, const DLTensor* row_stats,
                                                  const DLTensor* col_stats, const DLTensor* bias, DLTensor* out,
                                                  void* stream);
/* lowbit_int8_mm_dequant of lowbit_int8_linear_matmul(a, b) in one op (the same bits). */
LOWBIT_C_API lowbit_status lowbit_int8_scaled_mm(const DLTensor* a, const DLTensor* b, const DLTensor* row_stats,
                                                 const DLTensor* col_stats, const DLTensor* bias, DLTensor* out,
                                                 void* stream);
/* LLM.int8's outlier part, in place: out[m, n] += sum over the columns k with outlier_mask[k] != 0 of
 * a[m, k] * b[n, k] * b_stats[n] / 127, in float32 over ascending k, rounded once to out's dtype. a
 * float32/float16/bfloat16 [..., K], outlier_mask uint8 [K], b int8 [N, K], b_stats float32 [N], out a's
 * dtype [..., N]. */
LOWBIT_C_API lowbit_status lowbit_int8_linear_outliers(const DLTensor* a, const DLTensor* outlier_mask,
                                                       const DLTensor* b, const DLTensor* b_stats, DLTensor* out,
                                                       void* stream);
/* int8_linear's input gradient: grad_a[m, k] = sum over n of grad_out[m, n] * b[n, k] * b_stats[n] / 127,
 * in float32 over ascending n, rounded once to grad_out's dtype. grad_out float32/float16/bfloat16 [..., N],
 * b int8 [N, K], b_stats float32 [N], grad_a grad_out's dtype [..., K]. CPU only for now. */
LOWBIT_C_API lowbit_status lowbit_int8_linear_grad_input(const DLTensor* grad_out, const DLTensor* b,
                                                         const DLTensor* b_stats, DLTensor* grad_a, void* stream);
/* The LLM.int8 linear forward into out (a's dtype [..., N]): a's rows quantized (int8_vectorwise_quant at
 * threshold), lowbit_int8_scaled_mm with b, b_stats and bias (or NULL), then with threshold > 0 the outlier
 * columns by lowbit_int8_linear_outliers; temporaries from the device's allocator, nothing read on the host. */
LOWBIT_C_API lowbit_status lowbit_int8_linear(const DLTensor* a, const DLTensor* b, const DLTensor* b_stats,
                                              const DLTensor* bias, float threshold, DLTensor* out, void* stream);

/* ------------------------------------------------------- block-sparse */
/* out = beta * input + alpha * (bsr @ dense) (docs/sparse.md). The BSR matrix [*B, M, K] of BM x BK blocks:
 * crow_indices int32/int64 [*B, M / BM + 1], col_indices of its dtype [*B, nnz] (ascending in each block row,
 * no repeats), values float32/float16/bfloat16 [*B, nnz, BM, BK]. dense values' dtype [*D, K, N]; out
 * [broadcast(*B, *D), M, N]; input broadcast to out, not read when beta == 0 (NULL allowed then). Sums in
 * float64, rounded to float32, then to out's dtype. int8 values and dense: out and input int32, beta and alpha
 * integers, exact int64 sums wrapped to int32. CPU only for now. */
LOWBIT_C_API lowbit_status lowbit_bsr_dense_addmm(const DLTensor* input, const DLTensor* crow_indices,
                                                  const DLTensor* col_indices, const DLTensor* values, int64_t M,
                                                  int64_t K, const DLTensor* dense, double beta, double alpha,
                                                  DLTensor* out, void* stream);
/* SDDMM (docs/sparse.md): out_values [broadcast(*B, *D1, *D2), nnz, BM, BN] = beta * values + alpha * (mat1 @
 * mat2) at the stored blocks of the BSR (crow_indices, col_indices, values) [*B, M, N]; mat1 [*D1, M, K], mat2
 * [*D2, K, N] in the values' dtype; values not read when beta == 0. CPU only for now. */
LOWBIT_C_API lowbit_status lowbit_sampled_addmm(const DLTensor* crow_indices, const DLTensor* col_indices,
                                                const DLTensor* values, int64_t M, int64_t N, const DLTensor* mat1,
                                                const DLTensor* mat2, double beta, double alpha, DLTensor* out_values,
                                                void* stream);
/* out_values (values' dtype and shape): each row's stored elements of the BSR [*B, M, K] softmaxed together
 * (absent elements count as -inf). CPU only for now. */
LOWBIT_C_API lowbit_status lowbit_bsr_softmax(const DLTensor* crow_indices, const DLTensor* col_indices,
                                              const DLTensor* values, int64_t M, int64_t K, DLTensor* out_values,
                                              void* stream);
/* Scattered block products added into accumulators (docs/sparse.md, "scatter_mm"), in torch's index formats:
 * format 0 scatter_mm (c_indices [R + 1], pq [G, 2]; others [Q, Ks, Ns], accumulators [R, Ms, Ns]), 1
 * bsr_strided_mm (c_indices, r_offsets, p_offsets, q_offsets; others [B, K, N], accumulators [B, M, N], Ns = N /
 * split_n), 2 bsr_strided_mm_compressed (c_indices a BSR's crow_indices, r_offsets, q_offsets). blocks [P, Ms, Ks];
 * index arrays all int32 or all int64; the arrays a format does not take are NULL. CPU only for now. */
LOWBIT_C_API lowbit_status lowbit_scatter_mm(int format, const DLTensor* blocks, const DLTensor* others,
                                             const DLTensor* c_indices, const DLTensor* pq, const DLTensor* r_offsets,
                                             const DLTensor* p_offsets, const DLTensor* q_offsets, int64_t split_n,
                                             DLTensor* accumulators, void* stream);

/* Attention (docs/attention.md): out [B, Sq, H, Dv] = softmax(scale * q * k^T) * v per batch and head, q [B, Sq, H,
 * D], k [B, Skv, Hkv, D] (k_layout 0; 1: [B, D, Hkv, Skv]), v [B, Skv, Hkv, Dv], one float dtype, H a multiple of
 * Hkv; scale 0: 1 / sqrt(D); causal: query i sees keys j <= i + Skv - Sq. lse (NULL, or float32 [B, H, Sq]): each
 * query's log-sum-exp. CPU only for now. */
LOWBIT_C_API lowbit_status lowbit_flash_attention(const DLTensor* q, const DLTensor* k, const DLTensor* v, int causal,
                                                  double scale, int k_layout, DLTensor* out, DLTensor* lse,
                                                  void* stream);
/* The same against a KV cache (docs/attention.md): sequence b's keys are the first cache_seqlens[b] (int32 [B])
 * tokens of k_cache [B, S_max, Hkv, D] / v_cache [B, S_max, Hkv, Dv], or with block_table (int32 [B, max_pages];
 * NULL: contiguous) of the paged caches [pages, P, Hkv, D] / [pages, P, Hkv, Dv]. CPU only for now. */
/* The same over sequences packed along the tokens (docs/attention.md): q [total_q, H, D], k [total_k, Hkv, D], v
 * [total_k, Hkv, Dv], cu_seqlens_q / cu_seqlens_k int32 [B + 1] (0, each sequence's end row, the total); out
 * [total_q, H, Dv]; lse NULL or float32 [H, total_q]. CPU only for now. */
LOWBIT_C_API lowbit_status lowbit_flash_attention_varlen(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                                         const DLTensor* cu_seqlens_q, const DLTensor* cu_seqlens_k,
                                                         int causal, double scale, DLTensor* out, DLTensor* lse,
                                                         void* stream);
LOWBIT_C_API lowbit_status lowbit_flash_attention_kvcache(const DLTensor* q, const DLTensor* k_cache,
                                                          const DLTensor* v_cache, const DLTensor* cache_seqlens,
                                                          const DLTensor* block_table, int causal, double scale,
                                                          DLTensor* out, DLTensor* lse, void* stream);

/* 256 quantiles of input (n >= 256) at linspace(offset, 1 - offset, 256);
 * out float32 [256]. */
LOWBIT_C_API lowbit_status lowbit_estimate_quantiles(const DLTensor* input, DLTensor* out, float offset, void* stream);

/* bitsandbytes histogram_scatter_add_2d, in place: histogram[index1[i],
 * index2[i]] += source[i]. histogram float32 [maxdim1, maxdim2]; index1,
 * index2 int32 and source float32 of n elements each; all contiguous, on one
 * device. An index outside the histogram is LOWBIT_INVALID_ARGUMENT on the
 * CPU (nothing added) and skipped on CUDA (docs/formats.md). */
LOWBIT_C_API lowbit_status lowbit_histogram_scatter_add_2d(DLTensor* histogram, const DLTensor* index1,
                                                           const DLTensor* index2, const DLTensor* source,
                                                           void* stream);

/* ----------------------------------------------------------- code maps */
/* Each writes its values (float32, host memory) into out[0 .. *count) and
 * stores the number of values in *count (count may be NULL). With out ==
 * NULL and capacity == 0 it only reports *count. A capacity smaller than
 * the map gives LOWBIT_INVALID_ARGUMENT and writes nothing to out, but
 * still sets *count to the size needed. */

LOWBIT_C_API lowbit_status lowbit_create_dynamic_map(int is_signed, int max_exponent_bits, int total_bits, float* out,
                                                     size_t capacity, size_t* count);
LOWBIT_C_API lowbit_status lowbit_create_linear_map(int is_signed, int total_bits, int add_zero, float* out,
                                                    size_t capacity, size_t* count);
LOWBIT_C_API lowbit_status lowbit_create_normal_map(double offset, int use_extra_value, float* out, size_t capacity,
                                                    size_t* count);
LOWBIT_C_API lowbit_status lowbit_create_fp8_map(int is_signed, int exponent_bits, int precision_bits, int total_bits,
                                                 float* out, size_t capacity, size_t* count);
/* From quantiles already estimated (see lowbit_estimate_quantiles). */
LOWBIT_C_API lowbit_status lowbit_quantile_map_from_quantiles(const float* quantiles, size_t num_quantiles, float* out,
                                                              size_t capacity, size_t* count);
/* 16-entry table indexed by code: name "nf4", "fp4", "int4", "af4"
 * (blocksize 64 only) or "fp4_e2m1". */
LOWBIT_C_API lowbit_status lowbit_get_4bit_type(const char* name, int blocksize, float* out, size_t capacity,
                                                size_t* count);

/* ------------------------------------------------- mixed-precision matmul */
/* out[M, N] = A[M, K] . dequant(W)[N, K]^T (+ bias[N]), BitBLAS Matmul
 * semantics (docs/gemm.md). Use: describe the op with a lowbit_matmul_config,
 * create a lowbit_matmul for a device, pack the weight once (from integer
 * values with lowbit_matmul_transform_weight, or from a checkpoint through an
 * importer and lowbit_matmul_transform_quantized), then call
 * lowbit_matmul_forward for any M.
 *
 * Handles are opaque, owned by the caller, and released by their destroy
 * function (NULL is accepted there and ignored). A handle may be used from
 * several threads at once; destroying it while another call uses it is an
 * error of the caller. A packed weight keeps its own memory: the matmul and
 * the quantized weight it came from may be destroyed first. */

typedef struct lowbit_matmul lowbit_matmul;
typedef struct lowbit_packed_weight lowbit_packed_weight;
typedef struct lowbit_quantized_weight lowbit_quantized_weight;

/* Element formats of W; values equal lowbit::WeightType (lowbit/ops/gemm.h).
 * Integer kinds hold values (intN in [-2^(N-1), 2^(N-1) - 1], uintN in
 * [0, 2^N - 1], int1 in {-1, +1}); nf4, fp4 (bitsandbytes) and fp4_e2m1 (OCP
 * MX) hold 4-bit codes; fp8_e4m3 holds E4M3FN bits; float16 / bfloat16 are
 * unquantized weights. */
typedef enum lowbit_weight_type {
  LOWBIT_WEIGHT_INT8 = 0,
  LOWBIT_WEIGHT_INT4 = 1,
  LOWBIT_WEIGHT_INT2 = 2,
  LOWBIT_WEIGHT_INT1 = 3,
  LOWBIT_WEIGHT_UINT8 = 4,
  LOWBIT_WEIGHT_UINT4 = 5,
  LOWBIT_WEIGHT_UINT2 = 6,
  LOWBIT_WEIGHT_UINT1 = 7,
  LOWBIT_WEIGHT_NF4 = 8,
  LOWBIT_WEIGHT_FP4 = 9,
  LOWBIT_WEIGHT_FP4_E2M1 = 10,
  LOWBIT_WEIGHT_FP8_E4M3 = 11,
  LOWBIT_WEIGHT_FLOAT16 = 12,
  LOWBIT_WEIGHT_BFLOAT16 = 13
} lowbit_weight_type;

/* How zero points enter dequantization (with_zeros), v = the code's value:
 *   ORIGINAL   w = (v - z) * s    z has the scale's dtype
 *   RESCALE    w = v * s - z      z has the scale's dtype
 *   QUANTIZED  w = (v - zq) * s   zq an integer of W's type (GPTQ, AWQ) */
typedef enum lowbit_zeros_mode {
  LOWBIT_ZEROS_ORIGINAL = 0,
  LOWBIT_ZEROS_RESCALE = 1,
  LOWBIT_ZEROS_QUANTIZED = 2
} lowbit_zeros_mode;

/* lowbit::MatmulConfig. Fill it with lowbit_matmul_config_init, then set
 * N, K, W_dtype and what differs. Flags are 0 / non-zero. */
typedef struct lowbit_matmul_config {
  /* The batch sizes the op is prepared for (dynamic M: any M runs, with the
   * kernel config of the smallest prepared value >= M). NULL with num_M 0:
   * {1, 16, 32, 64, 128, 256, 512, 1024}. Copied by lowbit_matmul_create. */
  const int64_t* M;
  size_t num_M;
  int64_t N;
  int64_t K;
  DLDataType A_dtype;         /* float16 or bfloat16 */
  lowbit_weight_type W_dtype; /* default FLOAT16 */
  DLDataType accum_dtype;     /* float32; float16 allowed (a GPU speed option) */
  DLDataType out_dtype;       /* float16, bfloat16 or float32 */
  const char* layout;         /* "nt" (NULL means "nt"): A [M, K], W [N, K] */
  int with_bias;
  int64_t group_size; /* -1: one scale per row; else a multiple of 32 dividing K */
  int with_scaling;
  int with_zeros; /* integer W types only; needs with_scaling */
  lowbit_zeros_mode zeros_mode;
} lowbit_matmul_config;

/* The defaults of lowbit::MatmulConfig: M NULL (the default list), N = K = 0,
 * A_dtype and out_dtype float16, W_dtype FLOAT16, accum_dtype float32,
 * layout "nt", group_size -1, every flag 0, zeros_mode ORIGINAL. */
LOWBIT_C_API void lowbit_matmul_config_init(lowbit_matmul_config* config);
/* "int4", "nf4", "float16", ... (BitBLAS spelling); "unknown" out of range. */
LOWBIT_C_API const char* lowbit_weight_type_name(lowbit_weight_type type);

/* Checks the config and prepares the op for `device` (kDLCPU, or kDLCUDA
 * with a device_id below lowbit_cuda_device_count()). *out receives the
 * handle; it is left unchanged on failure. */
LOWBIT_C_API lowbit_status lowbit_matmul_create(const lowbit_matmul_config* config, DLDevice device,
                                                lowbit_matmul** out);
LOWBIT_C_API void lowbit_matmul_destroy(lowbit_matmul* matmul);

/* Packs a weight once into the matmul device's layout. weight [N, K]: int8 /
 * uint8 values of W's type (codes for nf4 / fp4 / fp4_e2m1; E4M3 bits as
 * uint8 or float8_e4m3fn for fp8_e4m3; the weight itself for float16 /
 * bfloat16); scale float [N, groups] (with_scaling); zeros [N, groups]
 * (with_zeros: the scale's dtype, or int8 / uint8 / int32 values of W's type
 * for QUANTIZED); bias float [N] (with_bias); perm int32 / int64 [K] or NULL:
 * a permutation of A's columns, column k of W multiplies A[:, perm[k]]. Inputs
 * may be on any device and are not kept. Values out of W's range are
 * errors. CUDA: the upload is ordered on the default stream and complete
 * before the first forward on the default stream or any stream that
 * synchronizes with it. */
LOWBIT_C_API lowbit_status lowbit_matmul_transform_weight(const lowbit_matmul* matmul, const DLTensor* weight,
                                                          const DLTensor* scale, const DLTensor* zeros,
                                                          const DLTensor* bias, const DLTensor* perm,
                                                          lowbit_packed_weight** out);
/* The same from an imported checkpoint weight; its format (W_dtype, N, K,
 * group_size, scaling, zeros, bias) must equal the matmul's config (see
 * lowbit_quantized_weight_config). */
LOWBIT_C_API lowbit_status lowbit_matmul_transform_quantized(const lowbit_matmul* matmul,
                                                             const lowbit_quantized_weight* weight,
                                                             lowbit_packed_weight** out);

/* out [..., N] (config out_dtype) = A [..., K] (config A_dtype) times the
 * packed weight, enqueued on `stream`. A, out and the weight on the matmul's
 * device; A and out contiguous. Scratch is stream-ordered on `stream`: the
 * call does not wait for the device. */
LOWBIT_C_API lowbit_status lowbit_matmul_forward(const lowbit_matmul* matmul, const DLTensor* A,
                                                 const lowbit_packed_weight* weight, DLTensor* out, void* stream);

/* Releases the packed weight's memory. CUDA: work using it must be finished
 * or ordered before the default stream. */
LOWBIT_C_API void lowbit_packed_weight_destroy(lowbit_packed_weight* weight);
/* The device the weight lives on (the matmul's). */
LOWBIT_C_API lowbit_status lowbit_packed_weight_device(const lowbit_packed_weight* weight, DLDevice* device);
/* Bytes of device memory its tensors hold (codes, scales, zeros, bias, perm). */
LOWBIT_C_API lowbit_status lowbit_packed_weight_nbytes(const lowbit_packed_weight* weight, size_t* nbytes);
/* The values every backend multiplies by: out float32 [N, K] in host memory
 * (kDLCPU), in A's original column order (perm undone). Waits for the
 * device when the weight is on CUDA. */
LOWBIT_C_API lowbit_status lowbit_packed_weight_dequantize(const lowbit_packed_weight* weight, DLTensor* out);

/* --------------------------------------------------------------- importers */
/* Checkpoint weights of GPTQ, AWQ and bitsandbytes into the unpacked form
 * (lowbit_quantized_weight, in host memory) without passing through lossy
 * floats. Then: read its format with lowbit_quantized_weight_config, create
 * a matmul from that config (choose A_dtype, out_dtype and M there), and pack
 * with lowbit_matmul_transform_quantized; the quantized weight may be
 * destroyed after packing. Input tensors may be on any device and are not
 * kept. *out is left unchanged on failure. */

/* GPTQ (AutoGPTQ / GPTQModel): qweight int32 [K * bits / 32, N] packed along
 * K (element k in bits (k % (32 / bits)) * bits); qzeros int32 [groups,
 * ceil(N * bits / 32)] packed along N the same way; scales float [groups, N];
 * g_idx int32 / int64 [K] or NULL (act-order: K is then permuted so groups
 * are contiguous); bias float [N] or NULL. bits 2, 4 or 8; group_size -1 for
 * one group over K. zero_plus_one != 0 for checkpoint_format "gptq" (v1
 * stores zero - 1), 0 for "gptq_v2". zeros_mode QUANTIZED keeps integer
 * zeros; ORIGINAL (exact float zeros) is needed for a v1 zero of 2^bits. */
LOWBIT_C_API lowbit_status lowbit_import_gptq(const DLTensor* qweight, const DLTensor* qzeros, const DLTensor* scales,
                                              const DLTensor* g_idx, const DLTensor* bias, int bits, int64_t group_size,
                                              int zero_plus_one, lowbit_zeros_mode zeros_mode,
                                              lowbit_quantized_weight** out);

/* AWQ (AutoAWQ GEMM format, 4-bit): qweight int32 [K, N / 8] packed along N,
 * nibble i of word j holding column 8j + {0, 2, 4, 6, 1, 3, 5, 7}[i]; qzeros
 * int32 [groups, N / 8] the same; scales float [groups, N]; bias float [N]
 * or NULL; w = (q - z) * s. */
LOWBIT_C_API lowbit_status lowbit_import_awq(const DLTensor* qweight, const DLTensor* qzeros, const DLTensor* scales,
                                             const DLTensor* bias, int64_t group_size, lowbit_quantized_weight** out);

/* bitsandbytes Linear4bit: the weight's packed codes (uint8, (N * K + 1) / 2
 * elements, as lowbit_quantize_4bit writes them) and its QuantState's
 * tensors: absmax float32 [N * K / blocksize] (uint8 with `nested`), the
 * original weight's shape N x K and dtype (float16 / bfloat16 / float32).
 * blocksize must divide K (a block may not cross rows); lowbit_matmul_4bit
 * runs on any state directly. */
LOWBIT_C_API lowbit_status lowbit_import_bnb_4bit(const DLTensor* packed, const DLTensor* absmax,
                                                  const lowbit_nested_absmax* nested, const DLTensor* bias, int64_t N,
                                                  int64_t K, int64_t blocksize, lowbit_quant4_type type,
                                                  DLDataType dtype, lowbit_quantized_weight** out);

/* The format of an imported weight as a matmul config: W_dtype, N, K,
 * group_size, with_scaling, with_zeros, zeros_mode and with_bias as imported;
 * A_dtype and out_dtype the scales' dtype when float16 / bfloat16 (else
 * float16); M NULL (the default list); the rest as lowbit_matmul_config_init. */
LOWBIT_C_API lowbit_status lowbit_quantized_weight_config(const lowbit_quantized_weight* weight,
                                                          lowbit_matmul_config* config);
LOWBIT_C_API void lowbit_quantized_weight_destroy(lowbit_quantized_weight* weight);

/* ---------------------------------------------- bitsandbytes 4-bit matmul */

/* bitsandbytes matmul_4bit on a 4-bit QuantState's own storage:
 * out [..., N] = A [..., K] . (table[code] * absmax[block])^T (+ bias), in
 * float32, where W [N, K] is flattened row-major into `packed` (uint8,
 * (N * K + 1) / 2 elements, the even element in the high nibble) and blocks
 * of `blocksize` elements of the flattened W may cross rows. A and out
 * float32 / float16 / bfloat16, contiguous; absmax float32
 * [ceil(N * K / blocksize)] (uint8 with `nested`); bias float [N] or NULL.
 * Enqueued on `stream`; scratch is stream-ordered, the call does not wait. */
LOWBIT_C_API lowbit_status lowbit_matmul_4bit(const DLTensor* A, const DLTensor* packed, const DLTensor* absmax,
                                              const lowbit_nested_absmax* nested, const DLTensor* bias, DLTensor* out,
                                              int64_t N, int64_t blocksize, lowbit_quant4_type type, void* stream);
/* bitsandbytes gemv_4bit: lowbit_matmul_4bit for an A holding one row. */
LOWBIT_C_API lowbit_status lowbit_gemv_4bit(const DLTensor* A, const DLTensor* packed, const DLTensor* absmax,
                                            const lowbit_nested_absmax* nested, const DLTensor* bias, DLTensor* out,
                                            int64_t N, int64_t blocksize, lowbit_quant4_type type, void* stream);

/* ------------------------------------------------------------- optimizers */

/* The constants of one optimizer step (docs/optim.md). */
typedef struct lowbit_optimizer_hparams {
  float beta1, beta2, beta3, alpha; /* beta3, alpha: ademamix's */
  float eps, weight_decay, lr;
  float gnorm_scale; /* the gradient is multiplied by it first (1: none) */
  float max_unorm;   /* > 0: the update scaled to at most max_unorm * |p| (lamb, lars) */
  int64_t step;      /* 1 for the first update */
  int skip_zeros;    /* nonzero: elements whose gradient is 0 keep p and the states */
} lowbit_optimizer_hparams;

/* One step of optimizer_name ("adam", "momentum", "rmsprop", "lion",
 * "adagrad", "lamb", "lars", "ademamix") with 32-bit states, in place:
 * g, p float32/float16/bfloat16 of one dtype and size (p updated); state1
 * float32 (ademamix: twice the size); state2 float32 for adam, lamb and
 * ademamix, NULL for the others; unorm_vec float32 [1] (the update's squared
 * norm) when max_unorm > 0, else NULL. All contiguous, on one device. */
LOWBIT_C_API lowbit_status lowbit_optimizer_update_32bit(const char* optimizer_name, const DLTensor* g, DLTensor* p,
                                                         DLTensor* state1, DLTensor* state2, DLTensor* unorm_vec,
                                                         const lowbit_optimizer_hparams* hparams, void* stream);

/* One step of optimizer_name ("adam", "momentum", "rmsprop", "lion", "lamb",
 * "lars") with 8-bit tensor-wise states, in place (docs/optim.md, "8-bit
 * tensor-wise states"): g, p as above; state1 uint8 codes of qmap1, state2
 * uint8 codes of qmap2 for adam and lamb, NULL for the others (with qmap2,
 * max2 and new_max2); qmap1, qmap2 float32 [256], sorted; max1, max2 float32
 * [1], the scales the states are stored with; new_max1, new_max2 float32 [1],
 * written: the new states' max |s|, the next step's max1 / max2 (the caller
 * swaps them). unorm_vec float32 [1] (the update's squared norm, adam, lamb,
 * momentum, lars) when hparams->max_unorm > 0, else NULL or given. beta3,
 * alpha and skip_zeros must be 0. All contiguous, on one device. */
LOWBIT_C_API lowbit_status lowbit_optimizer_update_8bit(const char* optimizer_name, const DLTensor* g, DLTensor* p,
                                                        DLTensor* state1, DLTensor* state2, const DLTensor* qmap1,
                                                        const DLTensor* qmap2, const DLTensor* max1,
                                                        const DLTensor* max2, DLTensor* new_max1, DLTensor* new_max2,
                                                        DLTensor* unorm_vec, const lowbit_optimizer_hparams* hparams,
                                                        void* stream);

/* One step of optimizer_name ("adam", "momentum", "rmsprop", "lion",
 * "adagrad", "ademamix") with 8-bit blockwise states, in place
 * (docs/optim.md, "8-bit blockwise states"): g, p as above; state1 uint8
 * codes of qmap1 (ademamix: twice the size); state2 uint8 codes of qmap2 for
 * adam and ademamix, NULL for the others (with qmap2 and absmax2); qmap1,
 * qmap2 float32 [256], sorted; absmax1, absmax2 float32, one per block of
 * 256 (absmax1 of ademamix: twice as many), updated. hparams->max_unorm must
 * be 0 (no trust ratio here). All contiguous, on one device. */
LOWBIT_C_API lowbit_status lowbit_optimizer_update_8bit_blockwise(
    const char* optimizer_name, const DLTensor* g, DLTensor* p, DLTensor* state1, DLTensor* state2,
    const DLTensor* qmap1, const DLTensor* qmap2, DLTensor* absmax1, DLTensor* absmax2,
    const lowbit_optimizer_hparams* hparams, void* stream);

/* One step over `count` parameters in one call (docs/optim.md, "Multi-tensor
 * updates"): entry i is g[i], p[i], state1[i], state2[i], unorm_vec[i], each
 * as lowbit_optimizer_update_32bit takes it, under one optimizer_name and
 * one hparams. g and p have one dtype over the list; all on one device.
 * state2 and unorm_vec may be NULL arrays (no entry has one) or hold NULL
 * entries. Each parameter gets the bits the single call gives it; on CUDA
 * the list is one launch (two with max_unorm > 0) for up to about 400
 * parameters. */
LOWBIT_C_API lowbit_status lowbit_optimizer_update_32bit_multi(const char* optimizer_name, size_t count,
                                                               const DLTensor* const* g, DLTensor* const* p,
                                                               DLTensor* const* state1, DLTensor* const* state2,
                                                               DLTensor* const* unorm_vec,
                                                               const lowbit_optimizer_hparams* hparams, void* stream);

/* lowbit_optimizer_update_8bit_blockwise over `count` parameters in one call:
 * entry i is g[i], p[i], state1[i], state2[i], absmax1[i], absmax2[i]; qmap1
 * and qmap2 are every entry's maps. state2 and absmax2 may be NULL arrays
 * for the one-state rules; hparams->max_unorm must be 0. */
LOWBIT_C_API lowbit_status lowbit_optimizer_update_8bit_blockwise_multi(
    const char* optimizer_name, size_t count, const DLTensor* const* g, DLTensor* const* p, DLTensor* const* state1,
    DLTensor* const* state2, const DLTensor* qmap1, const DLTensor* qmap2, DLTensor* const* absmax1,
    DLTensor* const* absmax2, const lowbit_optimizer_hparams* hparams, void* stream);

/* Percentile clipping's device step (docs/optim.md): the squared L2 norm of
 * grad (float32/float16/bfloat16, contiguous) written to gnorm_vec (float32
 * [100]): to every slot at step 1, to slot step % 100 after. The clip value
 * is then sqrt of the `percentile`-th smallest slot, read by the caller. */
LOWBIT_C_API lowbit_status lowbit_percentile_clipping(const DLTensor* grad, DLTensor* gnorm_vec, int64_t step,
                                                      void* stream);

/* ---------------------------------------------------------- CUDA memory */
/* Where lowbit's CUDA memory comes from: packed weights, the results of
 * calls that allocate them, and scratch. All of it is stream-ordered: made
 * for the stream of the call that asks and given back on that stream, so
 * no call waits for the device. By default a pool per device serves it
 * (cudaMallocFromPoolAsync / cudaFreeAsync; freed memory is kept for reuse
 * until lowbit_empty_cuda_cache). An application that manages GPU memory
 * itself plugs in its own allocator. Host memory never goes through it. */
typedef struct lowbit_cuda_allocator {
  /* Memory of `bytes` on `device` usable by work enqueued on `stream` (a
   * cudaStream_t, NULL: the default stream) from now on; NULL when out of
   * memory. Called with `device` current; must not wait for the device. */
  void* (*allocate)(void* ctx, size_t bytes, int device, void* stream);
  /* Takes `ptr` back once the work enqueued on `stream` so far is done with
   * it. Must not wait for the device and cannot fail. */
  void (*deallocate)(void* ctx, void* ptr, size_t bytes, int device, void* stream);
  void* ctx;
} lowbit_cuda_allocator;

/* Replaces the process-wide CUDA allocator (lowbit::set_cuda_allocator).
 * NULL, or both functions NULL, restores the default pool; one function
 * without the other is an error. Memory always goes back to the allocator
 * that gave it, so switching is safe while weights are alive (keep `ctx`
 * valid until they are destroyed). */
LOWBIT_C_API lowbit_status lowbit_set_cuda_allocator(const lowbit_cuda_allocator* allocator);
/* The allocator set by lowbit_set_cuda_allocator; its functions are NULL
 * while the default pool serves. */
LOWBIT_C_API lowbit_status lowbit_get_cuda_allocator(lowbit_cuda_allocator* allocator);
/* Gives the default pool's unused memory on `device` back to the driver
 * (what torch.cuda.empty_cache() does for PyTorch's). Succeeds without
 * doing anything when there is no CUDA device. */
LOWBIT_C_API lowbit_status lowbit_empty_cuda_cache(int device);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOWBIT_C_LOWBIT_H_ */
