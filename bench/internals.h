// The library internals the benchmarks use, and the one header under bench/
// that includes from src/: inputs are made in the library's own formats (the
// float conversions, a weight type's value range) and messages are built as
// the library builds them, rather than defined a second time here.
#pragma once

#include "core/check.h"          // cat
#include "core/float_convert.h"  // f32_to_f16, f32_to_bf16, f16_to_f32
#include "core/hd.h"             // ceil_div
#include "core/weight_format.h"  // weight_type_info
#include "cpu/gemm/onednn.h"     // the CPU peer of bench gemm: oneDNN's dense matmul
#if defined(__CUDACC__)
#include "cuda/common/ptx/copy.cuh"  // ld_global_nc_na_v4: the read floor's loads, as the kernels issue them
#endif

namespace lowbit::bench {

using core::cat;
using core::ceil_div;
using core::f16_to_f32;
using core::f32_to_bf16;
using core::f32_to_f16;
using core::weight_type_info;
using core::WeightKind;
using core::WeightTypeInfo;
using core::cpu::gemm::onednn_available;
using core::cpu::gemm::onednn_bf16_available;
using core::cpu::gemm::onednn_bf16_matmul;
using core::cpu::gemm::onednn_f32_matmul;
#if defined(__CUDACC__)
namespace ptx = cuda::ptx;
#endif

}  // namespace lowbit::bench
