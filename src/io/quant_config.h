// The `quantization_config` each format's loader expects in config.json,
// and reading one back (to know a file's block size, bits, zero format).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/layout.h"

namespace lowbit::io::detail {

// `kept` lists the modules of linear-like weights left in full precision
// (lm_head, embeddings, excluded layers) for the loaders that must skip them;
// `compute_dtype` is the weights' dtype name ("bfloat16").
nlohmann::ordered_json quantization_config(Format format, const LayoutParams& params,
                                           const std::vector<std::string>& kept, const std::string& compute_dtype);

// AutoGPTQ's quantize_config.json beside the weights (GPTQ only).
nlohmann::ordered_json autogptq_quantize_config(const LayoutParams& params);

struct ReadConfig {
  bool present = false;
  Format format = Format::plain;
  std::string method;  // quant_method as written
  std::string json;    // the whole quantization_config
  LayoutParams params;
};

// From a config.json text (its "quantization_config"), else from a file's
// metadata entry "quantization_config". format_error naming `label` when
// malformed; unsupported_dtype-free: an unknown quant_method is reported
// through `method` with format plain.
ReadConfig read_quantization_config(const std::string& config_json, const std::string& metadata_json,
                                    const std::string& label);

// config.json's torch_dtype when it is float32, float16 or bfloat16; nothing
// for any other value or text that is not a JSON object (the caller then
// picks the format's usual dtype).
std::optional<DType> config_torch_dtype(const std::string& config_json);

}  // namespace lowbit::io::detail
