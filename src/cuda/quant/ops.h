// The CUDA implementations of the quantization ops, registered as "cuda" by
// register_cuda_backend() (src/cuda/backend.cu). Arguments arrive checked by
// the op front ends (src/ops/quant); each run enqueues on `stream`, checks
// every launch and throws lowbit::Error(device_error) on a CUDA failure.
#pragma once

#include <cstddef>

#include "lowbit/ops/quant.h"

namespace lowbit::cuda {

void quantize_blockwise(const QuantizeBlockwiseArgs& a, void* workspace, Stream stream);
void dequantize_blockwise(const DequantizeBlockwiseArgs& a, void* workspace, Stream stream);
void quantize_no_absmax(const QuantizeNoAbsmaxArgs& a, void* workspace, Stream stream);
void dequantize_no_absmax(const DequantizeNoAbsmaxArgs& a, void* workspace, Stream stream);
void quantize_tensorwise(const QuantizeTensorwiseArgs& a, void* workspace, Stream stream);
// The per-CTA maxima of the first pass.
size_t quantize_tensorwise_workspace(const QuantizeTensorwiseArgs& a);
void dequantize_tensorwise(const DequantizeTensorwiseArgs& a, void* workspace, Stream stream);
void quantize_4bit(const Quantize4bitArgs& a, void* workspace, Stream stream);
void dequantize_4bit(const Dequantize4bitArgs& a, void* workspace, Stream stream);
void absmax_center(const AbsmaxCenterArgs& a, void* workspace, Stream stream);
size_t absmax_center_workspace(const AbsmaxCenterArgs& a);
void act_quant(const ActQuantArgs& a, void* workspace, Stream stream);
void weight_quant(const WeightQuantArgs& a, void* workspace, Stream stream);
void weight_dequant(const WeightDequantArgs& a, void* workspace, Stream stream);
void int8_vectorwise_quant(const Int8VectorwiseQuantArgs& a, void* workspace, Stream stream);
void int8_vectorwise_dequant(const Int8VectorwiseDequantArgs& a, void* workspace, Stream stream);
void int8_colwise_quant(const Int8ColwiseQuantArgs& a, void* workspace, Stream stream);
void estimate_quantiles(const EstimateQuantilesArgs& a, void* workspace, Stream stream);
size_t estimate_quantiles_workspace(const EstimateQuantilesArgs& a);
void histogram_scatter_add_2d(const HistogramScatterAdd2dArgs& a, void* workspace, Stream stream);

}  // namespace lowbit::cuda
