// `lowbit inspect <file|folder>`: the tensors of a checkpoint, grouped into
// weights, with each one's format, dtype, shape, size and bits per weight,
// and the format checks' verdict (exit 1 when a weight fails them).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "core/check.h"
#include "io_cli.h"
#include "lowbit/io.h"

namespace lowbit::cli {
namespace {

struct InspectArgs {
  std::string path;
  bool json = false;
};

nlohmann::ordered_json to_json(const io::CheckpointSummary& s) {
  nlohmann::ordered_json j;
  j["path"] = s.path.string();
  j["files"] = s.files;
  j["detected"] = s.detected;
  j["quantization_config"] = s.quantization_config.empty() ? nlohmann::ordered_json(nullptr)
                                                           : nlohmann::ordered_json::parse(s.quantization_config);
  j["bytes"] = s.bytes;
  j["parameters"] = s.parameters;
  j["problems"] = s.problems;
  j["weights"] = nlohmann::ordered_json::array();
  for (const auto& w : s.weights) {
    nlohmann::ordered_json e{{"name", w.name},     {"format", io::format_name(w.format)},
                             {"detail", w.detail}, {"dtype", w.dtype},
                             {"shape", w.shape},   {"keys", w.keys},
                             {"bytes", w.bytes},   {"bits_per_weight", w.bits_per_weight}};
    if (!w.problem.empty()) e["problem"] = w.problem;
    j["weights"].push_back(std::move(e));
  }
  return j;
}

void print_text(const io::CheckpointSummary& s) {
  std::printf("path:     %s (%zu file%s: %s%s)\n", s.path.string().c_str(), s.files.size(),
              s.files.size() == 1 ? "" : "s", s.files.front().c_str(), s.files.size() > 1 ? ", ..." : "");
  std::printf("format:   %s\n", s.detected.c_str());
  if (!s.quantization_config.empty()) std::printf("config:   %s\n", s.quantization_config.c_str());
  size_t width = 6;
  for (const auto& w : s.weights) width = std::max(width, w.name.size());
  width = std::min<size_t>(width, 60);
  std::printf("\n%-*s %-9s %-7s %-12s %10s %7s  %s\n", static_cast<int>(width), "weight", "format", "dtype", "shape",
              "size", "bits/w", "detail");
  for (const auto& w : s.weights) {
    const std::string detail = w.problem.empty() ? w.detail : "FAILS: " + w.problem;
    std::printf("%-*s %-9s %-7s %-12s %10s %7.3f  %s\n", static_cast<int>(width), fit(w.name, width).c_str(),
                std::string(io::format_name(w.format)).c_str(), w.dtype.c_str(), shape_string(w.shape).c_str(),
                human_bytes(static_cast<double>(w.bytes)).c_str(), w.bits_per_weight, detail.c_str());
  }
  size_t quantized = 0;
  int64_t qparams = 0;
  uint64_t qbytes = 0;
  for (const auto& w : s.weights) {
    if (w.format == io::Format::plain || !w.problem.empty()) continue;
    ++quantized;
    int64_t n = 1;
    for (int64_t d : w.shape) n *= d;
    qparams += n;
    qbytes += w.bytes;
  }
  std::printf("\n%zu weights (%zu quantized), %lld parameters, %s", s.weights.size(), quantized,
              static_cast<long long>(s.parameters), human_bytes(static_cast<double>(s.bytes)).c_str());
  if (s.parameters > 0) {
    std::printf(", %.3f bits/weight overall", 8.0 * static_cast<double>(s.bytes) / static_cast<double>(s.parameters));
  }
  if (qparams > 0) {
    std::printf(", %.3f in quantized weights", 8.0 * static_cast<double>(qbytes) / static_cast<double>(qparams));
  }
  std::printf("\n");
}

void run_inspect(const InspectArgs& a) {
  const io::CheckpointSummary s = io::inspect_checkpoint(a.path);
  if (a.json) {
    std::printf("%s\n", to_json(s).dump(2).c_str());
  } else {
    print_text(s);
  }
  LOWBIT_REQUIRE(s.problems == 0, ErrorCode::format_error, a.path, ": ", s.problems,
                 s.problems == 1 ? " problem" : " problems",
                 " found (see above): the checkpoint fails the format checks");
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "List a checkpoint's weights: detected format, dtypes, shapes, sizes, bits/weight; check the layout");
  cmd->footer(
      "Exit codes: 0 the checkpoint passes the format checks, 1 it does not (or cannot be read), 2 bad "
      "command line. See docs/cli.md.");
  cmd->add_option("path", a->path, "A .safetensors file or a checkpoint folder")->required()->check(CLI::ExistingPath);
  cmd->add_flag("--json", a->json, "Print the summary as JSON");
  cmd->callback([a] { run_inspect(*a); });
}

}  // namespace lowbit::cli
