#include "io/layout.h"

#include "core/check.h"

namespace lowbit::io::detail {

using core::cat;

std::string Layout::cannot_store(const std::vector<int64_t>&) const { return {}; }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += cat(i ? ", " : "", shape[i]);
  return s + "]";
}

std::vector<int64_t> shape_of(const TensorInfo& t) { return t.shape; }

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string module_of(std::string_view weight) {
  constexpr std::string_view kSuffix = ".weight";
  return ends_with(weight, kSuffix) ? std::string(weight.substr(0, weight.size() - kSuffix.size())) : std::string();
}

void group_error(const TensorSource& src, const std::string& key, const std::string& message) {
  core::fail(ErrorCode::format_error, cat(src.where(key), ": ", message));
}

const TensorInfo& require_key(const TensorSource& src, const std::string& weight, const std::string& key,
                              std::string_view dtype, const std::vector<int64_t>& shape, std::string_view why) {
  const TensorInfo* t = src.find(key);
  if (t == nullptr)
    group_error(src, key, cat("'", key, "' is missing (it belongs to the quantized weight '", weight, "')"));
  if (t->dtype != dtype || t->shape != shape) {
    group_error(src, key,
                cat("'", key, "' must be ", dtype, " ", shape_text(shape), why, " (got ", t->dtype, " ",
                    shape_text(t->shape), ")"));
  }
  return *t;
}

Tensor on_device(const Tensor& t, Device device) { return t.device() == device ? t : t.to(device); }

std::unique_ptr<Layout> make_layout(Format format, const LayoutParams& params) {
  switch (format) {
    case Format::nf4:
    case Format::fp4: return make_bnb4_layout(format, params);
    case Format::int8: return make_int8_layout(params);
    case Format::fp8_block: return make_fp8_layout(params);
    case Format::gptq: return make_gptq_layout(params);
    case Format::plain: break;
  }
  core::fail(ErrorCode::invalid_argument, cat("make_layout: no layout for format '", format_name(format), "'"));
}

std::vector<std::unique_ptr<Layout>> reading_layouts(const LayoutParams& params) {
  std::vector<std::unique_ptr<Layout>> v;
  for (Format f : {Format::nf4, Format::int8, Format::fp8_block, Format::gptq}) v.push_back(make_layout(f, params));
  return v;
}

}  // namespace lowbit::io::detail
