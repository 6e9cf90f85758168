// Device memory for lowbit's results and scratch. CUDA memory is
// stream-ordered: each allocation is made for the stream of the op that asks,
// and is given back on that stream, so no op waits for the device.
//
// By default the memory comes from a CUDA memory pool of lowbit's own per
// device (cudaMallocFromPoolAsync / cudaFreeAsync), which keeps freed memory
// for reuse (release threshold: unlimited) until empty_cuda_cache(). An
// application that manages GPU memory itself plugs in its allocator with
// set_cuda_allocator; the Python package allocates each call's results and
// scratch with the caller's framework (PyTorch's caching allocator, CuPy's
// pool).
//
// A tensor allocated for stream s and then used on another stream must be
// ordered against s by the user before it is freed (as with PyTorch's
// record_stream).
#pragma once

#include <cstddef>

namespace lowbit {

// A stream-ordered CUDA allocator. `stream` is a cudaStream_t (null: the
// default stream); both calls run with `device` current.
//   allocate    memory of `bytes` usable by work enqueued on `stream` from
//               now on; nullptr when out of memory. Must not wait for the device.
//   deallocate  takes `ptr` back once the work enqueued on `stream` so far is
//               done with it. Must not wait for the device, never throws.
struct CudaAllocator {
  void* (*allocate)(void* ctx, size_t bytes, int device, void* stream) = nullptr;
  void (*deallocate)(void* ctx, void* ptr, size_t bytes, int device, void* stream) = nullptr;
  void* ctx = nullptr;

  bool present() const { return allocate != nullptr && deallocate != nullptr; }
};

// Replaces the process-wide CUDA allocator; an allocator without both
// functions restores the default pool. Memory is always given back to the
// allocator that gave it, so the switch is safe while tensors are alive.
void set_cuda_allocator(const CudaAllocator& allocator);
// The allocator set by set_cuda_allocator; one without functions while the
// default pool serves.
CudaAllocator cuda_allocator();

// Gives the default pool's unused memory on `device` back to the driver
// (what torch.cuda.empty_cache() does for PyTorch's). No-op without CUDA.
void empty_cuda_cache(int device);

}  // namespace lowbit
