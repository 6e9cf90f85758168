// QuantState: what dequantization needs besides the codes, and its
// bitsandbytes / HF transformers serialization (docs/formats.md, "QuantState serialization").
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "lowbit/error.h"
#include "lowbit/tensor.h"

namespace lowbit {

struct QuantState {
  Tensor absmax;  // f32 [nblocks]; u8 [nblocks] when nested
  Tensor code;    // f32: [256] code map (8-bit) or [16] table (4-bit)
  int64_t blocksize = 0;
  std::vector<int64_t> shape;  // of the original tensor
  DType dtype = DType::f32;    // of the original tensor
  std::string quant_type;      // "nf4" / "fp4" for 4-bit; empty for 8-bit blockwise
  // Double quantization: absmax = dequantize_blockwise(absmax, *state2) + offset.
  Tensor offset;                       // f32 [1], on the absmax's device
  std::shared_ptr<QuantState> state2;  // absmax f32, dynamic code, nested blocksize

  bool nested() const { return state2 != nullptr; }
  int64_t numel() const;
};

// A value of a bitsandbytes QuantState dict: tensors, and in the unpacked
// form also ints, floats, strings and shapes.
using QuantStateValue = std::variant<Tensor, int64_t, double, std::string, std::vector<int64_t>>;
using QuantStateDict = std::map<std::string, QuantStateValue>;

// bitsandbytes QuantState.as_dict. Unpacked: keys quant_type, absmax,
// blocksize, quant_map, dtype, shape (+ nested_absmax, nested_blocksize,
// nested_quant_map, nested_dtype, nested_offset). Packed: only tensors —
// absmax, quant_map, nested_absmax, nested_quant_map and
// "quant_state.bitsandbytes__<type>" holding the other fields as UTF-8 JSON
// bytes (uint8). Tensors come back on the CPU. Only 4-bit states serialize.
QuantStateDict quant_state_as_dict(const QuantState& state, bool packed = false);

// bitsandbytes QuantState.from_dict: accepts either form; keys may carry a
// common "<weight name>." prefix. Tensors are placed on `device`. Throws
// lowbit::Error (format_error) naming the missing or malformed key.
QuantState quant_state_from_dict(const QuantStateDict& dict, Device device = Device::cpu());

}  // namespace lowbit
