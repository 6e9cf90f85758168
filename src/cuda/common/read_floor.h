// A pure streaming read of device memory: what `lowbit bench gemm` times as
// the read floor of a kernel that must move as many bytes (launch, DRAM
// latency and ramp included, which a bandwidth floor leaves out).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace lowbit::cuda {

// Reads the first `bytes` (rounded down to 16) of p (16-byte aligned) with
// 16-byte loads, four in flight a thread, eight blocks of 256 threads an SM;
// `sink` (a device word) is written only if the data xor to a magic value.
void read_floor(const void* p, size_t bytes, unsigned* sink, cudaStream_t stream);

}  // namespace lowbit::cuda
