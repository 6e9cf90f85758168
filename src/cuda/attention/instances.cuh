// The tensor-core kernel's instances of one head dim: included by
// flash_d64.cu, flash_d128.cu and flash_d256.cu alone.
#pragma once

#include "core/check.h"
#include "cuda/attention/flash_mma.cuh"
#include "cuda/attention/kernels.h"

namespace lowbit::cuda::attention {

template <class Tag, int kD, int kWarpsM, bool kKT>
FlashKernel flash_kernel_of() {
  using S = FlashShape<kD, kWarpsM, kKT>;
  return FlashKernel{reinterpret_cast<const void*>(&flash_mma<Tag, kD, kWarpsM, kKT>), S::kSmemBytes, S::kM};
}

template <int kD>
FlashKernel flash_kernel_for(DType dtype, Variant variant) {
  const auto pick = [&](auto tag) {
    using Tag = decltype(tag);
    switch (variant) {
      case Variant::rows64: return flash_kernel_of<Tag, kD, 4, false>();
      case Variant::rows64_kt: return flash_kernel_of<Tag, kD, 4, true>();
      case Variant::rows16: return flash_kernel_of<Tag, kD, 1, false>();
    }
    core::fail(ErrorCode::internal, core::cat("flash_attention: no tensor-core variant ", static_cast<int>(variant)));
  };
  if (dtype == DType::f16) return pick(gemm::F16{});
  if (dtype == DType::bf16) return pick(gemm::BF16{});
  core::fail(ErrorCode::internal, core::cat("flash_attention: the tensor-core kernel takes float16 or bfloat16 (got ",
                                            dtype_name(dtype), ")"));
}

}  // namespace lowbit::cuda::attention
