// Checkpoint I/O: safetensors files (read through a memory map, written
// through a temporary file), sharded Hugging Face folders, and the on-disk
// layouts of the quantized formats their loaders expect (docs/checkpoints.md):
// bitsandbytes NF4/FP4 and LLM.int8, DeepSeek block FP8, and GPTQ int4 with
// groups (quantized by round-to-nearest, not by GPTQ's Hessian-based search).
//
// Every failure throws lowbit::Error: io_error when a file cannot be read or
// written, format_error when a file is malformed (the message names the file,
// the tensor or key, and what was expected), invalid_argument for options.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lowbit/tensor.h"

namespace lowbit::io {

// ------------------------------------------------------------- safetensors

// safetensors' own element type names ("F32", "BF16", "F8_E4M3", "I64", ...).
// A file may hold types lowbit has no DType for (F64, BOOL, U16, F4, ...):
// those are read, copied and written as bytes.
int safetensors_dtype_bits(std::string_view name);  // 0 for an unknown name
std::optional<DType> dtype_from_safetensors(std::string_view name);
std::string_view safetensors_dtype_name(DType dtype);  // throws for packed sub-byte kinds

inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // safetensors' own limit

// One tensor of a safetensors header; [begin, end) counts bytes from the
// start of the data section (right after the header).
struct TensorInfo {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const;
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;                     // 8 + header length
  std::vector<TensorInfo> tensors;              // by offset
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Parses and validates a header: length field sane, JSON well formed, every
// dtype known, shapes matching byte ranges, ranges inside the file, neither
// overlapping nor leaving holes. `bytes` is the file's beginning (at least
// 8 + header length bytes, or the whole file when shorter); `file_size` the
// whole file's size; `label` names the file in messages. Allocates no more
// than the header's own size, whatever the length field says.
SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> bytes, uint64_t file_size, std::string_view label);

// A safetensors file, opened read-only and memory-mapped; copies share the
// mapping, which lives as long as the last copy (or a view() of it is used).
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const;
  uint64_t file_size() const;
  const std::vector<TensorInfo>& tensors() const;  // by offset
  const std::map<std::string, std::string>& metadata() const;
  const TensorInfo* find(std::string_view name) const;  // nullptr when absent
  const TensorInfo& info(std::string_view name) const;  // format_error when absent

  std::span<const uint8_t> bytes(std::string_view name) const;
  // Zero-copy view into the mapping. unsupported_dtype for a type lowbit has
  // no DType for; format_error when the data is not aligned for its type
  // (possible in files written by other tools: use load()).
  TensorRef view(std::string_view name) const;
  // An owning copy on `device` (works whatever the alignment), read from
  // the file (not the mapping): a file shortened by another process since
  // open() is an io_error naming it, where the mapping behind bytes() and
  // view() would raise SIGBUS.
  Tensor load(std::string_view name, Device device = Device::cpu()) const;
  // A copy of the tensor's bytes, read like load() (any dtype).
  std::vector<uint8_t> read(std::string_view name) const;
  // Done with `name` for now: its pages may leave memory (they are read
  // again from the file if touched). Streaming passes call this per tensor.
  void release(std::string_view name) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// What a writer will write: every tensor is declared before the first byte
// so the header can go first and tensors can stream in one by one.
struct TensorDecl {
  std::string name;
  std::string dtype;  // safetensors name
  std::vector<int64_t> shape;
  // A 1-D U8 tensor whose length is known only when written, at most this
  // many bytes (the header reserves room for it; it is stored last).
  std::optional<uint64_t> max_bytes;
};

// Writes <path> through a temporary file beside it, renamed over <path> by
// commit(): an error or an interruption never leaves a partial <path>. Data
// is laid out as safetensors does (by alignment, then name), so every tensor
// is aligned for its type. Tensors may be written in any order.
class SafetensorsWriter {
 public:
  SafetensorsWriter(std::filesystem::path path, std::vector<TensorDecl> tensors,
                    std::map<std::string, std::string> metadata = {});
  SafetensorsWriter(SafetensorsWriter&&) noexcept;
  SafetensorsWriter& operator=(SafetensorsWriter&&) noexcept;
  ~SafetensorsWriter();  // without commit(): removes the temporary file

