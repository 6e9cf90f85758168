// Reading a checkpoint as weights: the quantization config, the layouts to
// try, and every key sorted into a quantized weight's group or left plain.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/layout.h"
#include "io/quant_config.h"

namespace lowbit::io::detail {

// A Checkpoint seen by the layouts.
class CheckpointSource final : public TensorSource {
 public:
  explicit CheckpointSource(const Checkpoint& c) : c_(c) {}
  const TensorInfo* find(std::string_view name) const override { return c_.find(name); }
  Tensor load(std::string_view name) const override;
  std::string where(std::string_view name) const override;

 private:
  const Checkpoint& c_;
};

// Tensors just produced by a quantization, seen by the layouts.
class MemorySource final : public TensorSource {
 public:
  explicit MemorySource(const NamedTensors& tensors);
  const TensorInfo* find(std::string_view name) const override;
  Tensor load(std::string_view name) const override;
  std::string where(std::string_view name) const override { return std::string(name); }

 private:
  std::map<std::string, std::pair<TensorInfo, Tensor>, std::less<>> tensors_;
};

struct DetectedGroup {
  Group group;
  const Layout* layout = nullptr;
};

struct CheckpointView {
  ReadConfig config;
  std::vector<std::unique_ptr<Layout>> layouts;
  std::map<std::string, DetectedGroup> groups;   // by weight name
  std::map<std::string, std::string> key_owner;  // every grouped key -> its weight
};

// The config (config.json, else the first file's metadata) and the groups.
CheckpointView view_checkpoint(const Checkpoint& c);

// A key no group claimed that still belongs to a quantized weight: a
// companion whose weight or main companion is missing, or codes (I8,
// F8_E4M3, packed U8) whose companions are missing. `problem` names the key,
// what is missing and what it should be.
struct Orphan {
  std::string key;
  std::string problem;
  Format format = Format::plain;  // of codes without companions; plain for a companion
};
std::vector<Orphan> orphan_keys(const Checkpoint& c, const CheckpointView& v);

// Why the checkpoint's quantization_config does not describe `weight`,
// stored as `format` (empty: it does, or there is no config).
std::string config_disagreement(const CheckpointView& v, const std::string& weight, Format format);

}  // namespace lowbit::io::detail
