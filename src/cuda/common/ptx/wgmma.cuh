// Warpgroup MMA (wgmma) of sm_90a with A from registers and B from shared
// memory, its fences and groups, its shared-memory descriptor, and the
// warpgroup register reallocation (setmaxnreg) of producer / consumer
// kernels. Everything here compiles to nothing outside sm_90a (the kernels
// that use it are launched only on compute capability 9.0).
#pragma once

#include <cstdint>

#include "cuda/common/ptx/arch.cuh"
#include "cuda/common/ptx/copy.cuh"

namespace lowbit::cuda::ptx {

#if LOWBIT_SM90A

// Orders this warpgroup's register writes before the wgmma that reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Closes the pending wgmma operations into one group.
__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most n wgmma groups are pending.
template <int n>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(n) : "memory");
}

// Raises this warp's register count to n (waits until the SM has them).
template <int n>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(n));
}
// Lowers this warp's register count to n, freeing the rest for other warps.
template <int n>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(n));
}

// The wgmma matrix descriptor of a K-major tile in shared memory with the
// 128-byte swizzle (rows of 64 halves, 8-row atoms 1024 bytes apart, the
// tile 1024-byte aligned): start address, leading byte offset (unused for
// this layout: 1), stride byte offset 1024, layout type 1 (128B swizzle).
// A k16 step further along the row is start + 32 bytes. The high word is
// the same for every tile, so loops step the low word alone (in 16 bytes:
// no carry out of the 14-bit start field within shared memory).
constexpr uint32_t kWgmmaDescK128Hi = (1024 >> 4) | (1u << 30);
__device__ __forceinline__ uint32_t wgmma_desc_k128_lo(const void* tile) {
  return ((smem_addr(tile) & 0x3FFFF) >> 4) | (1u << 16);
}
__device__ __forceinline__ uint64_t wgmma_desc_k128_of(uint32_t lo) { return (uint64_t{kWgmmaDescK128Hi} << 32) | lo; }
__device__ __forceinline__ uint64_t wgmma_desc_k128(const void* tile) {
  return wgmma_desc_k128_of(wgmma_desc_k128_lo(tile));
}

// The descriptor of an N-major tile (a row-major [K, N] operand read with
// imm-trans-b 1) with the 128-byte swizzle: rows of 64 halves of N, one per
// K, 8-row atoms 1024 bytes apart (stride byte offset), the next 64 columns
// of N `chunk_bytes` further (leading byte offset), 1024-byte aligned. A k16
// step is start + 2048 bytes (16 rows).
__device__ __forceinline__ uint64_t wgmma_desc_n128(const void* tile, uint32_t chunk_bytes) {
  const uint32_t lo = ((smem_addr(tile) & 0x3FFFF) >> 4) | ((chunk_bytes >> 4) << 16);
  return (uint64_t{kWgmmaDescK128Hi} << 32) | lo;
}

// d[64 x N] += a[64 x 16] (registers: the mma.m16n8k16 A fragment of each
// warp's 16 rows) · b[16 x N] (shared memory, K-major, descriptor), fp32,
// for N = 64, 128, 256, on fp16 (wgmma_mma_async_rs_f16) or bf16
// (wgmma_mma_async_rs_bf16) operands. The asm operand lists are long; they
// are built from the macros below (the register numbers, then 8
// accumulators at a time).
#define LOWBIT_WGMMA_D0_31                                                 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define LOWBIT_WGMMA_D32_63                                                          \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define LOWBIT_WGMMA_D64_127                                                                     \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "             \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "             \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define LOWBIT_WGMMA_ACC8(i)                                                                                  \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define LOWBIT_WGMMA_ACC32(i) \
  LOWBIT_WGMMA_ACC8(i), LOWBIT_WGMMA_ACC8(i + 8), LOWBIT_WGMMA_ACC8(i + 16), LOWBIT_WGMMA_ACC8(i + 24)
// One wgmma of shape N and element type TY ("f16" / "bf16"); REGS the
// accumulators' numbers, A the first A-fragment operand number (string).
#define LOWBIT_WGMMA_RS(N, TY, REGS, A0, A1, A2, A3, DESC, ...)                \
  asm volatile(                                                                \
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                               \
      "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS    \
      "}, "                                                                    \
      "{%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #DESC ", p, 1, 1, 0;\n}\n" \
      : __VA_ARGS__                                                            \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc))
template <int N>
__device__ __forceinline__ void wgmma_mma_async_rs_f16(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma_mma_async_rs_f16: N is 64, 128 or 256");
  if constexpr (N == 64) {
    LOWBIT_WGMMA_RS(64, "f16", LOWBIT_WGMMA_D0_31, 32, 33, 34, 35, 36, LOWBIT_WGMMA_ACC32(0));
  } else if constexpr (N == 128) {
    LOWBIT_WGMMA_RS(128, "f16", LOWBIT_WGMMA_D0_31 ", " LOWBIT_WGMMA_D32_63, 64, 65, 66, 67, 68, LOWBIT_WGMMA_ACC32(0),
                    LOWBIT_WGMMA_ACC32(32));
  } else {
    LOWBIT_WGMMA_RS(256, "f16", LOWBIT_WGMMA_D0_31 ", " LOWBIT_WGMMA_D32_63 ", " LOWBIT_WGMMA_D64_127, 128, 129, 130,
                    131, 132, LOWBIT_WGMMA_ACC32(0), LOWBIT_WGMMA_ACC32(32), LOWBIT_WGMMA_ACC32(64),
                    LOWBIT_WGMMA_ACC32(96));
  }
}
template <int N>
__device__ __forceinline__ void wgmma_mma_async_rs_bf16(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma_mma_async_rs_bf16: N is 64, 128 or 256");
  if constexpr (N == 64) {
    LOWBIT_WGMMA_RS(64, "bf16", LOWBIT_WGMMA_D0_31, 32, 33, 34, 35, 36, LOWBIT_WGMMA_ACC32(0));
  } else if constexpr (N == 128) {
    LOWBIT_WGMMA_RS(128, "bf16", LOWBIT_WGMMA_D0_31 ", " LOWBIT_WGMMA_D32_63, 64, 65, 66, 67, 68, LOWBIT_WGMMA_ACC32(0),
                    LOWBIT_WGMMA_ACC32(32));
  } else {
    LOWBIT_WGMMA_RS(256, "bf16", LOWBIT_WGMMA_D0_31 ", " LOWBIT_WGMMA_D32_63 ", " LOWBIT_WGMMA_D64_127, 128, 129, 130,
                    131, 132, LOWBIT_WGMMA_ACC32(0), LOWBIT_WGMMA_ACC32(32), LOWBIT_WGMMA_ACC32(64),
                    LOWBIT_WGMMA_ACC32(96));
  }
}

#undef LOWBIT_WGMMA_RS
#undef LOWBIT_WGMMA_ACC32
#undef LOWBIT_WGMMA_ACC8
#undef LOWBIT_WGMMA_D64_127
#undef LOWBIT_WGMMA_D32_63
#undef LOWBIT_WGMMA_D0_31

#endif  // LOWBIT_SM90A

}  // namespace lowbit::cuda::ptx
