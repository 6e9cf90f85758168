// File-system steps shared by the checkpoint commands: where the output goes
// and how it appears there all at once.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace lowbit::io::detail {

// The type of what `path` names (not_found when nothing is there), or an
// io_error naming it: a symbolic link loop, a folder that cannot be read.
std::filesystem::file_status status_of(const std::filesystem::path& path);

std::string read_text(const std::filesystem::path& path);
// read_text of a JSON file, refused (format_error naming it) when larger or
// nested deeper than core/json_limits.h allows.
std::string read_json_text(const std::filesystem::path& path);
// The same bounds on JSON text from elsewhere (a safetensors metadata value);
// `label` says where it came from.
void check_json_bounds(std::string_view text, const std::string& label);
// Writes `text` to `path` through a temporary file and a rename.
void write_text(const std::filesystem::path& path, const std::string& text);

// Where a command writes: a hidden staging folder (or file) beside the
// destination that commit() renames into place; destroyed uncommitted (an
// error, an interruption) it is removed with everything in it. Without
// `overwrite` the rename refuses, in one atomic step, a destination that
// appeared meanwhile (another run to the same output).
class OutputTarget {
 public:
  // Refuses an output that exists (unless `overwrite`), that is the input,
  // or that lies inside the input folder (the input is never modified), or
  // contains it. `op` names the command in messages.
  OutputTarget(const char* op, const std::filesystem::path& in, const std::filesystem::path& out, bool in_is_folder,
               bool overwrite);
  OutputTarget(const OutputTarget&) = delete;
  OutputTarget& operator=(const OutputTarget&) = delete;
  ~OutputTarget();

  // Where a file named `name` of the output is written now.
  std::filesystem::path file(const std::string& name) const;
  // The final path (the folder, or the single file).
  const std::filesystem::path& destination() const { return destination_; }
  void commit();

 private:
  void remove_created() noexcept;

  const char* op_;
  bool folder_;
  bool overwrite_;
  bool committed_ = false;
  std::filesystem::path destination_;
  std::filesystem::path staging_;
  std::vector<std::filesystem::path> created_;  // parent folders this run made, deepest first
};

struct CopiedFiles {
  std::vector<std::string> copied;   // relative paths
  std::vector<std::string> skipped;  // weights in formats this tool does not convert
};

// Copies everything in `in` (recursively, following links) to `out` except
// safetensors files and indexes, config.json (rewritten by the caller),
// hidden entries, and weights in other formats (.bin, .pt, .gguf, ...: they
// would hold the unconverted weights).
CopiedFiles copy_side_files(const std::filesystem::path& in, const std::filesystem::path& out);

}  // namespace lowbit::io::detail
