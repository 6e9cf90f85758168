// Loads and copies: shared-memory addresses, cp.async (sm_80+), shared
// loads, and global loads that bypass L1.
#pragma once

#include <cstdint>

namespace lowbit::cuda::ptx {

// The 32-bit shared-state-space address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async.cg: 16 bytes global -> shared, bypassing L1; src_bytes < 16 fills
// the rest with zeros (0: no global read at all).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
// cp.async.ca: 4 bytes global -> shared; src_bytes 0 writes a zero without reading.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes = 4) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
// One arrival on the shared-memory mbarrier once this thread's cp.async copies so far have landed (sm_80+;
// noinc: the arrival is one of those the barrier was initialized to expect).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Waits for all of this thread's cp.async copies.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// Closes this thread's pending cp.async copies into one group.
__device__ __forceinline__ void cp_async_commit_group() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most n of this thread's commit groups are pending.
template <int n>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(n));
}

// A float from shared memory (ld.shared where a generic pointer would make a generic load).
__device__ __forceinline__ float ld_shared_f32(const void* p) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(smem_addr(p)));
  return v;
}

// 4 bytes to shared memory (st.shared where a generic pointer would make a generic store).
__device__ __forceinline__ void st_shared_u32(void* p, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(smem_addr(p)), "r"(v) : "memory");
}

// 16 bytes from shared memory in one load.
__device__ __forceinline__ uint4 ld_shared_v4(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem_addr(p)));
  return v;
}

// Global loads of data read once: the non-coherent path, not kept in L1
// (L1::no_allocate). kVolatile pins the load where it is written (no
// merging, hoisting or reordering against other volatile asm).
template <bool kVolatile = false>
__device__ __forceinline__ uint4 ld_global_nc_na_v4(const void* p) {
  uint4 v;
  if constexpr (kVolatile) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  } else {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  }
  return v;
}
// 8 and 4 bytes the same way, always volatile (their one user keeps each
// batch's loads ahead of the math on the batch before).
__device__ __forceinline__ void ld_global_nc_na_v2(uint32_t (&w)[2], const void* p) {
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
}
__device__ __forceinline__ void ld_global_nc_na_u32(uint32_t& w, const void* p) {
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(w) : "l"(p));
}

}  // namespace lowbit::cuda::ptx
