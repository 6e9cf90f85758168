// The tuned parameters shipped with lowbit (include/lowbit/tune.h gives the
// format): measured by `lowbit tune` on the GPUs named, copied here by hand
// from a user database. fp8_gemm: `lowbit tune fp8_gemm --shapes ...` over
// DeepSeek-V3's shapes at M = 64, 128 and 4096 on an H200.
#pragma once

#include <string_view>

namespace lowbit::core {

inline constexpr std::string_view kShippedTuneDb = R"(# op | device | version | key | parameters
fp8_gemm | NVIDIA H200 | bfloat16 | 128 2112 7168 | default
fp8_gemm | NVIDIA H200 | bfloat16 | 128 24576 1536 | wgmma_e4m3_m128_n128_k128_s5
fp8_gemm | NVIDIA H200 | bfloat16 | 128 32768 512 | wgmma_e4m3_m128_n128_k128_s5
fp8_gemm | NVIDIA H200 | bfloat16 | 128 4096 7168 | default
fp8_gemm | NVIDIA H200 | bfloat16 | 128 7168 16384 | default
fp8_gemm | NVIDIA H200 | bfloat16 | 128 7168 2048 | default
fp8_gemm | NVIDIA H200 | bfloat16 | 4096 2112 7168 | default
fp8_gemm | NVIDIA H200 | bfloat16 | 4096 24576 1536 | default
fp8_gemm | NVIDIA H200 | bfloat16 | 4096 32768 512 | default
fp8_gemm | NVIDIA H200 | bfloat16 | 4096 4096 7168 | default
fp8_gemm | NVIDIA H200 | bfloat16 | 4096 7168 16384 | default
fp8_gemm | NVIDIA H200 | bfloat16 | 4096 7168 2048 | wgmma_e4m3_m256_n128_k128_s3
fp8_gemm | NVIDIA H200 | bfloat16 | 64 2112 7168 | default
fp8_gemm | NVIDIA H200 | bfloat16 | 64 24576 1536 | default
fp8_gemm | NVIDIA H200 | bfloat16 | 64 32768 512 | default
fp8_gemm | NVIDIA H200 | bfloat16 | 64 4096 7168 | default
fp8_gemm | NVIDIA H200 | bfloat16 | 64 7168 16384 | default
fp8_gemm | NVIDIA H200 | bfloat16 | 64 7168 2048 | default
)";

}  // namespace lowbit::core
