// Checkpoint: a safetensors file or a Hugging Face folder (single file, or
// shards listed by *.safetensors.index.json), every header validated and
// every tensor name resolved to exactly one file.
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "core/check.h"
#include "io/fs_util.h"
#include "io/shard_index.h"
#include "lowbit/io.h"

namespace lowbit::io {

using core::cat;

namespace {

constexpr std::string_view kIndexSuffix = ".safetensors.index.json";

bool has_suffix(const std::string& s, std::string_view suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Checkpoint Checkpoint::open(const std::filesystem::path& path) {
  Checkpoint c;
  c.path_ = path;
  const auto status = detail::status_of(path);
  LOWBIT_REQUIRE(std::filesystem::exists(status), ErrorCode::io_error, path.string(), ": no such file or folder");
  std::map<std::string, std::string> weight_map;
  if (std::filesystem::is_directory(status)) {
    c.folder_ = true;
    std::vector<std::string> indexes, files;
    std::error_code ec;
    std::filesystem::directory_iterator it(path, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.starts_with(".")) continue;  // also skips lowbit's own temporaries
      if (!has_suffix(name, kIndexSuffix) && !has_suffix(name, ".safetensors")) continue;
      // A FIFO, device or dangling link under a checkpoint's name is an error, never skipped unseen.
      const auto st = detail::status_of(it->path());
      LOWBIT_REQUIRE(std::filesystem::is_regular_file(st), ErrorCode::io_error, it->path().string(),
                     std::filesystem::exists(st) ? ": not a regular file" : ": a link to nothing");
      if (has_suffix(name, kIndexSuffix))
        indexes.push_back(name);
      else if (has_suffix(name, ".safetensors"))
        files.push_back(name);
    }
    LOWBIT_REQUIRE(!ec, ErrorCode::io_error, path.string(), ": cannot list the folder (", ec.message(), ")");
    std::sort(indexes.begin(), indexes.end());
    std::sort(files.begin(), files.end());
    LOWBIT_REQUIRE(indexes.size() <= 1, ErrorCode::format_error, path.string(), ": more than one index (", indexes[0],
                   ", ", indexes[1], "): which checkpoint is meant is unclear");
    if (!indexes.empty()) {
      c.index_name_ = indexes[0];
      const std::filesystem::path index = path / c.index_name_;
      detail::ShardIndex shard_index = detail::read_shard_index(detail::read_json_text(index), index.string());
      files = std::move(shard_index.shards);
      weight_map = std::move(shard_index.weight_map);
    }
    LOWBIT_REQUIRE(!files.empty(), ErrorCode::format_error, path.string(),
                   ": no .safetensors file in this folder (other weight formats are not read)");
    for (const std::string& f : files) c.files_.push_back(SafetensorsFile::open(path / f));
  } else {
    c.files_.push_back(SafetensorsFile::open(path));
  }

  for (size_t i = 0; i < c.files_.size(); ++i) {
    const std::string file = c.files_[i].path().filename().string();
    for (const TensorInfo& t : c.files_[i].tensors()) {
      const auto [it, fresh] = c.where_.emplace(t.name, i);
      LOWBIT_REQUIRE(fresh, ErrorCode::format_error, path.string(), ": tensor '", t.name, "' is in both ",
                     c.files_[it->second].path().filename().string(), " and ", file);
      if (!c.index_name_.empty()) {
        const auto w = weight_map.find(t.name);
        LOWBIT_REQUIRE(w != weight_map.end() && w->second == file, ErrorCode::format_error,
                       (path / c.index_name_).string(), ": tensor '", t.name, "' is in ", file, " but the index ",
                       w == weight_map.end() ? std::string("does not list it") : cat("places it in ", w->second));
      }
    }
  }
  for (const auto& [name, file] : weight_map) {
    LOWBIT_REQUIRE(c.where_.count(name) != 0, ErrorCode::format_error, (path / c.index_name_).string(), ": tensor '",
                   name, "' is listed in ", file, " but that file does not hold it");
  }
  return c;
}

const SafetensorsFile* Checkpoint::file_of(std::string_view name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? nullptr : &files_[it->second];
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  const SafetensorsFile* f = file_of(name);
  return f ? f->find(name) : nullptr;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> v;
  for (const auto& [name, _] : where_) v.push_back(name);
  return v;
}

std::string Checkpoint::config_text() const {
  if (!folder_) return {};
  const std::filesystem::path config = path_ / "config.json";
  // Anything there is read (read_text refuses a FIFO or folder by name): skipping it would drop the config unseen.
  if (!std::filesystem::exists(detail::status_of(config))) return {};
  std::string text = detail::read_json_text(config);
  LOWBIT_REQUIRE(text.find_first_not_of(" \t\r\n") != std::string::npos, ErrorCode::format_error, config.string(),
                 ": empty, not a JSON object");
  return text;
}

}  // namespace lowbit::io
