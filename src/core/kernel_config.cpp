// KernelConfig's printed form and its parser (include/lowbit/ops/kernel_config.h).
#include "lowbit/ops/kernel_config.h"

#include <charconv>
#include <vector>

#include "core/check.h"

namespace lowbit {
namespace {

constexpr const char* kOp = "parse_kernel_config";

// The field a one-letter key names, or null.
int* field_of(KernelConfig& c, char key) {
  switch (key) {
    case 'm': return &c.block_m;
    case 'n': return &c.block_n;
    case 'k': return &c.block_k;
    case 's': return &c.stages;
    default: return nullptr;
  }
}

// A field token: its key letter then a positive decimal number.
bool is_field(std::string_view token) {
  if (token.size() < 2 || !(token[0] == 'm' || token[0] == 'n' || token[0] == 'k' || token[0] == 's')) return false;
  for (size_t i = 1; i < token.size(); ++i) {
    if (token[i] < '0' || token[i] > '9') return false;
  }
  return true;
}

}  // namespace

std::string KernelConfig::name() const {
  if (family.empty()) return {};
  std::string s = family;
  const std::pair<char, int> fields[] = {{'m', block_m}, {'n', block_n}, {'k', block_k}, {'s', stages}};
  for (const auto& [key, value] : fields) {
    if (value != 0) s += core::cat('_', key, value);
  }
  return s;
}

KernelConfig parse_kernel_config(std::string_view name) {
  KernelConfig c;
  if (name.empty()) return c;
  std::vector<std::string_view> tokens;
  for (size_t start = 0;;) {
    const size_t end = name.find('_', start);
    tokens.push_back(name.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  // The family is every token up to the first field ("dequant_gemm" has two).
  size_t i = 0;
  for (; i < tokens.size() && !is_field(tokens[i]); ++i) {
    const std::string_view t = tokens[i];
    LOWBIT_REQUIRE(!t.empty(), ErrorCode::invalid_argument, kOp, ": '", name,
                   "' has an empty part (expected family[_m<rows>][_n<rows>][_k<columns>][_s<stages>])");
    bool ok = t[0] >= 'a' && t[0] <= 'z';
    for (const char ch : t) ok = ok && ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'));
    LOWBIT_REQUIRE(ok, ErrorCode::invalid_argument, kOp, ": '", name, "': the family '", t,
                   "' must be lowercase letters and digits, a letter first in each part");
    if (!c.family.empty()) c.family += '_';
    c.family += t;
  }
  LOWBIT_REQUIRE(!c.family.empty(), ErrorCode::invalid_argument, kOp, ": '", name,
                 "' starts with a field; a family name comes first (e.g. 'wgmma_m128_n128_k128')");
  char last = 0;
  for (; i < tokens.size(); ++i) {
    const std::string_view t = tokens[i];
    LOWBIT_REQUIRE(is_field(t), ErrorCode::invalid_argument, kOp, ": '", name, "': '", t,
                   "' after the fields is not a field (m, n, k or s then a positive number)");
    const std::string_view order = "mnks";
    LOWBIT_REQUIRE(order.find(t[0]) > order.find(last) || last == 0, ErrorCode::invalid_argument, kOp, ": '", name,
                   "': the fields come once each, in the order m, n, k, s");
    int value = 0;
    const auto [end, ec] = std::from_chars(t.data() + 1, t.data() + t.size(), value);
    LOWBIT_REQUIRE(ec == std::errc() && end == t.data() + t.size() && value > 0, ErrorCode::invalid_argument, kOp,
                   ": '", name, "': '", t, "' must hold a positive number below 2^31");
    *field_of(c, t[0]) = value;
    last = t[0];
  }
  return c;
}

}  // namespace lowbit
