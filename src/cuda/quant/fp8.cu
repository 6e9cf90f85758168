// act_quant, weight_quant, weight_dequant on CUDA (docs/formats.md, "FP8 block scaling").
#include "cuda/common/launch.h"
#include "cuda/quant/fp8.cuh"
#include "cuda/quant/ops.h"
#include "cuda/quant/quantize.cuh"

namespace lowbit::cuda {

void act_quant(const ActQuantArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = ActQuantArgs::kName;
  DeviceGuard guard(a.input.device.index, op);
  // K % block == 0, so the blocks of each row are the blocks of the flattened
  // tensor, and scale's flat index is the flat block index.
  with_float_type(a.input.dtype, op, "input", [&](auto t) {
    using T = decltype(t);
    launch_quantize_blocks<T, Fp8Encoder>(op, a.input.ptr<const T>(), a.input.numel(), a.out.ptr<uint8_t>(),
                                          a.scale.ptr<float>(), a.block, Fp8Encoder::Params{a.ue8m0}, to_cuda(stream));
  });
}

void weight_quant(const WeightQuantArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = WeightQuantArgs::kName;
  const int64_t rows = a.input.shape[0], cols = a.input.shape[1];
  if (rows == 0 || cols == 0) return;
  DeviceGuard guard(a.input.device.index, op);
  const int lb = log2_exact(a.block);
  const int64_t scale_cols = ceil_div(cols, a.block);
  const int64_t tiles = ceil_div(rows, a.block) * scale_cols;
  with_float_type(a.input.dtype, op, "input", [&](auto t) {
    using T = decltype(t);
    auto* kernel = &weight_quant_tiles<T>;
    const int grid = persistent_grid(kernel, fp8w::kThreads, 0, tiles, op);
    kernel<<<grid, fp8w::kThreads, 0, to_cuda(stream)>>>(a.input.ptr<const T>(), rows, cols, lb, scale_cols,
                                                         a.out.ptr<uint8_t>(), a.scale.ptr<float>());
    check_launch(op, "weight_quant_tiles");
  });
}

void weight_dequant(const WeightDequantArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = WeightDequantArgs::kName;
  const int64_t rows = a.input.shape[0], cols = a.input.shape[1];
  if (rows == 0 || cols == 0) return;
  DeviceGuard guard(a.input.device.index, op);
  const int lb = log2_exact(a.block);
  const int64_t scale_cols = ceil_div(cols, a.block);
  with_float_type(a.out.dtype, op, "out", [&](auto t) {
    using T = decltype(t);
    const uint8_t* in = a.input.ptr<const uint8_t>();
    T* out = a.out.ptr<T>();
    constexpr int64_t kOut = 16 / sizeof(T);  // elements of one 16-byte output word
    if (cols % kOut == 0 && aligned16(in) && aligned16(out)) {
      auto* kernel = &weight_dequant_rows<T>;
      const int64_t work = ceil_div(rows * (cols / kOut), fp8w::kThreads * fp8w::kUnroll);
      const int grid = persistent_grid(kernel, fp8w::kThreads, 0, work, op);
      kernel<<<grid, fp8w::kThreads, 0, to_cuda(stream)>>>(in, a.scale.ptr<const float>(), out, rows, cols, lb,
                                                           scale_cols);
      check_launch(op, "weight_dequant_rows");
    } else {
      auto* kernel = &weight_dequant_elems<T>;
      const int grid = persistent_grid(kernel, fp8w::kThreads, 0, ceil_div(rows * cols, fp8w::kThreads), op);
      kernel<<<grid, fp8w::kThreads, 0, to_cuda(stream)>>>(in, a.scale.ptr<const float>(), out, rows, cols, lb,
                                                           scale_cols);
      check_launch(op, "weight_dequant_elems");
    }
  });
}

}  // namespace lowbit::cuda
