// The inputs of `lowbit bench gemm`: random activations, and random weights
// of each type with their scales and zeros, packed on the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "gemm/args.h"
#include "lowbit/error.h"
#include "lowbit/ops/gemm.h"
#include "lowbit/tensor.h"

namespace lowbit::bench {

// f16 values: unit-variance normal times `scale`, element i of stream `seed`.
Tensor random_f16(std::initializer_list<int64_t> shape, float scale, uint64_t seed);

// One type's weight for one shape: the unpacked inputs (kept for the check)
// and the packed weight on the device, or why it could not be made.
struct PreparedWeight {
  std::optional<Matmul> mm;
  PackedWeight W;
  Tensor weight, scale, zeros;
  std::string error;
  ErrorCode code = ErrorCode::ok;
};

// Type t's random weight for `sh` (streams seed, seed + 1 and seed + 2 for
// the values, scales and zeros), packed for `dev`; an error is kept, not thrown.
PreparedWeight prepare(const TypeSpec& t, const WeightShape& sh, const std::vector<int64_t>& ms, Device dev,
                       uint64_t seed);

// The bytes of a packed weight with its scales, zeros, bias and perm.
size_t packed_bytes(const PackedWeight& w);

}  // namespace lowbit::bench
