#include "demo_checkpoint.h"

#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "core/check.h"
#include "io_cli.h"
#include "lowbit/io.h"

namespace lowbit::cli {
namespace {

namespace fs = std::filesystem;

// A private folder under $TMPDIR, removed with everything in it.
class TempFolder {
 public:
  TempFolder() {
    std::string pattern = (fs::temp_directory_path() / "lowbit-demo-XXXXXX").string();
    LOWBIT_REQUIRE(::mkdtemp(pattern.data()) != nullptr, ErrorCode::io_error, "demo: cannot create a folder in ",
                   fs::temp_directory_path().string());
    path_ = pattern;
  }
  ~TempFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct Case {
  const char* label;
  io::Format format;
  bool double_quant;
};

// Every checkpoint layout `lowbit quantize` writes, with its loader's name.
constexpr Case kCases[] = {
    {"nf4 (bitsandbytes)", io::Format::nf4, false},         {"nf4 + double quant", io::Format::nf4, true},
    {"fp4 (bitsandbytes)", io::Format::fp4, false},         {"int8 (LLM.int8, SCB)", io::Format::int8, false},
    {"fp8-block (DeepSeek)", io::Format::fp8_block, false}, {"int4-g128 (GPTQ, RTN)", io::Format::gptq, false},
};

// The layer as a Llama checkpoint folder: config.json and model.safetensors.
void write_checkpoint(const fs::path& dir, const std::vector<DemoWeight>& weights) {
  fs::create_directories(dir);
  std::vector<std::pair<std::string, TensorRef>> tensors;
  for (const DemoWeight& w : weights) tensors.emplace_back(demo_weight_key(w.name), w.host->ref());
  io::save_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
  std::FILE* f = std::fopen((dir / "config.json").c_str(), "w");
  LOWBIT_REQUIRE(f != nullptr, ErrorCode::io_error, "demo: cannot write ", (dir / "config.json").string());
  std::fprintf(f,
               "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
               "  \"num_hidden_layers\": 1,\n  \"torch_dtype\": \"bfloat16\"\n}\n");
  std::fclose(f);
}

struct Row {
  Device device;
  double bits = 0.0, rmse = 0.0, max_abs = 0.0, worst_cosine = 1.0, seconds = 0.0;
  uint64_t file_bytes = 0;
  size_t problems = 0;
};

Row run_case(const Case& c, const fs::path& in, const fs::path& out, Device device) {
  io::QuantizeOptions o;
  o.format = c.format;
  o.double_quant = c.double_quant;
  o.device = device;
  Row row;
  const io::QuantizeReport r = io::quantize_checkpoint(in, out, o);
  row.seconds = r.seconds;
  // Error: measured on the very tensors written (dequantized back).
  double sq = 0.0, n_total = 0.0;
  row.device = Device::cpu();
  for (const io::TensorReport& t : r.tensors) {
    if (!t.quantized) continue;
    const double n = static_cast<double>(t.shape[0] * t.shape[1]);
    sq += t.rmse * t.rmse * n;
    n_total += n;
    row.max_abs = std::max(row.max_abs, t.max_abs);
    row.worst_cosine = std::min(row.worst_cosine, t.cosine);
    if (t.device.is_cuda()) row.device = t.device;
  }
  row.rmse = n_total > 0 ? std::sqrt(sq / n_total) : 0.0;
  // Size, bits per weight and the format checks: read back from the files.
  const io::CheckpointSummary s = io::inspect_checkpoint(out);
  uint64_t bytes = 0;
  double params = 0.0;
  for (const io::WeightSummary& w : s.weights) {
    bytes += w.bytes;
    double n = 1.0;
    for (int64_t d : w.shape) n *= static_cast<double>(d);
    params += n;
  }
  row.bits = params > 0 ? static_cast<double>(bytes) * 8.0 / params : 0.0;
  row.file_bytes = fs::file_size(out / "model.safetensors");
  row.problems = s.problems;
  return row;
}

}  // namespace

std::string demo_weight_key(const std::string& name) {
  const bool mlp = name == "gate_proj" || name == "up_proj" || name == "down_proj";
  return core::cat("model.layers.0.", mlp ? "mlp." : "self_attn.", name, ".weight");
}

void run_checkpoint_demo(const std::vector<DemoWeight>& weights, Device device) {
  const TempFolder tmp;
  const fs::path in = tmp.path() / "layer";
  const auto t0 = std::chrono::steady_clock::now();
  write_checkpoint(in, weights);
  const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "\ncheckpoint path: the same layer as a safetensors checkpoint (%s written in %.1f s to %s),\n"
      "quantized by `lowbit quantize` into each checkpoint format and read back by `lowbit inspect`\n\n",
      human_bytes(static_cast<double>(fs::file_size(in / "model.safetensors"))).c_str(), write_s, tmp.path().c_str());
  std::printf("%-24s %-7s %8s %11s %11s %10s %10s %7s %8s\n", "checkpoint format", "device", "bits/w", "RMSE",
              "max |err|", "cosine", "file", "checks", "time s");
  for (const Case& c : kCases) {
    const fs::path out = tmp.path() / "out";
    const Row r = run_case(c, in, out, device);
    std::printf("%-24s %-7s %8.3f %11.3e %11.3e %10.6f %10s %7s %8.2f\n", c.label, r.device.str().c_str(), r.bits,
                r.rmse, r.max_abs, r.worst_cosine, human_bytes(static_cast<double>(r.file_bytes)).c_str(),
                r.problems == 0 ? "pass" : "FAIL", r.seconds);
    std::fflush(stdout);
    if (c.format == io::Format::fp8_block) {
      fs::rename(out, tmp.path() / "fp8");  // read again by the forward pass below
    } else {
      fs::remove_all(out);  // one output on disk at a time
    }
  }
  std::printf(
      "\nbits/w and file: what the written files hold per weight (every key of the layout, read back);\n"
      "cosine: the worst weight's. checks: `lowbit inspect` finds every key, dtype, shape and state as the\n"
      "format's loader expects. time: read, quantize, measure and write, per format.\n");
  run_fp8_forward(tmp.path() / "fp8", weights, device);
}

}  // namespace lowbit::cli
