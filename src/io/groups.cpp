#include "io/groups.h"

#include "core/check.h"

namespace lowbit::io::detail {

using core::cat;

Tensor CheckpointSource::load(std::string_view name) const {
  const SafetensorsFile* f = c_.file_of(name);
  LOWBIT_REQUIRE(f != nullptr, ErrorCode::format_error, c_.path().string(), ": no tensor '", name, "'");
  return f->load(name);
}

std::string CheckpointSource::where(std::string_view name) const {
  const SafetensorsFile* f = c_.file_of(name);
  return (f ? f->path() : c_.path()).string();
}

MemorySource::MemorySource(const NamedTensors& tensors) {
  for (const auto& [name, t] : tensors) {
    TensorInfo info;
    info.name = name;
    info.dtype = std::string(safetensors_dtype_name(t.dtype()));
    info.shape.assign(t.sizes().begin(), t.sizes().end());
    info.end = t.nbytes();
    tensors_.emplace(name, std::make_pair(std::move(info), t));
  }
}

const TensorInfo* MemorySource::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second.first;
}

Tensor MemorySource::load(std::string_view name) const {
  const auto it = tensors_.find(name);
  LOWBIT_REQUIRE(it != tensors_.end(), ErrorCode::internal, "MemorySource: no tensor '", name, "'");
  return it->second.second;
}

CheckpointView view_checkpoint(const Checkpoint& c) {
  CheckpointView v;
  const auto& meta = c.files().front().metadata();
  const auto m = meta.find("quantization_config");
  const std::string label = c.is_folder() ? (c.path() / "config.json").string() : c.path().string();
  v.config = read_quantization_config(c.config_text(), m == meta.end() ? std::string() : m->second, label);
  v.layouts = reading_layouts(v.config.params);
  const CheckpointSource src(c);
  for (const std::string& key : c.names()) {
    for (const auto& layout : v.layouts) {
      std::optional<Group> g = layout->detect(key, src);
      if (!g) continue;
      if (v.groups.count(g->weight)) break;  // found through another of its keys
      for (const std::string& k : g->keys) {
        const auto [it, fresh] = v.key_owner.emplace(k, g->weight);
        LOWBIT_REQUIRE(fresh, ErrorCode::format_error, src.where(k), ": key '", k, "' belongs to both '", it->second,
                       "' and '", g->weight, "'");
      }
      const std::string weight = g->weight;
      v.groups.emplace(weight, DetectedGroup{std::move(*g), layout.get()});
      break;
    }
  }
  return v;
}

}  // namespace lowbit::io::detail
