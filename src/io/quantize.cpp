// quantize_checkpoint: a float checkpoint (file or folder) into one of the
// quantized layouts, one tensor at a time.
//
// Everything that can be checked is checked before the first byte is
// written: every input header, the options, the output path. Then each
// output file's header is written from the planned sizes and each weight is
// read (memory-mapped), quantized, written and dropped, so memory holds one
// weight at a time whatever the checkpoint's size. Output appears only when
// complete (OutputTarget, SafetensorsWriter).
#include <algorithm>
#include <limits>

#include "core/check.h"
#include "io/error_stats.h"
#include "io/fs_util.h"
#include "io/groups.h"
#include "io/pipeline.h"
#include "io/quant_config.h"
#include "io/selection.h"

namespace lowbit::io {
namespace {

using core::cat;
using namespace detail;

constexpr const char* kOp = "quantize";

LayoutParams params_of(const QuantizeOptions& o) {
  LayoutParams p;
  const bool four_bit = o.format == Format::nf4 || o.format == Format::fp4;
  LOWBIT_REQUIRE(o.format != Format::plain, ErrorCode::invalid_argument, kOp,
                 ": format must be nf4, fp4, int8, fp8-block or int4 (got plain)");
  LOWBIT_REQUIRE(!o.double_quant || four_bit, ErrorCode::invalid_argument, kOp,
                 ": double quant applies to nf4 and fp4 only (got format ", format_name(o.format), ")");
  LOWBIT_REQUIRE(o.blocksize == 0 || four_bit || o.format == Format::fp8_block, ErrorCode::invalid_argument, kOp,
                 ": blocksize applies to nf4, fp4 and fp8-block only (got format ", format_name(o.format), ")");
  if (four_bit) {
    p.blocksize = o.blocksize ? o.blocksize : 64;
    core::require_blocksize(kOp, "blocksize", p.blocksize);
  } else if (o.format == Format::fp8_block) {
    p.blocksize = o.blocksize ? o.blocksize : 128;
    LOWBIT_REQUIRE(p.blocksize > 0 && p.blocksize <= 65536, ErrorCode::invalid_argument, kOp,
                   ": fp8-block blocksize must be in [1, 65536] (got ", p.blocksize, ")");
  }
  LOWBIT_REQUIRE(o.group_size == -1 || o.group_size > 0, ErrorCode::invalid_argument, kOp,
                 ": group size must be -1 (one group per row) or positive (got ", o.group_size, ")");
  p.double_quant = o.double_quant;
  p.group_size = o.group_size;
  p.symmetric = o.symmetric;
  return p;
}

void refuse_quantized(const Checkpoint& ck) {
  const CheckpointView v = view_checkpoint(ck);
  LOWBIT_REQUIRE(!v.config.present, ErrorCode::invalid_argument, kOp, ": ", ck.path().string(),
                 " is already quantized (quantization_config.quant_method '", v.config.method,
                 "'); dequantize it first");
  if (!v.groups.empty()) {
    const DetectedGroup& g = v.groups.begin()->second;
    core::fail(ErrorCode::invalid_argument,
               cat(kOp, ": ", ck.path().string(), " already holds quantized weights (", v.groups.size(), ", such as '",
                   g.group.weight, "' stored as ", format_name(g.layout->family()), "); dequantize it first"));
  }
}

struct Item {
  const TensorInfo* info;
  Choice choice;
};

struct FilePlan {
  const SafetensorsFile* file;
  std::vector<Item> items;
  std::vector<TensorDecl> decls;
};

std::string compute_dtype(const std::vector<FilePlan>& plans) {
  std::map<std::string, uint64_t> bytes;
  for (const FilePlan& p : plans) {
    for (const Item& it : p.items) {
      if (it.choice.quantize) bytes[it.info->dtype] += it.info->nbytes();
    }
  }
  const auto top =
      std::max_element(bytes.begin(), bytes.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  const std::string st = top == bytes.end() ? "BF16" : top->first;
  return std::string(dtype_name(*dtype_from_safetensors(st)));
}

// A copy of a tensor read from the file, not a view of the mapping: a file
// shortened by another process meanwhile is then an error naming it, not SIGBUS.
TensorRef input_view(const SafetensorsFile& f, const TensorInfo& t, Tensor* keep) {
  *keep = f.load(t.name);
  return keep->ref();
}

class Quantizer {
 public:
  Quantizer(const QuantizeOptions& o, const Layout& layout, QuantizeReport& report)
      : o_(o), layout_(layout), report_(report) {}

  // Quantizes one weight into `w`; returns the bytes written.
  uint64_t run(const SafetensorsFile& f, const TensorInfo& t, SafetensorsWriter& w) {
    Tensor copy;
    const TensorRef src = input_view(f, t, &copy);
    TensorReport r = base_report(t);
    r.quantized = true;
    // The GPTQ search and bitsandbytes' int8 rule are CPU code: no point
    // sending the weight to a GPU.
    const bool cpu_code = layout_.family() == Format::gptq || layout_.family() == Format::int8;
    const Device device = cpu_code ? Device::cpu() : o_.device;
    const NamedTensors outs = on_best_device(device, &r.device, [&](Device d) {
      const Tensor on = d.is_cpu() ? Tensor() : Tensor::copy_of(src, d);
      return layout_.quantize(t.name, d.is_cpu() ? src : on.ref());
    });
    for (const auto& [name, tensor] : outs) {
      w.write(name, tensor.ref());
      r.bytes_out += tensor.nbytes();
    }
    if (o_.measure_error) measure(t, src, outs, r);
    report_.tensors.push_back(std::move(r));
    return report_.tensors.back().bytes_out;
  }

  static TensorReport base_report(const TensorInfo& t) {
    TensorReport r;
    r.name = t.name;
    r.dtype = t.dtype;
    r.shape = t.shape;
    r.bytes_in = t.nbytes();
    r.rmse = r.max_abs = r.cosine = r.weight_rms = std::numeric_limits<double>::quiet_NaN();
    return r;
  }

 private:
  void measure(const TensorInfo& t, const TensorRef& src, const NamedTensors& outs, TensorReport& r) const {
    const MemorySource mem(outs);
    Group g{t.name, {}};
    for (const auto& [name, _] : outs) g.keys.push_back(name);
    Device used;
    const Tensor restored =
        on_best_device(r.device, &used, [&](Device d) { return layout_.dequantize(g, mem, DType::f32, d); });
    const ErrorStats s = compare(src, restored);
    r.nonfinite = s.nonfinite;
    r.lost = s.lost;
    if (s.n == 0 && s.nonfinite + s.lost > 0) return;  // nothing finite to compare: the figures stay NaN
    r.rmse = s.rmse();
    r.max_abs = s.max_err();
    r.cosine = s.cosine();
    r.weight_rms = s.rms();
  }

  const QuantizeOptions& o_;
  const Layout& layout_;
  QuantizeReport& report_;
};

}  // namespace

QuantizeReport quantize_checkpoint(const std::filesystem::path& in, const std::filesystem::path& out,
                                   const QuantizeOptions& o) {
  QuantizeReport report;
  const LayoutParams params = params_of(o);
  const auto layout = make_layout(o.format, params);
  const Checkpoint ck = Checkpoint::open(in);
  refuse_quantized(ck);
  OutputTarget target(kOp, in, out, ck.is_folder(), o.overwrite);
  report.output = target.destination();

  // Plan every file before writing any.
  Selection selection(o.include, o.exclude);
  std::vector<FilePlan> plans;
  std::vector<std::string> kept;
  size_t tensors = 0;
  for (const SafetensorsFile& f : ck.files()) {
    FilePlan p{&f, {}, {}};
    for (const TensorInfo& t : f.tensors()) {
      Choice c = selection.choose(t);
      if (c.quantize) {
        const std::string why = layout->cannot_store(t.shape);
        if (!why.empty()) c = {false, why};
      }
      const bool candidate = (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16") && t.shape.size() == 2 &&
                             !module_of(t.name).empty();
      if (!c.quantize && candidate) kept.push_back(module_of(t.name));
      if (c.quantize) {
        const auto d = layout->plan(t.name, t.shape, *dtype_from_safetensors(t.dtype));
        p.decls.insert(p.decls.end(), d.begin(), d.end());
      } else {
        p.decls.push_back({t.name, t.dtype, t.shape, {}});
      }
      report.bytes_in += t.nbytes();
      p.items.push_back({&t, std::move(c)});
    }
    tensors += p.items.size();
    plans.push_back(std::move(p));
  }
  report.unused_patterns = selection.unused();
  std::sort(kept.begin(), kept.end());
  kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
  const auto qc = quantization_config(o.format, params, kept, compute_dtype(plans));
  report.quantization_config = qc.dump();

  Tracker tracker(kOp, o.on_progress, o.cancelled, tensors, report.bytes_in);
  Quantizer quantizer(o, *layout, report);
  std::map<std::string, std::string> weight_map;
  for (const FilePlan& p : plans) {
    const std::string file_name = p.file->path().filename().string();
    SafetensorsWriter w(target.file(file_name), p.decls,
                        output_metadata(p.file->metadata(), report.quantization_config));
    for (const Item& it : p.items) {
      tracker.check_cancel(target.destination());
      const TensorInfo& t = *it.info;
      if (it.choice.quantize) {
        report.bytes_out += quantizer.run(*p.file, t, w);
      } else {
        w.write(t.name, p.file->read(t.name));
        TensorReport r = Quantizer::base_report(t);
        r.kept_because = it.choice.reason;
        r.bytes_out = t.nbytes();
        report.bytes_out += t.nbytes();
        report.tensors.push_back(std::move(r));
      }
      p.file->release(t.name);
      tracker.done(t.name, t.nbytes());
    }
    for (const TensorDecl& d : p.decls) weight_map[d.name] = file_name;
    w.commit();
  }

  if (ck.is_folder()) {
    tracker.check_cancel(target.destination());
    // Side files first: the files written below replace any stale copies.
    const CopiedFiles side = copy_side_files(in, target.file(""));
    report.copied_files = side.copied;
    report.skipped_files = side.skipped;
    if (ck.has_index()) write_text(target.file(ck.index_name()), index_json(weight_map, report.bytes_out));
    const std::string config = ck.config_text();
    if (!config.empty()) {
      write_text(target.file("config.json"),
                 rewrite_config(config, report.quantization_config, (in / "config.json").string()));
      report.wrote_config = true;
    }
    if (o.format == Format::gptq) {
      write_text(target.file("quantize_config.json"), autogptq_quantize_config(params).dump(2) + "\n");
    }
  }
  target.commit();
  report.seconds = tracker.seconds();
  return report;
}

}  // namespace lowbit::io
