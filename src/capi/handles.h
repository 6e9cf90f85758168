// The C ABI's opaque handles: each wraps the C++ object it stands for.
#pragma once

#include "lowbit/c/lowbit.h"
#include "lowbit/ops/gemm.h"

struct lowbit_matmul {
  lowbit::Matmul op;
};

struct lowbit_packed_weight {
  lowbit::PackedWeight weight;
};

struct lowbit_quantized_weight {
  lowbit::QuantizedWeight weight;
};

namespace lowbit::capi {

// lowbit_matmul_config -> MatmulConfig, every field checked by name.
MatmulConfig to_config(const char* op, const lowbit_matmul_config& c);
// A lowbit_zeros_mode as ZerosMode, its range checked.
ZerosMode to_zeros_mode(const char* op, const char* arg, const lowbit_zeros_mode& m);
// The reverse, for the importers' formats (M NULL: the default list).
lowbit_matmul_config to_c_config(const MatmulConfig& c);

}  // namespace lowbit::capi
