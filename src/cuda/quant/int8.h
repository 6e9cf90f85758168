// int8_linear's quantization step on CUDA (src/cuda/quant/int8.cu), for the
// int8_linear of src/cuda/gemm/int8_linear.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lowbit/tensor.h"

namespace lowbit::cuda {

// Whether int8_linear_quant takes input (f32/f16/bf16 [rows, K]) into out:
// rows of whole 16-byte vectors at aligned addresses.
bool int8_linear_quant_fits(const TensorRef& input, const int8_t* out);

// int8_vectorwise_quant of input's rows (out [rows, K], their inlier absmax
// in row_stats) in one launch. threshold > 0: mask [K] (zeroed, and *done
// zero, before the launch) marks the columns holding |x| >= threshold, and
// outliers [1 + K] receives their count and the columns, ascending. rows > 0.
void int8_linear_quant(const TensorRef& input, float threshold, int8_t* out, float* row_stats, uint8_t* mask,
                       int32_t* outliers, unsigned* done, cudaStream_t stream);

// The same rows' codes and row_stats with the outlier columns left as
// encoded (not zeroed), and each row's outliers as bits: threshold > 0:
// row_bits [rows, ceil(K / 32)], bit k % 32 of word k / 32 set where
// |x[row, k]| >= threshold (written whole: nothing to zero first). A
// kernel launched after it as a programmatic dependent may start early.
void int8_linear_quant_bits(const TensorRef& input, float threshold, int8_t* out, float* row_stats, uint32_t* row_bits,
                            cudaStream_t stream);

}  // namespace lowbit::cuda
