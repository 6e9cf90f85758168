// The tuned-parameter database (docs/tune.md): kernel parameters measured
// per (op, device, version) and per call key, as the block-sparse seed's
// meta-parameter tables hold them. A parameter changes a kernel's speed,
// never its result.
//
// Text, one entry a line ('#' starts a comment):
//   op | device name | version | key fields | parameters
//   bsr_dense_addmm | NVIDIA H100 80GB HBM3 | float16 0.5 | 4096 4096 4096 32 32 | 4 2 3 4
// key fields are words (shapes, dtypes); parameters integers, or one kernel
// config name (KernelConfig::name; "default": the backend's own choice),
// the form `lowbit tune` writes for ops that take a KernelConfig.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lowbit {

struct TuneEntry {
  std::string op, device, version;
  std::vector<std::string> key;
  std::vector<int64_t> params;  // integer parameters, or empty when `config` names the kernel
  std::string config;           // a kernel config's name, "default", or empty
};

class TuneDb {
 public:
  // Throws lowbit::Error (invalid_argument) naming `origin` and the line of a malformed entry.
  static TuneDb parse(std::string_view text, const std::string& origin = "tune database");
  // An absent file is an empty database; an unreadable one is io_error.
  static TuneDb load(const std::filesystem::path& path);

  // Adds or replaces (same op, device, version and key) each entry of `other`.
  void merge(const TuneDb& other);
  void set(TuneEntry entry);
  // The entries sorted by (op, device, version, key), as parse reads them.
  std::string dump() const;
  const std::vector<TuneEntry>& entries() const { return entries_; }

  // The parameters of `key` for (op, device, version): an exact entry; else,
  // unless `exact`, the same (op, version, key) measured on the nearest
  // device of the same family (device_family; the first such device by
  // name); else nothing (the caller's heuristic).
  std::optional<std::vector<int64_t>> get(std::string_view op, std::string_view device, std::string_view version,
                                          const std::vector<std::string>& key, bool exact = false) const;
  // The same lookup for an entry of the config form: its config name.
  std::optional<std::string> get_config(std::string_view op, std::string_view device, std::string_view version,
                                        const std::vector<std::string>& key, bool exact = false) const;
  // Whether any entry is of `op` (a cheap test before a call builds its key).
  bool has_op(std::string_view op) const;
  // Every entry of (op, device, version) whose key matches `key`, a field "*" matching any.
  std::vector<TuneEntry> match(std::string_view op, std::string_view device, std::string_view version,
                               const std::vector<std::string>& key) const;

 private:
  const TuneEntry* find(std::string_view op, std::string_view device, std::string_view version,
                        const std::vector<std::string>& key, bool exact) const;
  std::vector<TuneEntry> entries_;
};

// A device name's family: "NVIDIA H100 80GB HBM3" -> "NVIDIA H100",
// "NVIDIA A100-SXM4-80GB" -> "NVIDIA A100" (up to the first model word).
std::string device_family(std::string_view device);

// The database in use: the one installed with the library
// (share/lowbit/tune.txt beside it), then the user's file over it
// (LOWBIT_TUNE_DB, else $XDG_CACHE_HOME/lowbit/tune.txt or
// ~/.cache/lowbit/tune.txt). Read once, on first use.
const TuneDb& tune_db();
// The user's file, where `lowbit tune` writes.
std::filesystem::path user_tune_db_path();
// Writes db's dump to `path` through a temporary file renamed over it (a
// reader sees the old file or the new one, never a part); io_error on failure.
void save_tune_db(const TuneDb& db, const std::filesystem::path& path);

}  // namespace lowbit
