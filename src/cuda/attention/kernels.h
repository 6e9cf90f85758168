// The attention kernels' entry points, shared by the launcher (attention.cu)
// and the files that instantiate them (one per head dim of the tensor-core
// kernel, so that they compile in parallel).
#pragma once

#include <cstddef>

#include "cuda/attention/params.h"
#include "lowbit/dtype.h"
#include "lowbit/stream.h"

namespace lowbit::cuda::attention {

// The tensor-core kernel's instances of one head dim (flash_mma.cuh).
enum class Variant {
  rows64,     // 64 rows a CTA, k [*, Hkv, D]
  rows64_kt,  // 64 rows a CTA, k as [B, D, Hkv, Skv] (bdhs)
  rows16,     // 16 rows a CTA, the warps splitting each key tile (decode)
};

struct FlashKernel {
  const void* fn;  // __global__ void(FlashParams)
  size_t smem;     // dynamic shared bytes
  int rows;        // packed rows a CTA takes
};

// dtype f16 or bf16.
FlashKernel flash_kernel_d64(DType dtype, Variant variant);
FlashKernel flash_kernel_d128(DType dtype, Variant variant);
FlashKernel flash_kernel_d256(DType dtype, Variant variant);

// The SIMT kernel (simt.cu): any dtype, head dims and alignment; one warp a (token, head), no split.
void launch_simt(const FlashParams& p, DType dtype, Stream stream, const char* op);
// Merges the split key ranges' partials (p.part_o, p.part_lse) into out and lse.
void launch_combine(const FlashParams& p, DType dtype, Stream stream, const char* op);

}  // namespace lowbit::cuda::attention
