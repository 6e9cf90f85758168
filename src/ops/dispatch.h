// The run/workspace_size steps shared by every op front end: validate, pick
// the backend that owns the tensors' device, call it.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/registry.h"
#include "lowbit/tune.h"
#include "ops/common.h"
#include "ops/tune_keys.h"

namespace lowbit::ops {

// The tuned-parameter database's config for a call that leaves `config`
// empty (docs/tune.md): the entry of its op, device and key, used when the
// backend lists it for this call (a config measured on aligned operands,
// say, is not forced on a view it cannot take); otherwise the call as given.
template <class Args>
std::optional<Args> tuned_call(const Args& args, Device device, const core::OpImpl<Args>& impl, const TuneDb& db) {
  if constexpr (requires { tune_key(args); }) {
    if (!args.config.empty() || impl.configs == nullptr || !db.has_op(Args::kName)) return std::nullopt;
    const TuneKey k = tune_key(args);
    const std::optional<std::string> name = db.get_config(Args::kName, core::device_name(device), k.version, k.key);
    if (!name || *name == "default") return std::nullopt;
    const KernelConfig config = parse_kernel_config(*name);
    const std::vector<KernelConfig> listed = impl.configs(args);
    if (std::find(listed.begin(), listed.end(), config) == listed.end()) return std::nullopt;
    Args out = args;
    out.config = config;
    return out;
  } else {
    return std::nullopt;
  }
}

// Runs fn with args, or with the database's config for them.
template <class Args, class Fn>
decltype(auto) with_tuned(const Args& args, Device device, const core::OpImpl<Args>& impl, Fn&& fn) {
  if constexpr (requires { tune_key(args); }) {
    if (const std::optional<Args> t = tuned_call(args, device, impl, tune_db())) return fn(*t);
  }
  return fn(args);
}

template <class Args>
size_t backend_workspace(const Args& args, Device device) {
  const auto& impl = core::OpRegistry<Args>::select(device);
  return with_tuned(args, device, impl, [&](const Args& a) -> size_t { return impl.workspace ? impl.workspace(a) : 0; });
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
  const core::OpImpl<Args>& impl = core::OpRegistry<Args>::select(device);
  with_tuned(args, device, impl, [&](const Args& a) { run_impl(impl, a, workspace, stream); });
}

// The allocating overloads' run: args checked once, the device's backend
// picked once, its workspace taken from the stream-ordered allocator.
template <class Args>
void run_with_workspace(const Args& args, Device device, Stream stream) {
  check(args);
  const core::OpImpl<Args>& impl = core::OpRegistry<Args>::select(device);
  with_tuned(args, device, impl, [&](const Args& a) {
    const Tensor ws = workspace_on(impl.workspace ? impl.workspace(a) : 0, device, stream);
    impl.run(a, ws.data(), stream);
  });
}

}  // namespace lowbit::ops
