// The backend registry: which implementation of an op runs for a device, and
// how memory moves between devices. Backends register themselves once, at the
// first lookup (register_cpu_backend(), register_cuda_backend()); a lookup
// that finds nothing throws no_backend — never a silent fall-through.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lowbit/device.h"
#include "lowbit/ops/kernel_config.h"
#include "lowbit/stream.h"

namespace lowbit::core {

// A call a backend has prepared: the choices that depend only on the call's
// shape (kernel, grid, K splits, workspace size) made once, then run with the
// tensors of any call of that shape (the caller keys it: ops/gemm/matmul.cpp).
template <class Args>
struct PreparedOp {
  virtual ~PreparedOp() = default;
  virtual size_t workspace() const = 0;
  virtual void run(const Args& args, void* workspace, Stream stream) const = 0;
};

template <class Args>
struct OpImpl {
  using RunFn = void (*)(const Args& args, void* workspace, Stream stream);
  using WorkspaceFn = size_t (*)(const Args& args);
  using ConfigsFn = std::vector<KernelConfig> (*)(const Args& args);
  using PrepareFn = std::shared_ptr<const PreparedOp<Args>> (*)(const Args& args);
  const char* name;  // "cpu-reference", "cpu", "cuda"
  DeviceType device;
  int priority;  // the highest-priority impl of a device serves run()
  RunFn run;
  WorkspaceFn workspace = nullptr;  // null: needs none
  ConfigsFn configs = nullptr;      // the kernel configs it can run for args, best first; null: none to choose
  PrepareFn prepare = nullptr;      // null: run() makes its choices on every call
};

template <class Args>
class OpRegistry {
 public:
  static void add(const OpImpl<Args>& impl);
  // Every registered implementation (the test harness runs them all).
  static const std::vector<OpImpl<Args>>& all();
  // The implementation that serves `device`; throws no_backend.
  static const OpImpl<Args>& select(Device device);
  // By name; throws no_backend.
  static const OpImpl<Args>& find(std::string_view name);
};

// Memory services of one device type.
struct DeviceBackend {
  // Memory of `bytes` on device `index`, ordered on `stream` (CUDA: usable by
  // work enqueued there from now on, given back on that stream when the last
  // owner lets go). Throws out_of_memory; never waits for the device.
  std::shared_ptr<void> (*alloc)(size_t bytes, int index, Stream stream) = nullptr;
  // Copies bytes between any two devices of which at least one is this type,
  // ordered on `stream`: complete on return when the destination is host
  // memory (the caller reads it next), otherwise enqueued only.
  void (*copy)(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, Stream stream) = nullptr;
  void (*synchronize)(Stream stream) = nullptr;
  int (*device_count)() = nullptr;
  void (*empty_cache)(int index) = nullptr;
  // Memory on device `index` holding a copy of `bytes` host bytes, complete on
  // return and usable from any stream (tables made once and cached: the one
  // place a backend waits, once per table).
  std::shared_ptr<void> (*constant)(const void* src, size_t bytes, int index) = nullptr;
  // Managed memory of `bytes` preferring device `index` (include/lowbit/managed.h).
  std::shared_ptr<void> (*managed)(size_t bytes, int index) = nullptr;
  // Moves managed pages to `target`, ordered on `stream`.
  void (*prefetch)(const void* data, size_t bytes, Device target, Stream stream) = nullptr;
  // The model name of device `index` ("NVIDIA H100 80GB HBM3", the CPU's
  // model), which keys the tuned-parameter database; kept once read.
  std::string (*name)(int index) = nullptr;
};

void register_device_backend(DeviceType type, const DeviceBackend& backend);
// Throws no_backend when the type has no backend built in.
const DeviceBackend& device_backend(DeviceType type);
bool has_device_backend(DeviceType type);
// The device's model name (DeviceBackend::name), else its str().
std::string device_name(Device device);

// Registers every backend built into the library, once.
void ensure_backends();

// Defined by each backend.
void register_cpu_backend();
#if defined(LOWBIT_WITH_CUDA)
void register_cuda_backend();
#endif

}  // namespace lowbit::core
