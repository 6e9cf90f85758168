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

// TMA load: a [1, box] tile at (x = column, y = row, z = slice) of a 3-D
// tensor map into shared memory, completing its bytes on the barrier.
__device__ __forceinline__ void cp_async_bulk_tensor_3d(void* dst, const CUtensorMap* map, int x, int y, int z,
                                                        uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::
          "r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(smem_addr(bar))
      : "memory");
}

// The same load multicast to the CTAs of the cluster in `mask` (bit r: rank
// r): each receives the tile at dst and the bytes on its barrier at bar's offset.
__device__ __forceinline__ void cp_async_bulk_tensor_3d_multicast(void* dst, const CUtensorMap* map, int x, int y,
                                                                  int z, uint64_t* bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(smem_addr(bar)), "h"(mask)
      : "memory");
}

// TMA store: the [1, box] tile at src (shared memory) to (x = column, y =
// row, z = slice) of a 3-D tensor map, clipped at the tensor's edges; one
// of the bulk async-group this thread commits next.
__device__ __forceinline__ void cp_async_bulk_tensor_3d_store(const CUtensorMap* map, const void* src, int x, int y,
                                                              int z) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_addr(src)), "r"(x), "r"(y), "r"(z)
               : "memory");
}
// Closes this thread's bulk async-group of the stores issued since the last.
__device__ __forceinline__ void cp_async_bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's bulk async-groups still read their
// shared memory (the buffer may then be written again).
template <int N>
__device__ __forceinline__ void cp_async_bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Waits until at most N of this thread's bulk async-groups are incomplete (their writes done).
template <int N>
__device__ __forceinline__ void cp_async_bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// Orders this thread's shared-memory writes before the async proxy's (TMA's) reads of them.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Thread blocks clusters: this CTA's rank, the cluster-wide barrier (every
// thread of every CTA; release / acquire orders shared memory across them),
// and one arrival on the barrier at bar's offset in the CTA of rank `rank`
// (release at the CTA's scope: what it orders is this CTA's reads of its own
// shared memory, which the arrival's peer then overwrites by TMA).
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)),
      "r"(rank)
      : "memory");
}

#endif  // LOWBIT_SM90A

}  // namespace lowbit::cuda::ptx
