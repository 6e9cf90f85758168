// Every op Args type the registry knows: one X-macro list, used for the
// registry's explicit instantiations and by tests that iterate over ops.
#pragma once

#include "lowbit/ops/attention.h"
#include "lowbit/ops/fp8_gemm.h"
#include "lowbit/ops/gemm.h"
#include "lowbit/ops/int8_gemm.h"
#include "lowbit/ops/optim.h"
#include "lowbit/ops/quant.h"
#include "lowbit/ops/sparse.h"

#define LOWBIT_FOR_EACH_OP(X)              \
  X(QuantizeBlockwiseArgs)                 \
  X(DequantizeBlockwiseArgs)               \
  X(QuantizeNoAbsmaxArgs)                  \
  X(DequantizeNoAbsmaxArgs)                \
  X(QuantizeTensorwiseArgs)                \
  X(DequantizeTensorwiseArgs)              \
  X(Quantize4bitArgs)                      \
  X(Dequantize4bitArgs)                    \
  X(AbsmaxCenterArgs)                      \
  X(ActQuantArgs)                          \
  X(WeightQuantArgs)                       \
  X(WeightDequantArgs)                     \
  X(Int8VectorwiseQuantArgs)               \
  X(Int8VectorwiseDequantArgs)             \
  X(Int8ColwiseQuantArgs)                  \
  X(EstimateQuantilesArgs)                 \
  X(HistogramScatterAdd2dArgs)             \
  X(MatmulArgs)                            \
  X(Matmul4bitArgs)                        \
  X(Fp8GemmArgs)                           \
  X(Fp8GroupedGemmContiguousArgs)          \
  X(Fp8GroupedGemmMaskedArgs)              \
  X(Int8LinearMatmulArgs)                  \
  X(Int8MmDequantArgs)                     \
  X(Int8ScaledMmArgs)                      \
  X(Int8LinearOutliersArgs)                \
  X(Int8LinearGradInputArgs)               \
  X(Int8LinearArgs)                        \
  X(OptimizerUpdate32bitArgs)              \
  X(OptimizerUpdate8bitArgs)               \
  X(OptimizerUpdate8bitBlockwiseArgs)      \
  X(OptimizerUpdate32bitMultiArgs)         \
  X(OptimizerUpdate8bitBlockwiseMultiArgs) \
  X(PercentileClippingArgs)                \
  X(BsrDenseAddmmArgs)                     \
  X(SampledAddmmArgs)                      \
  X(BsrSoftmaxArgs)                        \
  X(ScatterMmArgs)                         \
  X(FlashAttentionArgs)                    \
  X(FlashAttentionKvcacheArgs)             \
  X(FlashAttentionVarlenArgs)