  void write(std::string_view name, std::span<const uint8_t> data);
  void write(std::string_view name, const TensorRef& tensor);  // any device; dtype and shape as declared
  // Checks every tensor was written, flushes and renames. Returns the size.
  uint64_t commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

void save_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, TensorRef>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// ------------------------------------------------------------- checkpoints

// One .safetensors file, or a folder holding model.safetensors or shards
// listed by model.safetensors.index.json (or, without an index, every
// *.safetensors file in it). Every header is validated on open.
class Checkpoint {
 public:
  static Checkpoint open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  bool is_folder() const { return folder_; }
  bool has_index() const { return !index_name_.empty(); }
  const std::string& index_name() const { return index_name_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }
  // The file holding `name`, or nullptr.
  const SafetensorsFile* file_of(std::string_view name) const;
  const TensorInfo* find(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted
  // config.json of a folder (empty when absent), as text.
  std::string config_text() const;

 private:
  std::filesystem::path path_;
  bool folder_ = false;
  std::string index_name_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t, std::less<>> where_;
};

// ------------------------------------------------------------- formats

enum class Format { plain, nf4, fp4, int8, fp8_block, gptq };

std::string_view format_name(Format f);  // "plain", "nf4", "fp4", "int8", "fp8-block", "gptq"
// Accepts the names above, "int4" and "int4-g<N>" (GPTQ int4; N sets *group_size).
bool parse_format(std::string_view name, Format* format, int64_t* group_size = nullptr);

struct Progress {
  size_t tensors_done = 0;
  size_t tensors_total = 0;
  uint64_t bytes_done = 0;  // input bytes
  uint64_t bytes_total = 0;
  std::string_view current;
  double seconds = 0.0;
};

// Called between tensors; the first time it returns true the operation
// stops, removes what it wrote and throws an io_error saying so.
using CancelFn = std::function<bool()>;
using ProgressFn = std::function<void(const Progress&)>;

struct QuantizeOptions {
  Format format = Format::nf4;
  int64_t blocksize = 0;      // nf4/fp4 (default 64) and fp8-block (default 128); 0: the default
  bool double_quant = false;  // nf4/fp4
  int64_t group_size = 128;   // int4; -1: one group per row
  bool symmetric = true;      // int4
  // Glob patterns (* and ?) over tensor names. A tensor matching an include
  // is quantized even if the default rule keeps it; an exclude always wins.
  std::vector<std::string> include;
  std::vector<std::string> exclude;
  Device device = Device::cpu();  // where the quantization ops run
  bool measure_error = true;      // dequantize each weight back and compare
  bool overwrite = false;         // replace an existing <out>
  ProgressFn on_progress;
  CancelFn cancelled;
};

struct TensorReport {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  bool quantized = false;
  std::string kept_because;  // when not quantized
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  Device device{};  // where it was quantized
  // Of the dequantized weight against the original, over the values finite
  // in both (NaN when not measured, or when there is none).
  double rmse = 0.0, max_abs = 0.0, cosine = 0.0, weight_rms = 0.0;
  int64_t nonfinite = 0;  // original values that are NaN or Inf, left out of the figures above
  int64_t lost = 0;       // finite original values restored as NaN or Inf, left out as well
};

struct QuantizeReport {
  std::filesystem::path output;
  std::vector<TensorReport> tensors;         // in file order
  uint64_t bytes_in = 0, bytes_out = 0;      // tensor data, all files
  std::vector<std::string> copied_files;     // other files of a folder
  std::vector<std::string> skipped_files;    // weights in other formats, not copied
  std::vector<std::string> unused_patterns;  // --include/--exclude that matched nothing
  std::string quantization_config;           // JSON as written to config.json
  bool wrote_config = false;
  double seconds = 0.0;
};

QuantizeReport quantize_checkpoint(const std::filesystem::path& in, const std::filesystem::path& out,
                                   const QuantizeOptions& options);

struct DequantizeOptions {
  std::optional<DType> dtype;  // default: the weight's recorded dtype (see docs/checkpoints.md)
  Device device = Device::cpu();
  bool overwrite = false;
  ProgressFn on_progress;
  CancelFn cancelled;
};

struct DequantizeReport {
  std::filesystem::path output;
  size_t weights = 0;  // dequantized
  size_t tensors = 0;  // written in all
  uint64_t bytes_in = 0, bytes_out = 0;
  double seconds = 0.0;
};

DequantizeReport dequantize_checkpoint(const std::filesystem::path& in, const std::filesystem::path& out,
                                       const DequantizeOptions& options);

// One weight as stored: a plain tensor, or the keys of a quantized one.
struct WeightSummary {
  std::string name;  // the original weight name ("<module>.weight")
  Format format = Format::plain;
  std::string detail;          // "blocksize 64, double quant", "group 128, symmetric", ...
  std::string dtype;           // stored dtype of the main tensor
  std::vector<int64_t> shape;  // of the original weight
  std::vector<std::string> keys;
  uint64_t bytes = 0;
  double bits_per_weight = 0.0;
  std::string problem;  // why it fails the format checks (empty when it passes)
};

struct CheckpointSummary {
  std::filesystem::path path;
  std::vector<std::string> files;
  std::vector<WeightSummary> weights;  // sorted by name
  std::string detected;                // "nf4 (blocksize 64, double quant)", "plain", "mixed: ..."
  std::string quantization_config;     // JSON from config.json or the file's metadata
  uint64_t bytes = 0;                  // tensor data
  int64_t parameters = 0;              // weights' elements, as originally shaped
  size_t problems = 0;
};

// Reads every header, groups the keys of quantized weights, and checks each
// group's dtypes, shapes and quantization state (no weight data is read
// except the small state tensors).
CheckpointSummary inspect_checkpoint(const std::filesystem::path& path);

}  // namespace lowbit::io
