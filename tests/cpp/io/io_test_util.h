// Helpers of the checkpoint tests: scratch folders, small synthetic
// Llama-like checkpoints, raw safetensors files built byte by byte (to
// corrupt them on purpose), and file fingerprints.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness/harness.h"  // expect_error, random_floats
#include "lowbit/error.h"
#include "lowbit/io.h"

namespace lowbit::test {

// A fresh folder under the system temp dir, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Every entry (recursive, hidden ones included), relative and sorted.
  std::vector<std::string> listing() const;

 private:
  std::filesystem::path path_;
};

// The tensors of a small decoder: embeddings, two layers of attention and
// MLP projections, norms, biases, lm_head, an int64 buffer. Float weights
// are bf16 (or `dtype`).
std::vector<std::pair<std::string, Tensor>> tiny_model(DType dtype = DType::bf16);

// A checkpoint folder: config.json, tokenizer files, a README, and the
// model in one file or in `shards` shards with an index.
void write_tiny_checkpoint(const std::filesystem::path& dir, int shards = 1, DType dtype = DType::bf16);

// A safetensors file from a header text and data bytes, exactly as given.
void write_raw(const std::filesystem::path& path, const std::string& header, const std::string& data, bool pad = true);
void write_bytes(const std::filesystem::path& path, const std::string& bytes);
std::string read_bytes(const std::filesystem::path& path);

// A digest of every file under `path` (names and contents).
std::string fingerprint(const std::filesystem::path& path);

// Float values of a tensor (f32/f16/bf16/f8_e4m3) on the CPU.
std::vector<float> floats_of(const TensorRef& t);

}  // namespace lowbit::test
