// The CUDA implementation of the matmul op (MatmulArgs), registered as
// "cuda" by register_cuda_backend() (src/cuda/backend.cu). It reads the
// `rows` layout; docs/gemm.md describes the kernels.
#pragma once

#include <cstddef>

#include "lowbit/ops/gemm.h"

namespace lowbit::cuda {

void matmul(const MatmulArgs& a, void* workspace, Stream stream);
size_t matmul_workspace(const MatmulArgs& a);
// Kernel configs MatmulArgs::config may name (tests sweep them).
int matmul_num_configs();
// bitsandbytes matmul_4bit on a 4-bit QuantState (Matmul4bitArgs). The
// workspace holds the dequantized weight and cuBLASLt's scratch on the paths
// that use them (zero bytes otherwise).
void matmul_4bit(const Matmul4bitArgs& a, void* workspace, Stream stream);
size_t matmul_4bit_workspace(const Matmul4bitArgs& a);
// Paths Matmul4bitArgs::config may name (tests sweep them).
int matmul_4bit_num_configs();

}  // namespace lowbit::cuda
