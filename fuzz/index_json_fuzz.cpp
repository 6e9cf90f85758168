// libFuzzer target: the input is a sharded checkpoint's
// model.safetensors.index.json, read as Checkpoint::open reads it (the JSON
// bounds of read_json_text, then the weight_map). It must be refused with
// lowbit::Error (format_error) or give shards that are plain file names in
// the index's folder, each listed by the weight_map, the weight_map naming
// no others; anything else (a crash, a sanitizer report, another exception,
// a shard name that leads elsewhere) is a bug.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "io/fs_util.h"
#include "io/shard_index.h"
#include "lowbit/error.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

// A name that open() resolves inside the folder, to the file it spells.
bool plain_file_name(const std::string& f) {
  if (f.empty() || f == "." || f == "..") return false;
  if (f.find_first_of(std::string("/\\\0", 3)) != std::string::npos) return false;
  const std::filesystem::path p(f);
  return !p.has_parent_path() && !p.has_root_path() && p.filename() == f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string label = "fuzz/model.safetensors.index.json";
  try {
    lowbit::io::detail::check_json_bounds(text, label);
    const lowbit::io::detail::ShardIndex index = lowbit::io::detail::read_shard_index(text, label);
    require(!index.shards.empty());
    const std::set<std::string> shards(index.shards.begin(), index.shards.end());
    require(shards.size() == index.shards.size());
    for (const std::string& f : index.shards) require(plain_file_name(f));
    std::set<std::string> used;
    for (const auto& [name, file] : index.weight_map) {
      require(shards.count(file) == 1);
      used.insert(file);
    }
    require(used == shards);
  } catch (const lowbit::Error& e) {
    require(e.code() == lowbit::ErrorCode::format_error);
  }
  return 0;
}
