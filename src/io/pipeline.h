// Steps shared by quantize_checkpoint and dequantize_checkpoint: progress and
// cancellation between tensors, running an op where a backend exists, and
// the metadata and side files of an output folder.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <string>

#include "lowbit/error.h"
#include "lowbit/io.h"

namespace lowbit::io::detail {

class Tracker {
 public:
  Tracker(const char* op, const ProgressFn& on_progress, const CancelFn& cancelled, size_t tensors, uint64_t bytes);
  // io_error "interrupted" when the caller asked to stop; the output's
  // staging files are removed as the exception unwinds.
  void check_cancel(const std::filesystem::path& out) const;
  void done(std::string_view name, uint64_t bytes);
  double seconds() const;

 private:
  const char* op_;
  const ProgressFn& on_progress_;
  const CancelFn& cancelled_;
  Progress p_;
  std::chrono::steady_clock::time_point start_;
};

// fn(device), or fn(cpu) when `device` has no kernel for the op (a CUDA
// build whose GPU kernels for it are not there yet). `*used` says which.
template <class Fn>
auto on_best_device(Device device, Device* used, Fn&& fn) {
  *used = device;
  if (device.is_cpu()) return fn(device);
  try {
    return fn(device);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::no_backend) throw;
  }
  *used = Device::cpu();
  return fn(Device::cpu());
}

// The input file's metadata for the output: "format": "pt" (HF transformers
// refuses files without a known format), and quantization_config set or,
// when `config` is empty, removed.
std::map<std::string, std::string> output_metadata(std::map<std::string, std::string> input, const std::string& config);

// model.safetensors.index.json for the tensors of each output file.
std::string index_json(const std::map<std::string, std::string>& weight_map, uint64_t total_size);

// The text of `config_text` (a config.json) with quantization_config set to
// `config`, or removed when `config` is empty; key order kept.
std::string rewrite_config(const std::string& config_text, const std::string& config, const std::string& label);

}  // namespace lowbit::io::detail
