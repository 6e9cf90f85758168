// The peer of `lowbit bench gemm`: cuBLAS fp16 on the same M, N, K (builds
// with cuBLAS only).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "timer.h"

namespace lowbit::bench {

class Cublas {
 public:
  explicit Cublas(cudaStream_t stream) {
    cublas_ok(cublasCreate(&handle_), "cublasCreate", kOp);
    cublas_ok(cublasSetStream(handle_, stream), "cublasSetStream", kOp);
  }
  ~Cublas() { cublasDestroy(handle_); }
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;

  // out[M, N] = A[M, K] · W[N, K]ᵀ, all row-major f16, f32 compute (torch's
  // `A @ W.T`): in cuBLAS' column-major terms outᵀ = op_T(W) · Aᵀ.
  void gemm(const void* A, const void* W, void* out, int64_t M, int64_t N, int64_t K) {
    const float alpha = 1.0f, beta = 0.0f;
    const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
    cublas_ok(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, W, CUDA_R_16F, k, A, CUDA_R_16F, k,
                           &beta, out, CUDA_R_16F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx", kOp);
  }

 private:
  static constexpr const char* kOp = "bench gemm";
  cublasHandle_t handle_ = nullptr;
};

}  // namespace lowbit::bench
