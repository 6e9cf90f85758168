// What the host knows of one kernel instance: its entry point, launch shape and
// the geometry its plan reads.
#pragma once

#include <cstddef>

namespace lowbit::cuda::gemm {

struct KernelInfo {
  const void* kernel = nullptr;  // a __global__ taking (Params), or (CUtensorMap, Params) when tma; null: none
  bool tma = false;              // takes A's tensor map first (the wgmma kernel)
  int blocks = 0;                // streaming kernels: blocks an SM they are sized for
  size_t smem = 0;               // dynamic shared memory bytes (streaming kernels: without A)
  int chunk = 0;                 // columns of K per chunk: 4 spans of E
  int step = 0;                  // columns of K per main-loop pass
  bool direct_a = false;         // reads A from global memory (see Params::A)
  // Tile kernels fix these (rows kernels take them from their config).
  int threads = 0;  // per block
  int m_tile = 0;   // rows of M per block
  int n_tile = 0;   // rows of N per block
};

}  // namespace lowbit::cuda::gemm
