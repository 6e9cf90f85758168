#include "core/registry.h"

#include <algorithm>
#include <array>
#include <mutex>

#include "core/check.h"
#include "core/op_list.h"

namespace lowbit::core {
namespace {

template <class Args>
std::vector<OpImpl<Args>>& storage() {
  static std::vector<OpImpl<Args>> impls;
  return impls;
}

std::array<DeviceBackend, 2>& device_backends() {
  static std::array<DeviceBackend, 2> backends{};
  return backends;
}

const char* device_type_name(DeviceType t) { return t == DeviceType::cpu ? "cpu" : "cuda"; }

}  // namespace

void ensure_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_cpu_backend();
#if defined(LOWBIT_WITH_CUDA)
    register_cuda_backend();
#endif
  });
}

template <class Args>
void OpRegistry<Args>::add(const OpImpl<Args>& impl) {
  auto& v = storage<Args>();
  v.push_back(impl);
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.priority > b.priority; });
}

template <class Args>
const std::vector<OpImpl<Args>>& OpRegistry<Args>::all() {
  ensure_backends();
  return storage<Args>();
}

template <class Args>
const OpImpl<Args>& OpRegistry<Args>::select(Device device) {
  for (const auto& impl : all()) {
    if (impl.device == device.type) return impl;
  }
  fail(ErrorCode::no_backend, cat(Args::kName, ": no backend for device ", device.str(),
                                  device.is_cuda() ? " (lowbit was built without CUDA)" : ""));
}

template <class Args>
const OpImpl<Args>& OpRegistry<Args>::find(std::string_view name) {
  for (const auto& impl : all()) {
    if (name == impl.name) return impl;
  }
  fail(ErrorCode::no_backend, cat(Args::kName, ": no implementation named '", name, "'"));
}

#define LOWBIT_INSTANTIATE(Args) template class OpRegistry<Args>;
LOWBIT_FOR_EACH_OP(LOWBIT_INSTANTIATE)
#undef LOWBIT_INSTANTIATE

void register_device_backend(DeviceType type, const DeviceBackend& backend) {
  device_backends()[static_cast<size_t>(type)] = backend;
}

bool has_device_backend(DeviceType type) {
  ensure_backends();
  return device_backends()[static_cast<size_t>(type)].alloc != nullptr;
}

std::string device_name(Device device) {
  const DeviceBackend& b = device_backend(device.type);
  return b.name != nullptr ? b.name(device.index) : device.str();
}

const DeviceBackend& device_backend(DeviceType type) {
  ensure_backends();
  const DeviceBackend& b = device_backends()[static_cast<size_t>(type)];
  LOWBIT_REQUIRE(b.alloc != nullptr, ErrorCode::no_backend, "no backend for device type ", device_type_name(type),
                 type == DeviceType::cuda ? " (lowbit was built without CUDA)" : "");
  return b;
}

}  // namespace lowbit::core
