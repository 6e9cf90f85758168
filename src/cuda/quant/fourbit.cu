// quantize_4bit / dequantize_4bit (nf4, bitsandbytes fp4) on CUDA (docs/formats.md, "4-bit").
#include "core/tables.h"
#include "cuda/quant/dequantize.cuh"
#include "cuda/quant/ops.h"
#include "cuda/quant/quantize.cuh"

namespace lowbit::cuda {
namespace {

Table16 table_of(Quant4Type type) {
  Table16 t{};
  const float* src = type == Quant4Type::nf4 ? core::kNf4Table : core::kFp4Table;
  for (int i = 0; i < 16; ++i) t.v[i] = src[i];
  return t;
}

}  // namespace

void quantize_4bit(const Quantize4bitArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = Quantize4bitArgs::kName;
  DeviceGuard guard(a.input.device.index, op);
  with_float_type(a.input.dtype, op, "input", [&](auto t) {
    using T = decltype(t);
    const T* in = a.input.ptr<const T>();
    const int64_t n = a.input.numel();
    uint8_t* out = a.out.ptr<uint8_t>();
    float* absmax = a.absmax.ptr<float>();
    if (a.type == Quant4Type::nf4) {
      launch_quantize_blocks<T, Nf4Encoder>(op, in, n, out, absmax, a.blocksize,
                                            Nf4Encoder::Params{table_of(Quant4Type::nf4)}, to_cuda(stream));
    } else {
      launch_quantize_blocks<T, Fp4Encoder>(op, in, n, out, absmax, a.blocksize, Fp4Encoder::Params{}, to_cuda(stream));
    }
  });
}

void dequantize_4bit(const Dequantize4bitArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = Dequantize4bitArgs::kName;
  DeviceGuard guard(a.out.device.index, op);
  with_float_type(a.out.dtype, op, "out", [&](auto t) {
    using T = decltype(t);
    const uint8_t* in = a.input.ptr<const uint8_t>();
    T* out = a.out.ptr<T>();
    const BlockDequantParams<T> p{in,  a.out.numel(),           nullptr,       table_of(a.type), absmax_source(a),
                                  out, log2_exact(a.blocksize), aligned16(in), aligned16(out)};
    launch_dequantize_blocks<T, 4>(op, p, to_cuda(stream));
  });
}

}  // namespace lowbit::cuda
