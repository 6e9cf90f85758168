// Bounds on JSON read from files, checked on the text before it is parsed:
// nlohmann-json serializes (dump, error excerpts) and compares by recursion,
// so a document nested a hundred thousand levels deep would overflow the
// stack. Header-only and free of lowbit's library so the fuzzers can use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lowbit::core {

// serde_json's default recursion limit: a file the Rust safetensors reader
// and transformers accept is never refused here. Real headers and configs
// nest fewer than ten levels.
inline constexpr size_t kMaxJsonDepth = 128;
// safetensors' own limit on a header, used for every JSON file lowbit reads.
inline constexpr uint64_t kMaxJsonBytes = 100'000'000;

// Calls visit(i) for each index i of `text` outside JSON strings (their
// quotes included), until visit returns false. Malformed text is walked
// too; the parser reports its faults afterwards.
template <class Visit>
inline void for_each_outside_strings(std::string_view text, Visit visit) {
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (!visit(i)) {
      return;
    }
  }
}

// The deepest nesting of arrays and objects in `text` (0 for a scalar),
// brackets inside strings ignored. Stops counting past `limit`.
inline size_t json_depth(std::string_view text, size_t limit = kMaxJsonDepth) {
  size_t depth = 0, deepest = 0;
  for_each_outside_strings(text, [&](size_t i) {
    const char c = text[i];
    if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > limit) return false;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
    return true;
  });
  return deepest;
}

}  // namespace lowbit::core
