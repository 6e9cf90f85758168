// DeepSeek-V3 block FP8 (docs/checkpoints.md), as HF transformers' FineGrainedFP8 loads it:
//   M.weight            F8_E4M3 [N, K]
//   M.weight_scale_inv  F32     [ceil(N / b), ceil(K / b)]   b = 128 by default
// w = e4m3 * scale_inv for every b×b tile; the block size is the config's
// weight_block_size.
#include "core/check.h"
#include "io/layout.h"
#include "lowbit/ops/quant.h"

namespace lowbit::io::detail {
namespace {

using core::cat;

constexpr std::string_view kScaleSuffix = "_scale_inv";

class Fp8Layout final : public Layout {
 public:
  Format family() const override { return Format::fp8_block; }

  explicit Fp8Layout(const LayoutParams& p) : block_(p.blocksize > 0 ? p.blocksize : 128) {}

  std::string cannot_store(const std::vector<int64_t>& shape) const override {
    return shape.size() == 2 ? std::string() : "fp8-block stores 2-D weights only";
  }

  std::vector<TensorDecl> plan(const std::string& weight, const std::vector<int64_t>& shape, DType) const override {
    return {{weight, "F8_E4M3", shape, {}}, {weight + std::string(kScaleSuffix), "F32", scale_shape(shape), {}}};
  }

  NamedTensors quantize(const std::string& weight, const TensorRef& w) const override {
    Fp8Quantized q = weight_quant(w, block_);
    return {{weight, on_device(q.values, Device::cpu())},
            {weight + std::string(kScaleSuffix), on_device(q.scale, Device::cpu())}};
  }

  std::optional<Group> detect(const std::string& key, const TensorSource&) const override {
    if (!ends_with(key, kScaleSuffix) || key.size() == kScaleSuffix.size()) return std::nullopt;
    const std::string weight = key.substr(0, key.size() - kScaleSuffix.size());
    return Group{weight, {weight, key}};
  }

  GroupDescription describe(const Group& g, const TensorSource& src) const override {
    const std::string scale = g.weight + std::string(kScaleSuffix);
    const TensorInfo* w = src.find(g.weight);
    if (w == nullptr) group_error(src, scale, cat("'", scale, "' has no fp8 weight '", g.weight, "' beside it"));
    if (w->dtype != "F8_E4M3" || w->shape.size() != 2) {
      group_error(src, g.weight,
                  cat("'", g.weight, "' must be F8_E4M3 [N, K] beside '", scale, "' (got ", w->dtype, " ",
                      shape_text(w->shape), ")"));
    }
    require_key(src, g.weight, scale, "F32", scale_shape(w->shape),
                cat(" (one scale per ", block_, "x", block_, " block)"));
    GroupDescription d;
    d.format = Format::fp8_block;
    d.shape = w->shape;
    d.detail = cat(block_, "x", block_, " blocks, e4m3");
    return d;
  }

  Tensor dequantize(const Group& g, const TensorSource& src, DType dtype, Device device) const override {
    describe(g, src);
    const Tensor q = on_device(src.load(g.weight), device);
    const Tensor s = on_device(src.load(g.weight + std::string(kScaleSuffix)), device);
    return on_device(weight_dequant(q, s, block_, dtype), Device::cpu());
  }

 private:
  std::vector<int64_t> scale_shape(const std::vector<int64_t>& shape) const {
    return {(shape[0] + block_ - 1) / block_, (shape[1] + block_ - 1) / block_};
  }

  int64_t block_;
};

}  // namespace

std::unique_ptr<Layout> make_fp8_layout(const LayoutParams& params) { return std::make_unique<Fp8Layout>(params); }

}  // namespace lowbit::io::detail
