// Tensors in CUDA managed (unified) memory, for optimizer states that may
// not fit the GPU: the driver pages them between host and device on demand,
// and prefetch moves them ahead of use. They are CUDA tensors to every op;
// their pages may live on the host.
#pragma once

#include "lowbit/device.h"
#include "lowbit/stream.h"
#include "lowbit/tensor.h"

namespace lowbit {

// A tensor of managed memory, attached to every stream and preferring
// `device` (a CUDA device). Allocating may wait for the device, as
// cudaMallocManaged does, and so does giving it back (cudaFree): make these
// once, not per op. Throws out_of_memory, or no_backend without CUDA.
Tensor empty_managed(Shape shape, DType dtype, Device device);

// Moves the pages of `t` (managed memory) to `target` (a CUDA device, or the
// host for Device::cpu()) ordered on `stream`, without waiting.
// invalid_argument when `t` is not managed memory.
void prefetch(const TensorRef& t, Device target, Stream stream = {});

}  // namespace lowbit
