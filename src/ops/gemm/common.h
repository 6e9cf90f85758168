// Helpers shared by the matmul front ends (src/ops/gemm): format checks,
// layout choice, packing into the layouts, host copies.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "lowbit/ops/gemm.h"

namespace lowbit::ops::gemm {

// The op names errors start with.
inline constexpr const char* kMatmul = "matmul";
inline constexpr const char* kTransform = "transform_weight";

// The layout whose kernels serve the config's format on `device`: `rows` on
// the CPU; on CUDA `tiles` where core::tiles_supported, else `rows`.
WeightLayout layout_for(Device device, const MatmulConfig& c);

// The format a config packs into.
WeightFormat format_of(const MatmulConfig& c, WeightLayout layout);

// The format must be one the tiles layout takes (core::tiles_supported).
void require_tiles_format(const char* op, const WeightFormat& f);

// A dtype-valued field (of a config) must be one of `allowed`.
void require_dtype_field(const char* op, const char* name, DType d, std::initializer_list<DType> allowed);

// Checks the format fields shared by configs and packed weights: W type,
// N, K, group_size, scaling and zeros rules. `op` starts the messages.
void check_format(const char* op, WeightType type, int64_t N, int64_t K, int64_t group_size, bool with_scaling,
                  bool with_zeros, ZerosMode zeros_mode);

// Checks a packed weight's tensors against its format and layout.
void check_packed(const char* op, const PackedWeightRef& w);

// Validates the unpacked inputs of transform_weight against the config
// (presence, dtypes, shapes, value ranges, perm) and packs them on the host.
PackedWeight pack_weight(WeightLayout layout, const MatmulConfig& c, const TensorRef& weight, const TensorRef& scale,
                         const TensorRef& zeros, const TensorRef& bias, const TensorRef& perm);

// A host copy of a contiguous tensor (the same memory when already there).
Tensor host_copy(const TensorRef& t);
// Elements of a float tensor (f32/f16/bf16) as fp32, exactly.
std::vector<float> host_floats(const TensorRef& t);
// Elements of an integer tensor (i8/u8/i32/i64) as int64.
std::vector<int64_t> host_ints(const TensorRef& t);

}  // namespace lowbit::ops::gemm
