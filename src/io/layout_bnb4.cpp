// bitsandbytes NF4 / FP4 as HF transformers saves Linear4bit (docs/checkpoints.md):
//   W                                   U8  [(n + 1) / 2, 1]  two codes per byte
//   W.absmax                            F32 [blocks]  (U8 when double-quantized)
//   W.quant_map                         F32 [16]
//   W.nested_absmax                     F32 [ceil(blocks / 256)]     (double quant)
//   W.nested_quant_map                  F32 [256]                    (double quant)
//   W.quant_state.bitsandbytes__<type>  U8  [len]  UTF-8 JSON of the other fields
// The dict is quant_state_as_dict's, so the bytes are bitsandbytes' own.
#include <algorithm>

#include "core/check.h"
#include "core/hd.h"
#include "io/layout.h"
#include "lowbit/ops/quant.h"

namespace lowbit::io::detail {
namespace {

using core::cat;

constexpr std::string_view kStateInfix = ".quant_state.bitsandbytes__";
constexpr int64_t kNestedBlocksize = 256;  // bitsandbytes' double quant always uses 256

std::string state_key(const std::string& weight, std::string_view type) { return cat(weight, kStateInfix, type); }

class Bnb4Layout final : public Layout {
 public:
  Format family() const override { return type_ == Quant4Type::fp4 ? Format::fp4 : Format::nf4; }

  Bnb4Layout(Format format, const LayoutParams& p)
      : type_(format == Format::fp4 ? Quant4Type::fp4 : Quant4Type::nf4),
        blocksize_(p.blocksize > 0 ? p.blocksize : 64),
        double_quant_(p.double_quant) {}

  std::vector<TensorDecl> plan(const std::string& weight, const std::vector<int64_t>& shape,
                               DType dtype) const override {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const int64_t blocks = core::ceil_div(n, blocksize_);
    // quantize_4bit nests only a non-empty absmax.
    const bool nested = double_quant_ && blocks > 0;
    std::vector<TensorDecl> d;
    d.push_back({weight, "U8", {(n + 1) / 2, 1}, {}});
    d.push_back({weight + ".absmax", nested ? "U8" : "F32", {blocks}, {}});
    d.push_back({weight + ".quant_map", "F32", {16}, {}});
    if (nested) {
      d.push_back({weight + ".nested_absmax", "F32", {(blocks + kNestedBlocksize - 1) / kNestedBlocksize}, {}});
      d.push_back({weight + ".nested_quant_map", "F32", {256}, {}});
    }
    d.push_back({state_key(weight, type_name()), "U8", {}, json_bound(shape, dtype, nested)});
    return d;
  }

  NamedTensors quantize(const std::string& weight, const TensorRef& w) const override {
    auto [packed, state] = quantize_4bit(w, blocksize_, type_, double_quant_);
    NamedTensors out;
    out.emplace_back(weight, on_device(packed, Device::cpu()));
    for (auto& [key, value] : quant_state_as_dict(state, /*packed=*/true)) {
      out.emplace_back(cat(weight, ".", key), std::get<Tensor>(value));
    }
    return out;
  }

  std::optional<Group> detect(const std::string& key, const TensorSource& src) const override {
    std::string weight;
    const size_t at = key.rfind(kStateInfix);
    if (at != std::string::npos && (ends_with(key, "nf4") || ends_with(key, "fp4")) &&
        at + kStateInfix.size() + 3 == key.size()) {
      weight = key.substr(0, at);
    } else if (ends_with(key, ".absmax") && !ends_with(key, ".nested_absmax")) {
      // Codes and absmax without any quant_state: still a 4-bit weight, one
      // that describe() reports as broken.
      weight = key.substr(0, key.size() - 7);
      if (src.find(weight) == nullptr || src.find(state_key(weight, "nf4")) || src.find(state_key(weight, "fp4"))) {
        return std::nullopt;
      }
    } else {
      return std::nullopt;
    }
    Group g{weight, {}};
    for (const std::string& k : {weight, weight + ".absmax", weight + ".quant_map", weight + ".nested_absmax",
                                 weight + ".nested_quant_map", state_key(weight, "nf4"), state_key(weight, "fp4")}) {
      if (src.find(k)) g.keys.push_back(k);
    }
    return g;
  }

