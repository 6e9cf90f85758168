// Format names as the CLI and messages spell them. Apart from the layouts
// so that code reading a config needs none of them.
#include "lowbit/io.h"

namespace lowbit::io {

std::string_view format_name(Format f) {
  switch (f) {
    case Format::plain: return "plain";
    case Format::nf4: return "nf4";
    case Format::fp4: return "fp4";
    case Format::int8: return "int8";
    case Format::fp8_block: return "fp8-block";
    case Format::gptq: return "gptq";
  }
  return "unknown";
}

bool parse_format(std::string_view name, Format* format, int64_t* group_size) {
  for (Format f : {Format::nf4, Format::fp4, Format::int8, Format::fp8_block, Format::gptq}) {
    if (name == format_name(f)) {
      *format = f;
      return true;
    }
  }
  if (name == "int4") {
    *format = Format::gptq;
    return true;
  }
  constexpr std::string_view kGrouped = "int4-g";
  if (!name.starts_with(kGrouped) || name.size() == kGrouped.size() || name.size() > kGrouped.size() + 6) return false;
  int64_t g = 0;
  for (char c : name.substr(kGrouped.size())) {
    if (c < '0' || c > '9') return false;
    g = g * 10 + (c - '0');
  }
  if (g <= 0) return false;
  *format = Format::gptq;
  if (group_size) *group_size = g;
  return true;
}

}  // namespace lowbit::io
