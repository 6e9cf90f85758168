#include "io/selection.h"

#include <algorithm>
#include <cctype>

#include "core/check.h"
#include "io/layout.h"

namespace lowbit::io::detail {

using core::cat;

bool glob_match(std::string_view p, std::string_view s) {
  // Iterative matcher with one backtrack point: linear in practice, never
  // exponential on patterns with many stars.
  size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi;
      ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

std::string default_keep_reason(const std::string& name) {
  std::string lower = module_of(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  const size_t dot = lower.rfind('.');
  const std::string last = dot == std::string::npos ? lower : lower.substr(dot + 1);
  if (lower.find("lm_head") != std::string::npos || lower == "output" || last == "embed_out") return "output head";
  if (lower.find("embed") != std::string::npos || last == "wte" || last == "wpe" || last == "shared") {
    return "embedding";
  }
  if (lower.find("norm") != std::string::npos || last.starts_with("ln")) return "norm";
  return {};
}

Selection::Selection(std::vector<std::string> include, std::vector<std::string> exclude) {
  for (auto& g : include) include_.push_back({std::move(g), false});
  for (auto& g : exclude) exclude_.push_back({std::move(g), false});
}

Choice Selection::choose(const TensorInfo& t) {
  auto match = [&](std::vector<Pattern>& patterns) -> const Pattern* {
    const Pattern* hit = nullptr;
    for (Pattern& p : patterns) {
      if (glob_match(p.glob, t.name)) {
        p.used = true;
        if (!hit) hit = &p;
      }
    }
    return hit;
  };
  const Pattern* in = match(include_);
  const Pattern* out = match(exclude_);
  if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") return {false, cat("dtype ", t.dtype)};
  if (t.shape.size() != 2) return {false, cat(t.shape.size(), "-D")};
  if (module_of(t.name).empty()) return {false, "not a '<module>.weight'"};
  if (t.numel() == 0) return {false, "empty"};
  if (out) return {false, cat("--exclude ", out->glob)};
  if (in) return {true, {}};
  const std::string why = default_keep_reason(t.name);
  return {why.empty(), why};
}

std::vector<std::string> Selection::unused() const {
  std::vector<std::string> v;
  for (const auto* list : {&include_, &exclude_}) {
    for (const Pattern& p : *list) {
      if (!p.used) v.push_back(p.glob);
    }
  }
  return v;
}

}  // namespace lowbit::io::detail
