// The run/workspace_size steps shared by every op front end: validate, pick
// the backend that owns the tensors' device, call it.
#pragma once

#include <vector>

#include "core/check.h"
#include "core/registry.h"
#include "ops/common.h"

namespace lowbit::ops {

template <class Args>
size_t backend_workspace(const Args& args, Device device) {
  const auto& impl = core::OpRegistry<Args>::select(device);
  return impl.workspace ? impl.workspace(args) : 0;
}

// The kernel configs the backend serving `device` can run for args, best first.
template <class Args>
std::vector<KernelConfig> backend_configs(const Args& args, Device device) {
  check(args);
  const auto& impl = core::OpRegistry<Args>::select(device);
  return impl.configs ? impl.configs(args) : std::vector<KernelConfig>{};
}

template <class Args>
void run_impl(const core::OpImpl<Args>& impl, const Args& args, void* workspace, Stream stream) {
  if (impl.workspace) {
    const size_t need = impl.workspace(args);
    LOWBIT_REQUIRE(need == 0 || workspace != nullptr, ErrorCode::invalid_argument, Args::kName, ": workspace of ", need,
                   " bytes is required (got none; see workspace_size)");
  }
  impl.run(args, workspace, stream);
}

template <class Args>
void dispatch(const Args& args, Device device, void* workspace, Stream stream) {
  check(args);
  run_impl(core::OpRegistry<Args>::select(device), args, workspace, stream);
}

// The allocating overloads' run: args checked once, the device's backend
// picked once, its workspace taken from the stream-ordered allocator.
template <class Args>
void run_with_workspace(const Args& args, Device device, Stream stream) {
  check(args);
  const core::OpImpl<Args>& impl = core::OpRegistry<Args>::select(device);
  const Tensor ws = workspace_on(impl.workspace ? impl.workspace(args) : 0, device, stream);
  impl.run(args, ws.data(), stream);
}

}  // namespace lowbit::ops
