// Exhaustive device checks of the CUDA fast paths against the one definition
// of each format in src/core (host-callable; used by tests/cpp/cuda and the
// GPU check script). Each returns how many inputs it checked and how many
// disagreed; a fast path is only used because these report 0.
#pragma once

#include <cstdint>

namespace lowbit::cuda::selftest {

struct Result {
  uint64_t checked = 0;
  uint64_t mismatches = 0;
  uint32_t first_bad_input = 0;  // bit pattern of the first disagreeing input (when mismatches > 0)
};

enum class Conversion { f16_to_f32, f32_to_f16, f32_to_bf16, f32_to_e4m3_sat, e4m3_to_f32 };

// The chunk conversions of src/cuda/common/convert.cuh (and their single-value
// hardware paths, on non-NaN inputs) against core, over every input bit
// pattern: 2^16 (f16), 2^32 (f32), 2^8 (e4m3). Runs on the current device.
Result check_conversion(Conversion which);

// CodeSearch (src/cuda/quant/code_search.cuh) against encode_by_midpoints<8>
// over all 2^32 fp32 inputs, for the 256-entry code map `code` (host memory,
// sorted ascending as quantize_blockwise requires).
Result check_code_search(const float* code);

// optim::StateCodes (src/cuda/optim/state_code.cuh) against
// core::optim::state_code of encode_by_midpoints<8>, with and without the
// sign rule, taking each of the 2^32 fp32 inputs as the new state (absmax 1).
Result check_state_codes(const float* code);

}  // namespace lowbit::cuda::selftest
