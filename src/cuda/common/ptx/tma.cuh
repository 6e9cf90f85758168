// The bulk tensor copy engine (TMA) and the shared-memory mbarriers its
// copies complete on (sm_90a; the kernels that use them are launched only
// on compute capability 9.0).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/ptx/arch.cuh"
#include "cuda/common/ptx/copy.cuh"

namespace lowbit::cuda::ptx {

#if LOWBIT_SM90A

// A barrier that completes a phase after `count` arrivals.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}
// Makes the barrier inits visible to the async proxy (TMA).
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::); }
// Arrives and makes the phase also wait for `bytes` of async copies.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes));
}
// One arrival.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)));
}
// Waits (try_wait in a loop) until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity));
}

// TMA load: a [box] tile at (x = column, y = row) of the tensor map into
// shared memory, completing its bytes on the barrier.
__device__ __forceinline__ void cp_async_bulk_tensor_2d(void* dst, const CUtensorMap* map, int x, int y,
                                                        uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar))
      : "memory");
}

#endif  // LOWBIT_SM90A

}  // namespace lowbit::cuda::ptx
