// GPTQ int4 with groups (layout in io/gptq.h), keys off the module M:
//   M.qweight I32 [K/8, N], M.qzeros I32 [G, N/8], M.scales F16 [G, N], M.g_idx I32 [K]
// M.bias, when the layer has one, stays as it was.
#include <algorithm>
#include <vector>

#include "core/check.h"
#include "io/gptq.h"
#include "io/layout.h"

namespace lowbit::io::detail {
namespace {

using core::cat;

class GptqLayout final : public Layout {
 public:
  Format family() const override { return Format::gptq; }

  explicit GptqLayout(const LayoutParams& p) {
    spec_.bits = p.bits;
    spec_.group_size = p.group_size;
    spec_.symmetric = p.symmetric;
    spec_.v2_zeros = p.gptq_v2;
    group_size_given_ = p.group_size_given;
  }

  std::string cannot_store(const std::vector<int64_t>& shape) const override {
    if (shape.size() != 2) return "GPTQ stores 2-D weights only";
    const int per = 32 / spec_.bits;
    if (shape[1] % per != 0) return cat("in_features ", shape[1], " is not a multiple of ", per, " (qweight packing)");
    if (shape[0] % per != 0) return cat("out_features ", shape[0], " is not a multiple of ", per, " (qzeros packing)");
    return {};
  }

  std::vector<TensorDecl> plan(const std::string& weight, const std::vector<int64_t>& shape, DType) const override {
    const std::string m = module_of(weight);
    const int per = 32 / spec_.bits;
    const int64_t N = shape[0], K = shape[1], G = groups(K);
    return {{m + ".qweight", "I32", {K / per, N}, {}},
            {m + ".qzeros", "I32", {G, N / per}, {}},
            {m + ".scales", "F16", {G, N}, {}},
            {m + ".g_idx", "I32", {K}, {}}};
  }

  NamedTensors quantize(const std::string& weight, const TensorRef& w) const override {
    // The RTN search is CPU code: it is a small part of a checkpoint's time.
    const Tensor host = w.device.is_cpu() ? Tensor() : Tensor::copy_of(w, Device::cpu());
    GptqTensors t = gptq_quantize_rtn(host.defined() ? host.ref() : w, spec_, weight);
    const std::string m = module_of(weight);
    return {{m + ".qweight", t.qweight}, {m + ".qzeros", t.qzeros}, {m + ".scales", t.scales}, {m + ".g_idx", t.g_idx}};
  }

  std::optional<Group> detect(const std::string& key, const TensorSource& src) const override {
    if (!ends_with(key, ".qweight")) return std::nullopt;
    const std::string m = key.substr(0, key.size() - 8);
    Group g{m + ".weight", {key}};
    for (const char* k : {".qzeros", ".scales", ".g_idx"}) {
      if (src.find(m + k)) g.keys.push_back(m + k);
    }
    return g;
  }

  GroupDescription describe(const Group& g, const TensorSource& src) const override {
    return check(g, src).description;
  }

  Tensor dequantize(const Group& g, const TensorSource& src, DType dtype, Device) const override {
    const Checked c = check(g, src);
    const std::string m = module_of(g.weight);
    const Tensor qweight = src.load(m + ".qweight"), qzeros = src.load(m + ".qzeros"), scales = src.load(m + ".scales");
    return gptq_dequantize(qweight, qzeros, scales, c.g_idx, spec_, dtype);
  }

 private:
  struct Checked {
    GroupDescription description;
    Tensor g_idx;
  };

  int64_t groups(int64_t K) const {
    const int64_t g = spec_.group_size > 0 ? spec_.group_size : K;
    return g > 0 ? (K + g - 1) / g : 1;
  }

