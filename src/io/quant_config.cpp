#include "io/quant_config.h"

#include <cstdint>
#include <type_traits>

#include "core/check.h"
#include "io/fs_util.h"

namespace lowbit::io::detail {

using core::cat;
using Json = nlohmann::ordered_json;

namespace {

Json module_list(const std::vector<std::string>& kept) { return kept.empty() ? Json(nullptr) : Json(kept); }

// HF transformers' BitsAndBytesConfig.to_dict(), keys sorted as
// save_pretrained writes them.
Json bitsandbytes(bool four_bit, Format format, const LayoutParams& p, const std::vector<std::string>& kept,
                  const std::string& compute_dtype) {
  return Json{{"_load_in_4bit", four_bit},
              {"_load_in_8bit", !four_bit},
              {"bnb_4bit_compute_dtype", four_bit ? compute_dtype : "float32"},
              {"bnb_4bit_quant_storage", "uint8"},
              {"bnb_4bit_quant_type", format == Format::fp4 || !four_bit ? "fp4" : "nf4"},
              {"bnb_4bit_use_double_quant", four_bit && p.double_quant},
              {"llm_int8_enable_fp32_cpu_offload", false},
              {"llm_int8_has_fp16_weight", false},
              {"llm_int8_skip_modules", module_list(kept)},
              {"llm_int8_threshold", 6.0},
              {"load_in_4bit", four_bit},
              {"load_in_8bit", !four_bit},
              {"quant_method", "bitsandbytes"}};
}

const nlohmann::json* field(const nlohmann::json& qc, const char* key) {
  const auto it = qc.find(key);
  return it == qc.end() || it->is_null() ? nullptr : &*it;
}

template <class T>
T get(const nlohmann::json& qc, const char* key, T fallback, const std::string& label) {
  const nlohmann::json* v = field(qc, key);
  if (v == nullptr) return fallback;
  // An integer past int64's range would wrap (2^64 - 1 reads as -1).
  const bool ok = std::is_same_v<T, bool>          ? v->is_boolean()
                  : std::is_same_v<T, std::string> ? v->is_string()
                                                   : v->is_number_integer() && !(v->is_number_unsigned() &&
                                                     v->get<uint64_t>() > uint64_t{INT64_MAX});
  LOWBIT_REQUIRE(ok, ErrorCode::format_error, label, ": quantization_config.", key, " has the wrong type (got ",
                 v->dump(), ")");
  return v->get<T>();
}

}  // namespace

Json quantization_config(Format format, const LayoutParams& p, const std::vector<std::string>& kept,
                         const std::string& compute_dtype) {
  switch (format) {
    case Format::nf4:
    case Format::fp4: return bitsandbytes(true, format, p, kept, compute_dtype);
    case Format::int8: return bitsandbytes(false, format, p, kept, compute_dtype);
    case Format::fp8_block: {
      // DeepSeek-V3's config, plus the modules HF's FineGrainedFP8 must skip.
      const int64_t b = p.blocksize > 0 ? p.blocksize : 128;
      Json j{{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"}, {"weight_block_size", {b, b}}};
      if (!kept.empty()) j["modules_to_not_convert"] = kept;
      return j;
    }
    case Format::gptq: {
      Json j{{"bits", p.bits},
             {"checkpoint_format", p.gptq_v2 ? "gptq_v2" : "gptq"},
             {"damp_percent", 0.01},
             {"desc_act", false},
             {"group_size", p.group_size},
             {"meta", {{"quantizer", {"lowbit"}}, {"method", "rtn"}}},
             {"quant_method", "gptq"},
             {"static_groups", false},
             {"sym", p.symmetric},
             {"true_sequential", true}};
      return j;
    }
    case Format::plain: break;
  }
  core::fail(ErrorCode::invalid_argument, cat("quantization_config: no config for format '", format_name(format), "'"));
}

Json autogptq_quantize_config(const LayoutParams& p) {
  return Json{{"bits", p.bits},
              {"group_size", p.group_size},
              {"damp_percent", 0.01},
              {"desc_act", false},
              {"static_groups", false},
              {"sym", p.symmetric},
              {"true_sequential", true},
              {"model_name_or_path", nullptr},
              {"model_file_base_name", "model"},
              {"quant_method", "gptq"},
              {"checkpoint_format", p.gptq_v2 ? "gptq_v2" : "gptq"}};
}

ReadConfig read_quantization_config(const std::string& config_json, const std::string& metadata_json,
                                    const std::string& label) {
  ReadConfig r;
  nlohmann::json qc;
  try {
    if (!config_json.empty()) {
      check_json_bounds(config_json, label);
      const nlohmann::json config = nlohmann::json::parse(config_json);
      LOWBIT_REQUIRE(config.is_object(), ErrorCode::format_error, label, ": config.json must hold a JSON object");
      if (const auto* q = field(config, "quantization_config")) qc = *q;
    }
    if (qc.is_null() && !metadata_json.empty()) {
      check_json_bounds(metadata_json, cat(label, ": __metadata__ quantization_config"));
      qc = nlohmann::json::parse(metadata_json);
    }
  } catch (const nlohmann::json::exception& e) {
    core::fail(ErrorCode::format_error, cat(label, ": not valid JSON (", e.what(), ")"));
  }
  if (qc.is_null()) return r;
  LOWBIT_REQUIRE(qc.is_object(), ErrorCode::format_error, label, ": quantization_config must be a JSON object");
  r.present = true;
  r.json = qc.dump();
  r.method = get<std::string>(qc, "quant_method", "", label);
  if (r.method == "bitsandbytes") {
    if (get<bool>(qc, "load_in_4bit", false, label)) {
      r.format = get<std::string>(qc, "bnb_4bit_quant_type", "fp4", label) == "nf4" ? Format::nf4 : Format::fp4;
      r.params.double_quant = get<bool>(qc, "bnb_4bit_use_double_quant", false, label);
    } else if (get<bool>(qc, "load_in_8bit", false, label)) {
      r.format = Format::int8;
    }
  } else if (r.method == "fp8") {
    r.format = Format::fp8_block;
    if (const auto* b = field(qc, "weight_block_size")) {
      const bool square = b->is_array() && b->size() == 2 && (*b)[0].is_number_integer() && (*b)[0] == (*b)[1] &&
                          (*b)[0].get<int64_t>() > 0;
      LOWBIT_REQUIRE(
          square, ErrorCode::format_error, label,
          ": quantization_config.weight_block_size must be [b, b] with b > 0 (lowbit reads square blocks; got ",
          b->dump(), ")");
      r.params.blocksize = (*b)[0].get<int64_t>();
    }
  } else if (r.method == "gptq") {
    r.format = Format::gptq;
    const int64_t bits = get<int64_t>(qc, "bits", 4, label);  // checked before narrowing: 2^32 + 4 is not 4
    LOWBIT_REQUIRE(bits == 2 || bits == 4 || bits == 8, ErrorCode::format_error, label,
                   ": quantization_config.bits = ", bits, " (lowbit reads 2, 4 and 8-bit GPTQ)");
    r.params.bits = static_cast<int>(bits);
    r.params.group_size = get<int64_t>(qc, "group_size", 128, label);
    r.params.group_size_given = field(qc, "group_size") != nullptr;
    LOWBIT_REQUIRE(r.params.group_size == -1 || r.params.group_size > 0, ErrorCode::format_error, label,
                   ": quantization_config.group_size must be -1 (one group per row) or positive (got ",
                   r.params.group_size, ")");
    r.params.symmetric = get<bool>(qc, "sym", true, label);
    r.params.gptq_v2 = get<std::string>(qc, "checkpoint_format", "gptq", label) == "gptq_v2";
  }
  return r;
}

std::optional<DType> config_torch_dtype(const std::string& config_json) {
  if (config_json.empty()) return std::nullopt;
  const auto j = nlohmann::json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find("torch_dtype");
  DType t{};
  if (it != j.end() && it->is_string() && parse_dtype(it->get<std::string>(), &t) &&
      (t == DType::f32 || t == DType::f16 || t == DType::bf16)) {
    return t;
  }
  return std::nullopt;
}

}  // namespace lowbit::io::detail
