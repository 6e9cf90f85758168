// quantize_blockwise / dequantize_blockwise on CUDA (docs/formats.md, "8-bit blockwise").
#include "cuda/quant/dequantize.cuh"
#include "cuda/quant/ops.h"
#include "cuda/quant/quantize.cuh"

namespace lowbit::cuda {

void quantize_blockwise(const QuantizeBlockwiseArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = QuantizeBlockwiseArgs::kName;
  DeviceGuard guard(a.input.device.index, op);
  with_float_type(a.input.dtype, op, "input", [&](auto t) {
    using T = decltype(t);
    launch_quantize_blocks<T, Code8Encoder>(op, a.input.ptr<const T>(), a.input.numel(), a.out.ptr<uint8_t>(),
                                            a.absmax.ptr<float>(), a.blocksize,
                                            Code8Encoder::Params{a.code.ptr<const float>()}, to_cuda(stream));
  });
}

void dequantize_blockwise(const DequantizeBlockwiseArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = DequantizeBlockwiseArgs::kName;
  DeviceGuard guard(a.out.device.index, op);
  with_float_type(a.out.dtype, op, "out", [&](auto t) {
    using T = decltype(t);
    const uint8_t* in = a.input.ptr<const uint8_t>();
    T* out = a.out.ptr<T>();
    const BlockDequantParams<T> p{in,
                                  a.input.numel(),
                                  a.code.ptr<const float>(),
                                  Table16{},
                                  absmax_source(a),
                                  out,
                                  log2_exact(a.blocksize),
                                  aligned16(in),
                                  aligned16(out)};
    launch_dequantize_blocks<T, 8>(op, p, to_cuda(stream));
  });
}

}  // namespace lowbit::cuda
