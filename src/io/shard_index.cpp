#include "io/shard_index.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace lowbit::io::detail {

using core::cat;

ShardIndex read_shard_index(const std::string& text, const std::string& label) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    core::fail(ErrorCode::format_error, cat(label, ": not valid JSON (", e.what(), ")"));
  }
  LOWBIT_REQUIRE(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), ErrorCode::format_error,
                 label, ": an index must be a JSON object with a \"weight_map\" object");
  ShardIndex index;
  for (const auto& [name, file] : j["weight_map"].items()) {
    LOWBIT_REQUIRE(file.is_string(), ErrorCode::format_error, label, ": weight_map['", name,
                   "'] must be a file name (got ", file.dump(), ")");
    const std::string f = file.get<std::string>();
    LOWBIT_REQUIRE(
        // A NUL would end the name open() sees: "a.safetensors\0x" opens a.safetensors.
        !f.empty() && f.find_first_of(std::string_view("/\\\0", 3)) == std::string::npos && f != "." && f != "..",
        ErrorCode::format_error, label, ": weight_map['", name, "'] = ", file.dump(), " must name a file in the same folder");
    index.weight_map[name] = f;
    if (std::find(index.shards.begin(), index.shards.end(), f) == index.shards.end()) index.shards.push_back(f);
  }
  LOWBIT_REQUIRE(!index.shards.empty(), ErrorCode::format_error, label, ": weight_map is empty");
  return index;
}

}  // namespace lowbit::io::detail
