// Stream: the queue a GPU op is enqueued on. Opaque: wraps a cudaStream_t when
// the CUDA backend is built; the null handle is the default stream. CPU ops
// run synchronously and ignore it.
#pragma once

namespace lowbit {

struct Stream {
  void* handle = nullptr;  // cudaStream_t

  static constexpr Stream default_stream() { return {}; }
};

// Waits until all work enqueued on `stream` of `device_index` has finished.
void synchronize(Stream stream);

}  // namespace lowbit
