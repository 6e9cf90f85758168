// dequantize_checkpoint: a quantized checkpoint back to float weights under
// their original names, every other tensor copied, quantization_config
// dropped. Same streaming and atomic output as quantize_checkpoint.

#include "core/check.h"
#include "io/fs_util.h"
#include "io/groups.h"
#include "io/pipeline.h"
#include "io/quant_config.h"

namespace lowbit::io {
namespace {

using core::cat;
using namespace detail;

constexpr const char* kOp = "dequantize";

// The dtype a weight comes back in: asked for, else what the layout
// recorded (bitsandbytes 4-bit does), else config.json's torch_dtype, else
// the format's usual one.
DType output_dtype(const DequantizeOptions& o, const GroupDescription& d, const std::string& config_text) {
  if (o.dtype) return *o.dtype;
  if (d.dtype) return *d.dtype;
  if (const std::optional<DType> t = config_torch_dtype(config_text)) return *t;
  return d.format == Format::fp8_block ? DType::bf16 : DType::f16;
}

struct Planned {
  const DetectedGroup* group = nullptr;  // null: a plain tensor
  const TensorInfo* info = nullptr;
  DType dtype{};
};

}  // namespace

DequantizeReport dequantize_checkpoint(const std::filesystem::path& in, const std::filesystem::path& out,
                                       const DequantizeOptions& o) {
  LOWBIT_REQUIRE(!o.dtype || *o.dtype == DType::f32 || *o.dtype == DType::f16 || *o.dtype == DType::bf16,
                 ErrorCode::invalid_argument, kOp, ": dtype must be float32, float16 or bfloat16 (got ",
                 dtype_name(*o.dtype), ")");
  DequantizeReport report;
  const Checkpoint ck = Checkpoint::open(in);
  const CheckpointView view = view_checkpoint(ck);
  const CheckpointSource src(ck);
  // Codes whose companions are missing would be copied as if they were weights.
  const std::vector<Orphan> orphans = orphan_keys(ck, view);
  if (!orphans.empty()) group_error(src, orphans.front().key, orphans.front().problem);
  LOWBIT_REQUIRE(!view.groups.empty(), ErrorCode::invalid_argument, kOp, ": ", in.string(),
                 " holds no quantized weights (nothing to dequantize)");
  const std::string config_text = ck.config_text();

  // Check every group before writing anything.
  std::map<std::string, GroupDescription> described;
  std::map<std::string, DType> dtypes;
  for (const auto& [weight, g] : view.groups) {
    described[weight] = g.layout->describe(g.group, src);
    const std::string why = config_disagreement(view, weight, described[weight].format);
    if (!why.empty()) group_error(src, g.group.keys.front(), why);
    dtypes[weight] = output_dtype(o, described[weight], config_text);
  }
  OutputTarget target(kOp, in, out, ck.is_folder(), o.overwrite);
  report.output = target.destination();

  std::vector<std::vector<Planned>> plans;
  size_t tensors = 0;
  for (const SafetensorsFile& f : ck.files()) {
    std::vector<Planned> p;
    for (const TensorInfo& t : f.tensors()) {
      report.bytes_in += t.nbytes();
      const auto owner = view.key_owner.find(t.name);
      if (owner == view.key_owner.end()) {
        p.push_back({nullptr, &t, {}});
        continue;
      }
      const DetectedGroup& g = view.groups.at(owner->second);
      // A weight goes where its main key was.
      if (g.group.keys.front() == t.name) p.push_back({&g, &t, dtypes.at(g.group.weight)});
    }
    tensors += p.size();
    plans.push_back(std::move(p));
  }

  Tracker tracker(kOp, o.on_progress, o.cancelled, tensors, report.bytes_in);
  std::map<std::string, std::string> weight_map;
  for (size_t i = 0; i < plans.size(); ++i) {
    const SafetensorsFile& f = ck.files()[i];
    const std::string file_name = f.path().filename().string();
    std::vector<TensorDecl> decls;
    for (const Planned& p : plans[i]) {
      if (p.group) {
        decls.push_back({p.group->group.weight,
                         std::string(safetensors_dtype_name(p.dtype)),
                         described.at(p.group->group.weight).shape,
                         {}});
      } else {
        decls.push_back({p.info->name, p.info->dtype, p.info->shape, {}});
      }
      weight_map[decls.back().name] = file_name;
    }
    SafetensorsWriter w(target.file(file_name), decls, output_metadata(f.metadata(), ""));
    for (const Planned& p : plans[i]) {
      tracker.check_cancel(target.destination());
      if (p.group) {
        Device used;
        const Tensor restored = on_best_device(
            o.device, &used, [&](Device d) { return p.group->layout->dequantize(p.group->group, src, p.dtype, d); });
        w.write(p.group->group.weight, restored.ref());
        report.bytes_out += restored.nbytes();
        ++report.weights;
      } else {
        w.write(p.info->name, f.read(p.info->name));  // read, not mapped: see SafetensorsFile::load
        report.bytes_out += p.info->nbytes();
      }
      ++report.tensors;
      f.release(p.info->name);
      tracker.done(p.group ? p.group->group.weight : p.info->name, p.info->nbytes());
    }
    w.commit();
  }

  if (ck.is_folder()) {
    tracker.check_cancel(target.destination());
    copy_side_files(in, target.file(""));
    // AutoGPTQ's file describes quantized weights that are gone now.
    std::error_code ec;
    std::filesystem::remove(target.file("quantize_config.json"), ec);
    if (ck.has_index()) write_text(target.file(ck.index_name()), index_json(weight_map, report.bytes_out));
    if (!config_text.empty()) {
      write_text(target.file("config.json"), rewrite_config(config_text, "", (in / "config.json").string()));
    }
  }
  target.commit();
  report.seconds = tracker.seconds();
  return report;
}

}  // namespace lowbit::io
