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

namespace {

bool strip(std::string_view key, std::string_view suffix, std::string* prefix) {
  if (key.size() <= suffix.size() || !ends_with(key, suffix)) return false;
  *prefix = std::string(key.substr(0, key.size() - suffix.size()));
  return true;
}

bool is_4bit(Format f) { return f == Format::nf4 || f == Format::fp4; }

}  // namespace

std::vector<Orphan> orphan_keys(const Checkpoint& c, const CheckpointView& v) {
  // Codes count as quantized when the config or another weight says the
  // checkpoint holds that format (a lone I8 tensor may be plain data).
  const auto holds = [&](Format f) {
    if (v.config.present && (v.config.format == f || (is_4bit(f) && is_4bit(v.config.format)))) return true;
    for (const auto& [weight, g] : v.groups) {
      const Format family = g.layout->family();
      if (family == f || (is_4bit(f) && is_4bit(family))) return true;
    }
    return false;
  };
  const CheckpointSource src(c);
  std::vector<Orphan> out;
  const auto add = [&](const std::string& key, std::string problem, Format format = Format::plain) {
    out.push_back({key, std::move(problem), format});
  };
  for (const std::string& key : c.names()) {
    if (v.key_owner.count(key)) continue;
    const TensorInfo& t = *c.find(key);
    std::string p;
    if (strip(key, ".weight_format", &p)) {
      const TensorInfo* w = c.find(p + ".weight");
      const std::string scb = w && w->shape.size() == 2 ? cat("F32 [", w->shape[0], "]") : std::string("F32 [N]");
      add(key, cat("'", key, "' is a bitsandbytes int8 companion of '", p, ".weight', but '", p, ".SCB' (", scb,
                   ", one absmax per row) is missing"));
    } else if (strip(key, ".nested_absmax", &p) || strip(key, ".nested_quant_map", &p) ||
               strip(key, ".quant_map", &p) || strip(key, ".absmax", &p)) {
      add(key, c.find(p) == nullptr
                   ? cat("'", key, "' is a bitsandbytes 4-bit companion of '", p, "', which is missing")
                   : cat("'", key, "' is a bitsandbytes 4-bit companion of '", p, "', but '", p, ".absmax' and '", p,
                         ".quant_state.bitsandbytes__nf4' (or __fp4) are missing"));
    } else if (strip(key, ".qzeros", &p) ||
               (v.config.format == Format::gptq && (strip(key, ".scales", &p) || strip(key, ".g_idx", &p)))) {
      add(key, cat("'", key, "' is a GPTQ companion of '", p, ".qweight' (I32 [K*bits/32, N]), which is missing"));
    } else if (ends_with(key, ".weight") && t.dtype == "I8" && holds(Format::int8)) {
      const std::string m = module_of(key);
      add(key, cat("'", key, "' is I8 ", shape_text(t.shape), " as int8 codes are, but '", m, ".SCB' (F32 [",
                   t.shape.empty() ? std::string("N") : cat(t.shape[0]), "], one absmax per row) is missing"),
          Format::int8);
    } else if (ends_with(key, ".weight") && t.dtype == "F8_E4M3" && holds(Format::fp8_block)) {
      const int64_t b = v.config.params.blocksize > 0 ? v.config.params.blocksize : 128;
      const std::string scale =
          t.shape.size() == 2 ? cat("F32 [", (t.shape[0] + b - 1) / b, ", ", (t.shape[1] + b - 1) / b, "]") : "F32";
      add(key, cat("'", key, "' is F8_E4M3 ", shape_text(t.shape), " as fp8-block codes are, but '", key,
                   "_scale_inv' (", scale, ", one scale per ", b, "x", b, " block) is missing"),
          Format::fp8_block);
    } else if (ends_with(key, ".weight") && t.dtype == "U8" && holds(Format::nf4)) {
      add(key, cat("'", key, "' is U8 ", shape_text(t.shape), " as packed 4-bit codes are, but '", key,
                   ".absmax', '", key, ".quant_map' and its quant_state are missing"),
          v.config.format == Format::fp4 ? Format::fp4 : Format::nf4);
    }
  }
  return out;
}

std::string config_disagreement(const CheckpointView& v, const std::string& weight, Format format) {
  if (!v.config.present) return {};
  if (v.config.format == Format::plain) {
    return cat("quantization_config names quant_method '", v.config.method,
               "', which lowbit does not read, so it cannot tell how '", weight, "' is stored");
  }
  if (format == v.config.format) return {};
  return cat("quantization_config says ", format_name(v.config.format), " but '", weight, "' is stored as ",
             format_name(format));
}

}  // namespace lowbit::io::detail
