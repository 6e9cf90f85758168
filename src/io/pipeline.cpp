#include "io/pipeline.h"

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace lowbit::io::detail {

using core::cat;

Tracker::Tracker(const char* op, const ProgressFn& on_progress, const CancelFn& cancelled, size_t tensors,
                 uint64_t bytes)
    : op_(op), on_progress_(on_progress), cancelled_(cancelled), start_(std::chrono::steady_clock::now()) {
  p_.tensors_total = tensors;
  p_.bytes_total = bytes;
}

void Tracker::check_cancel(const std::filesystem::path& out) const {
  LOWBIT_REQUIRE(!(cancelled_ && cancelled_()), ErrorCode::io_error, op_, ": interrupted; nothing was written to ",
                 out.string());
}

void Tracker::done(std::string_view name, uint64_t bytes) {
  ++p_.tensors_done;
  p_.bytes_done += bytes;
  p_.current = name;
  p_.seconds = seconds();
  if (on_progress_) on_progress_(p_);
}

double Tracker::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::map<std::string, std::string> output_metadata(std::map<std::string, std::string> m, const std::string& config) {
  m.emplace("format", "pt");
  if (config.empty()) {
    m.erase("quantization_config");
  } else {
    m["quantization_config"] = config;
  }
  return m;
}

std::string index_json(const std::map<std::string, std::string>& weight_map, uint64_t total_size) {
  nlohmann::ordered_json j;
  j["metadata"] = {{"total_size", total_size}};
  j["weight_map"] = nlohmann::ordered_json::object();
  for (const auto& [name, file] : weight_map) j["weight_map"][name] = file;
  return j.dump(2) + "\n";
}

std::string rewrite_config(const std::string& config_text, const std::string& config, const std::string& label) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(config_text);
  } catch (const nlohmann::json::exception& e) {
    core::fail(ErrorCode::format_error, cat(label, ": not valid JSON (", e.what(), ")"));
  }
  LOWBIT_REQUIRE(j.is_object(), ErrorCode::format_error, label, ": config.json must hold a JSON object");
  if (config.empty()) {
    j.erase("quantization_config");
  } else {
    j["quantization_config"] = nlohmann::ordered_json::parse(config);
  }
  return j.dump(2) + "\n";
}

}  // namespace lowbit::io::detail
