// A sharded checkpoint's *.safetensors.index.json: which file holds each
// tensor. Apart from the checkpoint so the fuzzers can reach it alone.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace lowbit::io::detail {

struct ShardIndex {
  std::vector<std::string> shards;                // in order of first appearance
  std::map<std::string, std::string> weight_map;  // tensor name -> shard
};

// The index in `text` (already within the JSON bounds, read_json_text), each
// shard a plain file name inside the index's folder: never a path leading out
// of it. format_error naming `label` otherwise.
ShardIndex read_shard_index(const std::string& text, const std::string& label);

}  // namespace lowbit::io::detail
