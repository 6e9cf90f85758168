// DLPack -> lowbit (tensors, devices, dtypes) and back: the one place DLPack
// fields are interpreted, for the C ABI (src/capi) and the Python binding.
#pragma once

#include <dlpack/dlpack.h>

#include "lowbit/dtype.h"
#include "lowbit/tensor.h"

namespace lowbit::core {

// A view of `t` for argument `arg` of `op`. NULL gives an absent TensorRef:
// the op's own check reports a required argument left out. `uint8_as`, when
// given, is the dtype a uint8 tensor is read as (f8_e4m3 for fp8 arguments).
// Throws lowbit::Error naming op, argument, expectation and value.
TensorRef to_ref(const char* op, const char* arg, const DLTensor* t, const DType* uint8_as = nullptr);

// A DLDevice as a lowbit Device (kDLCPU or kDLCUDA with device_id >= 0).
Device to_device(const char* op, const char* arg, DLDevice d);
DLDevice to_dl(Device d);

// A DLDataType as a lowbit DType (lanes 1, a type listed in lowbit/c/lowbit.h).
DType to_dtype(const char* op, const char* arg, DLDataType t);
DLDataType to_dl(DType d);

}  // namespace lowbit::core
