/* lowbit C ABI: the quantization ops over DLPack tensors.
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

/* ---------------------------------------------------------- int8 (LLM.int8) */

/* Row-wise int8: out int8 like input, row_stats float32 [rows]; with
 * threshold > 0, outlier_mask uint8 [K] (required then, NULL otherwise
 * allowed) marks outlier columns, which are zeroed in out. */
LOWBIT_C_API lowbit_status lowbit_int8_vectorwise_quant(const DLTensor* input, DLTensor* out, DLTensor* row_stats,
                                                        DLTensor* outlier_mask, float threshold, void* stream);

LOWBIT_C_API lowbit_status lowbit_int8_vectorwise_dequant(const DLTensor* input, const DLTensor* row_stats,
                                                          DLTensor* out, void* stream);

/* 256 quantiles of input (n >= 256) at linspace(offset, 1 - offset, 256);
 * out float32 [256]. */
LOWBIT_C_API lowbit_status lowbit_estimate_quantiles(const DLTensor* input, DLTensor* out, float offset, void* stream);

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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOWBIT_C_LOWBIT_H_ */
