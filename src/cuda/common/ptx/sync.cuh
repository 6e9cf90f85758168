// Barriers and grid dependencies: named barriers of part of a block, and
// programmatic dependent launch (sm_90+; no-ops elsewhere).
#pragma once

namespace lowbit::cuda::ptx {

// A barrier of `threads` threads (whole warps) on named barrier `id` (0 is __syncthreads').
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrives on named barrier `id` of `threads` threads without waiting (the
// others bar_sync on it).
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Lets the next kernel in the stream, launched as a programmatic dependent,
// start launching now; it waits for this grid in griddepcontrol_wait.
__device__ __forceinline__ void griddepcontrol_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Waits until the grids this one depends on have finished and their
// memory is visible (a kernel launched early as a programmatic dependent).
__device__ __forceinline__ void griddepcontrol_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace lowbit::cuda::ptx
