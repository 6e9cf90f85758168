#include "internals.h"
#include "read_floor.h"
#include "timer.h"

namespace lowbit::bench {
namespace {

__global__ void read_floor_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      v[u] = ptx::ld_global_nc_na_v4<true>(p + i + u * stride);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) acc ^= p[i].x ^ p[i].y ^ p[i].z ^ p[i].w;
  if (acc == 0x9e3779b9u) *sink = acc;
}

}  // namespace

void read_floor(const void* p, size_t bytes, unsigned* sink, int sm_count, cudaStream_t stream) {
  read_floor_kernel<<<8 * sm_count, 256, 0, stream>>>(static_cast<const uint4*>(p), bytes / 16, sink);
  cuda_ok(cudaGetLastError(), "read_floor launch");
}

}  // namespace lowbit::bench