  Checked check(const Group& g, const TensorSource& src) const {
    const std::string m = module_of(g.weight);
    const int per = 32 / spec_.bits;
    const std::string qw_key = m + ".qweight";
    const TensorInfo* qw = src.find(qw_key);
    if (qw->dtype != "I32" || qw->shape.size() != 2) {
      group_error(src, qw_key,
                  cat("'", qw_key, "' must be I32 [K*", spec_.bits, "/32, N] (got ", qw->dtype, " ",
                      shape_text(qw->shape), ")"));
    }
    const int64_t N = qw->shape[1], K = qw->shape[0] * per;
    if (N % per != 0) {
      group_error(src, qw_key,
                  cat("'", qw_key, "' has ", N, " columns (out_features), not a multiple of ", per, " as ", spec_.bits,
                      "-bit qzeros packing needs"));
    }
    const TensorInfo* sc = src.find(m + ".scales");
    if (sc == nullptr || sc->shape.size() != 2 || sc->shape[1] != N || sc->shape[0] < 1 ||
        (sc->dtype != "F16" && sc->dtype != "BF16" && sc->dtype != "F32")) {
      group_error(src, m + ".scales",
                  cat("'", m, ".scales' must be F16 [groups, ", N, "] beside '", qw_key, "' (got ",
                      sc ? cat(sc->dtype, " ", shape_text(sc->shape)) : std::string("nothing"), ")"));
    }
    const int64_t G = sc->shape[0];
    require_key(src, g.weight, m + ".qzeros", "I32", {G, N / per},
                cat(" (", spec_.bits, "-bit zero points of ", G, " groups packed along N)"));
    Checked c;
    if (src.find(m + ".g_idx")) {
      require_key(src, g.weight, m + ".g_idx", "I32", {K},
                  cat(" (one group per input column; qweight's ", qw->shape[0], " rows hold ", K, " columns at ",
                      spec_.bits, " bits)"));
      c.g_idx = src.load(m + ".g_idx");
      for (int64_t k = 0; k < K; ++k) {
        const int32_t v = c.g_idx.ptr<const int32_t>()[k];
        if (v < 0 || v >= G) {
          group_error(src, m + ".g_idx", cat("'", m, ".g_idx'[", k, "] = ", v, " is not one of the ", G, " groups"));
        }
      }
      if (group_size_given_ && K > 0) check_group_size(src, m, c.g_idx, K, G);
    } else {
      // Files without g_idx use consecutive groups of the configured size.
      const int64_t gs = spec_.group_size > 0 ? spec_.group_size : K;
      if (groups(K) != G) {
        group_error(src, m + ".scales",
                    cat("'", m, ".scales' holds ", G, " groups but K = ", K, " with group size ", gs, " needs ",
                        groups(K), " (and there is no g_idx)"));
      }
      c.g_idx = Tensor::empty({K}, DType::i32);
      for (int64_t k = 0; k < K; ++k) c.g_idx.ptr<int32_t>()[k] = static_cast<int32_t>(k / gs);
    }
    c.description.format = Format::gptq;
    c.description.shape = {N, K};
    c.description.detail = cat("int", spec_.bits, ", ", group_text(c.g_idx, K, G), zeros_text(src, m + ".qzeros"));
    return c;
  }

  // The configured group size must be the one g_idx and scales use: groups
  // of that many columns (in any order), the last one holding the rest.
  void check_group_size(const TensorSource& src, const std::string& m, const Tensor& g_idx, int64_t K,
                        int64_t G) const {
    const int64_t gs = spec_.group_size > 0 ? std::min(spec_.group_size, K) : K;
    const int64_t want = groups(K);
    if (G != want) {
      group_error(src, m + ".scales",
                  cat("quantization_config.group_size = ", spec_.group_size, " needs ", want, " groups for K = ", K,
                      " but '", m, ".scales' holds ", G));
    }
    std::vector<int64_t> count(static_cast<size_t>(G), 0);
    const int32_t* v = g_idx.ptr<const int32_t>();
    for (int64_t k = 0; k < K; ++k) ++count[static_cast<size_t>(v[k])];
    for (int64_t j = 0; j < G; ++j) {
      const int64_t expected = j + 1 < G ? gs : K - (G - 1) * gs;
      if (count[static_cast<size_t>(j)] != expected) {
        group_error(src, m + ".g_idx",
                    cat("quantization_config.group_size = ", spec_.group_size, " but '", m, ".g_idx' puts ",
                        count[static_cast<size_t>(j)], " columns in group ", j, " (expected ", expected, ")"));
      }
    }
  }

  // "group 128" for consecutive groups (the configured size when a layer
  // has fewer columns than that), "act-order" for permuted ones.
  std::string group_text(const Tensor& g_idx, int64_t K, int64_t G) const {
    const int64_t gs = (K + G - 1) / std::max<int64_t>(G, 1);
    const int32_t* v = g_idx.ptr<const int32_t>();
    for (int64_t k = 0; k < K; ++k) {
      if (v[k] != k / gs) return "act-order (g_idx permuted)";
    }
    if (G == 1 && (spec_.group_size <= 0 || spec_.group_size >= K)) {
      return spec_.group_size > 0 ? cat("group ", spec_.group_size) : std::string("one group per row");
    }
    return cat("group ", gs);
  }

  std::string zeros_text(const TensorSource& src, const std::string& key) const {
    const Tensor z = src.load(key);
    const uint32_t mid = (1u << (spec_.bits - 1)) - (spec_.v2_zeros ? 0u : 1u);
    uint32_t all = 0;
    for (int j = 0; j < 32 / spec_.bits; ++j) all |= mid << (spec_.bits * j);
    const auto* w = z.ptr<const uint32_t>();
    const bool sym = std::all_of(w, w + z.numel(), [&](uint32_t x) { return x == all; });
    return sym ? ", symmetric" : ", asymmetric";
  }

  GptqSpec spec_;
  bool group_size_given_ = false;
};

}  // namespace

std::unique_ptr<Layout> make_gptq_layout(const LayoutParams& params) { return std::make_unique<GptqLayout>(params); }

}  // namespace lowbit::io::detail
