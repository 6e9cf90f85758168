// bitsandbytes LLM.int8 as Linear8bitLt._save_to_state_dict writes it, for a
// module M whose weight is M.weight [N, K]:
//   M.weight         I8  [N, K]  round(w16 * (127 * (1 / SCB[row])))
//   M.SCB            F32 [N]     row absmax of w16 (the weight cast to fp16)
//   M.weight_format  U8  []      0: row-major (the only layout saved today)
// The codes are computed as transformers' own load_in_8bit computes them
// (io/bnb_int8.h). The scale keys hang off the module, not the weight: HF
// transformers looks them up as name.replace("weight", "SCB").
#include "core/check.h"
#include "io/bnb_int8.h"
#include "io/layout.h"
#include "lowbit/ops/quant.h"

namespace lowbit::io::detail {
namespace {

using core::cat;

class Int8Layout final : public Layout {
 public:
  Format family() const override { return Format::int8; }

  std::string cannot_store(const std::vector<int64_t>& shape) const override {
    return shape.size() == 2 ? std::string() : "int8 stores 2-D weights only";
  }

  std::vector<TensorDecl> plan(const std::string& weight, const std::vector<int64_t>& shape, DType) const override {
    const std::string m = module_of(weight);
    return {{weight, "I8", shape, {}}, {m + ".SCB", "F32", {shape[0]}, {}}, {m + ".weight_format", "U8", {}, {}}};
  }

  NamedTensors quantize(const std::string& weight, const TensorRef& w) const override {
    const Tensor host = w.device.is_cpu() ? Tensor() : Tensor::copy_of(w, Device::cpu());
    BnbInt8 q = bnb_int8_quantize(host.defined() ? host.ref() : w);
    Tensor format = Tensor::empty({}, DType::u8);
    format.ptr<uint8_t>()[0] = 0;
    const std::string m = module_of(weight);
    return {{weight, std::move(q.codes)}, {m + ".SCB", std::move(q.scb)}, {m + ".weight_format", format}};
  }

  std::optional<Group> detect(const std::string& key, const TensorSource& src) const override {
    if (!ends_with(key, ".SCB")) return std::nullopt;
    const std::string m = key.substr(0, key.size() - 4);
    Group g{m + ".weight", {m + ".weight", key}};
    if (src.find(m + ".weight_format")) g.keys.push_back(m + ".weight_format");
    return g;
  }

  GroupDescription describe(const Group& g, const TensorSource& src) const override {
    const std::string m = module_of(g.weight);
    const TensorInfo* w = src.find(g.weight);
    if (w == nullptr) group_error(src, m + ".SCB", cat("'", m, ".SCB' has no int8 weight '", g.weight, "' beside it"));
    if (w->dtype != "I8" || w->shape.size() != 2) {
      group_error(src, g.weight,
                  cat("'", g.weight, "' must be I8 [N, K] beside '", m, ".SCB' (got ", w->dtype, " ",
                      shape_text(w->shape), ")"));
    }
    require_key(src, g.weight, m + ".SCB", "F32", {w->shape[0]}, " (one absmax per row)");
    if (src.find(m + ".weight_format")) {
      require_key(src, g.weight, m + ".weight_format", "U8", {}, " (a scalar)");
      const Tensor f = src.load(m + ".weight_format");
      if (f.ptr<uint8_t>()[0] != 0) {
        group_error(src, m + ".weight_format",
                    cat("'", m, ".weight_format' is ", int{f.ptr<uint8_t>()[0]},
                        "; only 0 (row-major) is supported, the one layout bitsandbytes saves"));
      }
    }
    GroupDescription d;
    d.format = Format::int8;
    d.shape = w->shape;
    d.detail = "row-wise absmax (SCB)";
    return d;
  }

  Tensor dequantize(const Group& g, const TensorSource& src, DType dtype, Device device) const override {
    describe(g, src);
    const Tensor q = on_device(src.load(g.weight), device);
    const Tensor scb = on_device(src.load(module_of(g.weight) + ".SCB"), device);
    return on_device(int8_vectorwise_dequant(q, scb, dtype), Device::cpu());
  }
};

}  // namespace

std::unique_ptr<Layout> make_int8_layout(const LayoutParams&) { return std::make_unique<Int8Layout>(); }

}  // namespace lowbit::io::detail
