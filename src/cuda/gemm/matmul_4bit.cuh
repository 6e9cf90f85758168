// The CUDA paths of matmul_4bit (Matmul4bitArgs: bitsandbytes' packed 4-bit
// state, docs/gemm.md) and the pieces they share.
//
//   fused        tensor-core GEMV / small GEMM straight on the packed codes
//                (matmul_4bit_fused.cu): fp16/bf16 A, K a multiple of 32
//   dequant_gemm the weight dequantized into the workspace in A's dtype, then
//                one cuBLASLt GEMM (matmul_4bit_gemm.cu): any state
//   cuda_core    fp32 products on CUDA cores (matmul_4bit.cu): any state,
//                any dtypes
//
// Matmul4bitArgs::config k >= 0 forces path k (tests sweep them); a path that
// cannot take the arguments hands them to cuda_core.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/convert.cuh"
#include "lowbit/ops/gemm.h"

namespace lowbit::cuda::bnb4 {

// The paths, by their config names (Matmul4bitArgs::config): "fused",
// "dequant_gemm", "cuda_core".
enum Path : int { kFused = 0, kDequantGemm = 1, kCudaCore = 2 };
inline constexpr int kNumPaths = 3;
inline constexpr const char* kPathNames[kNumPaths] = {"fused", "dequant_gemm", "cuda_core"};

enum class FloatKind : uint8_t { f32, f16, bf16 };

inline FloatKind kind_of(DType d) {
  return d == DType::f32 ? FloatKind::f32 : d == DType::f16 ? FloatKind::f16 : FloatKind::bf16;
}

__device__ __forceinline__ float load_float(const void* p, int64_t i, FloatKind k) {
  switch (k) {
    case FloatKind::f16: return f16_to_f32_hw(static_cast<const uint16_t*>(p)[i]);
    case FloatKind::bf16: return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void store_float(void* p, int64_t i, FloatKind k, float v) {
  switch (k) {
    case FloatKind::f16: static_cast<uint16_t*>(p)[i] = f32_to_f16_hw(v); break;
    case FloatKind::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16_hw(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}

// Rows of A (the product of its leading dims).
inline int64_t rows_of(const Matmul4bitArgs& a) { return a.A.numel() / a.A.size(-1); }

// Whether the fused kernel takes these arguments (dtypes, K, alignment, grid limits).
bool fused_fits(const Matmul4bitArgs& a);
void run_fused(const Matmul4bitArgs& a, cudaStream_t stream);

// Whether cuBLASLt has the (A, out) dtype pair: out in A's dtype, or fp32.
bool dequant_gemm_fits(const Matmul4bitArgs& a);
size_t dequant_gemm_workspace(const Matmul4bitArgs& a);
void run_dequant_gemm(const Matmul4bitArgs& a, void* workspace, cudaStream_t stream);

void run_cuda_core(const Matmul4bitArgs& a, cudaStream_t stream);

}  // namespace lowbit::cuda::bnb4
