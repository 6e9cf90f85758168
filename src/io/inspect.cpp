// inspect_checkpoint: what a checkpoint holds, weight by weight, and whether
// every quantized weight passes its layout's checks.
#include <algorithm>
#include <set>

#include "core/check.h"
#include "io/groups.h"

namespace lowbit::io {
namespace {

using core::cat;
using namespace detail;

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// "nf4 (blocksize 64, double quant, bfloat16)" when every weight agrees,
// "mixed: 3 nf4, 1 int8" otherwise.
std::string detected_format(const std::vector<WeightSummary>& weights) {
  std::map<std::string, size_t> counts;
  std::set<std::string> details;
  for (const WeightSummary& w : weights) {
    if (w.format == Format::plain) continue;
    ++counts[std::string(format_name(w.format))];
    details.insert(w.detail);
  }
  if (counts.empty()) return "plain (no quantized weights)";
  if (counts.size() == 1) {
    const std::string f = counts.begin()->first;
    return details.size() == 1 && !details.begin()->empty() ? cat(f, " (", *details.begin(), ")") : f;
  }
  std::string s = "mixed:";
  for (const auto& [f, n] : counts) s += cat(" ", n, " ", f, ",");
  s.pop_back();
  return s;
}

}  // namespace

CheckpointSummary inspect_checkpoint(const std::filesystem::path& path) {
  CheckpointSummary s;
  s.path = path;
  const Checkpoint ck = Checkpoint::open(path);
  const CheckpointView view = view_checkpoint(ck);
  const CheckpointSource src(ck);
  for (const SafetensorsFile& f : ck.files()) s.files.push_back(f.path().filename().string());

  for (const auto& [weight, g] : view.groups) {
    WeightSummary w;
    w.name = weight;
    w.keys = g.group.keys;
    w.format = g.layout->family();
    for (const std::string& k : g.group.keys) w.bytes += src.find(k)->nbytes();
    w.dtype = src.find(g.group.keys.front())->dtype;
    try {
      const GroupDescription d = g.layout->describe(g.group, src);
      w.format = d.format;
      w.shape = d.shape;
      w.detail = d.detail;
      const int64_t n = numel_of(d.shape);
      w.bits_per_weight = n > 0 ? static_cast<double>(w.bytes) * 8.0 / static_cast<double>(n) : 0.0;
      if (view.config.format != Format::plain) {
        const std::string why = config_disagreement(view, weight, d.format);
        if (!why.empty()) {
          w.problem = cat(src.where(g.group.keys.front()), ": ", why);
          ++s.problems;
        }
      }
    } catch (const Error& e) {
      w.problem = e.what();
      ++s.problems;
    }
    s.weights.push_back(std::move(w));
  }
  std::map<std::string, Orphan> orphans;
  for (Orphan& o : orphan_keys(ck, view)) {
    o.problem = cat(src.where(o.key), ": ", o.problem);
    orphans[o.key] = std::move(o);
  }
  for (const std::string& name : ck.names()) {
    if (view.key_owner.count(name)) continue;
    const TensorInfo& t = *ck.find(name);
    WeightSummary w;
    w.name = name;
    w.dtype = t.dtype;
    w.shape = t.shape;
    w.keys = {name};
    w.bytes = t.nbytes();
    w.bits_per_weight = safetensors_dtype_bits(t.dtype);
    if (const auto it = orphans.find(name); it != orphans.end()) {
      // Codes without their companions are listed in their format, as failing.
      w.format = it->second.format;
      w.problem = it->second.problem;
      ++s.problems;
    }
    s.weights.push_back(std::move(w));
  }
  std::sort(s.weights.begin(), s.weights.end(),
            [](const WeightSummary& a, const WeightSummary& b) { return a.name < b.name; });
  for (const WeightSummary& w : s.weights) {
    s.bytes += w.bytes;
    s.parameters += numel_of(w.shape);
  }
  s.detected = detected_format(s.weights);

  if (view.config.present) {
    s.quantization_config = view.config.json;
    if (view.config.format == Format::plain) {
      s.detected +=
          cat("; quantization_config names quant_method '", view.config.method, "', which lowbit does not read");
      ++s.problems;
    } else {
      // The config must describe the weights its loader will meet (each
      // weight that disagrees is a problem of its own, counted above).
      for (const WeightSummary& w : s.weights) {
        if (w.format != Format::plain && w.format != view.config.format) {
          s.detected += cat("; quantization_config says ", format_name(view.config.format), " but '", w.name, "' is ",
                            format_name(w.format));
          break;
        }
      }
    }
  }
  return s;
}

}  // namespace lowbit::io
