// A pure streaming read of device memory: what `lowbit bench gemm` times as
// the read floor of a kernel that must move as many bytes (launch, DRAM
// latency and ramp included, which a bandwidth floor leaves out).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace lowbit::bench {

// Reads the first `bytes` (rounded down to 16) of p (16-byte aligned) with
// 16-byte loads, four in flight a thread, eight blocks of 256 threads for
// each of the device's `sm_count` SMs; `sink` (a device word) is written only
// if the data xor to a magic value, so the loads cannot be dropped.
void read_floor(const void* p, size_t bytes, unsigned* sink, int sm_count, cudaStream_t stream);

}  // namespace lowbit::bench