  GroupDescription describe(const Group& g, const TensorSource& src) const override {
    const QuantState s = state_of(g, src, Device::cpu());
    GroupDescription d;
    d.format = s.quant_type == "fp4" ? Format::fp4 : Format::nf4;
    d.shape = s.shape;
    d.dtype = s.dtype;
    d.detail = cat("blocksize ", s.blocksize, s.nested() ? ", double quant" : "", ", ", dtype_name(s.dtype));
    const int64_t n = s.numel();
    const TensorInfo* w = src.find(g.weight);
    if (w == nullptr) group_error(src, g.weight, cat("'", g.weight, "' (the packed 4-bit codes) is missing"));
    if (w->dtype != "U8" || w->numel() != (n + 1) / 2) {
      group_error(src, g.weight,
                  cat("'", g.weight, "' must be U8 with ", (n + 1) / 2, " elements (two 4-bit codes per byte of the ",
                      shape_text(s.shape), " weight; got ", w->dtype, " ", shape_text(w->shape), ")"));
    }
    return d;
  }

  Tensor dequantize(const Group& g, const TensorSource& src, DType dtype, Device device) const override {
    const QuantState s = state_of(g, src, device);
    const Tensor packed = on_device(src.load(g.weight), device);
    return on_device(dequantize_4bit(packed, s, dtype), Device::cpu());
  }

 private:
  const char* type_name() const { return type_ == Quant4Type::fp4 ? "fp4" : "nf4"; }

  // The state decoded from its keys; format_error naming the missing or
  // malformed key (quant_state_from_dict validates every field).
  static QuantState state_of(const Group& g, const TensorSource& src, Device device) {
    const bool has_state = std::any_of(g.keys.begin(), g.keys.end(),
                                       [](const std::string& k) { return k.find(kStateInfix) != std::string::npos; });
    if (!has_state) {
      group_error(src, g.weight + ".absmax",
                  cat("'", g.weight, "' has bitsandbytes 4-bit tensors but no '", g.weight,
                      ".quant_state.bitsandbytes__nf4' (or __fp4): the quant_state is missing"));
    }
    QuantStateDict dict;
    for (const std::string& k : g.keys) {
      if (k != g.weight) dict[k] = src.load(k);
    }
    try {
      return quant_state_from_dict(dict, device);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::format_error) throw;
      group_error(src, g.keys.back(), e.what());
    }
  }

  // The JSON's length is known but for nested_offset's digits: reserve the
  // longest float repr (sign, 17 digits, point, e-XXX) and some slack.
  std::optional<uint64_t> json_bound(const std::vector<int64_t>& shape, DType dtype, bool nested) const {
    std::string shape_json = "[";
    for (size_t i = 0; i < shape.size(); ++i) shape_json += cat(i ? ", " : "", shape[i]);
    shape_json += "]";
    std::string json = cat("{\"quant_type\": \"", type_name(), "\", \"blocksize\": ", blocksize_, ", \"dtype\": \"",
                           dtype_name(dtype), "\", \"shape\": ", shape_json, "}");
    if (nested)
      json += cat(", \"nested_blocksize\": ", kNestedBlocksize, ", \"nested_dtype\": \"float32\", \"nested_offset\": ");
    return json.size() + 64;
  }

  Quant4Type type_;
  int64_t blocksize_;
  bool double_quant_;
};

}  // namespace

std::unique_ptr<Layout> make_bnb4_layout(Format format, const LayoutParams& params) {
  return std::make_unique<Bnb4Layout>(format, params);
}

}  // namespace lowbit::io::detail
