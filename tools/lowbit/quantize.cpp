// `lowbit quantize <in> <out> --format <fmt>`: a safetensors checkpoint (file
// or Hugging Face folder) into the layout a loader expects, with a report of
// what each weight lost. The work is io::quantize_checkpoint's; this file
// parses options and prints.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "core/check.h"
#include "io_cli.h"
#include "lowbit/io.h"

namespace lowbit::cli {
namespace {

struct QuantizeArgs {
  std::string in, out, format, device = "auto";
  bool double_quant = false, sym = false, asym = false, no_report = false, force = false;
  int64_t blocksize = 0;
  int64_t group_size = 0;  // 0: not given
  std::vector<std::string> include, exclude;
};

// Options that do not apply to the format are a bad command line (exit 2).
io::QuantizeOptions options_of(const QuantizeArgs& a, CLI::App* cmd) {
  io::QuantizeOptions o;
  int64_t named_group = 0;
  if (!io::parse_format(a.format, &o.format, &named_group) || o.format == io::Format::plain) {
    throw CLI::ValidationError("--format",
                               "must be nf4, fp4, int8, fp8-block, int4 or int4-g<N> (got " + a.format + ")");
  }
  const bool four_bit = o.format == io::Format::nf4 || o.format == io::Format::fp4;
  const bool int4 = o.format == io::Format::gptq;
  if (a.double_quant && !four_bit) throw CLI::ValidationError("--double-quant", "applies to nf4 and fp4 only");
  if (cmd->count("--blocksize") && !four_bit && o.format != io::Format::fp8_block) {
    throw CLI::ValidationError("--blocksize", "applies to nf4, fp4 and fp8-block only");
  }
  if ((cmd->count("--group-size") || a.sym || a.asym) && !int4) {
    throw CLI::ValidationError("--group-size/--sym/--asym", "apply to int4 only");
  }
  if (four_bit && a.blocksize && (a.blocksize < 32 || a.blocksize > 4096 || (a.blocksize & (a.blocksize - 1)))) {
    throw CLI::ValidationError("--blocksize",
                               "nf4/fp4 take a power of two from 32 to 4096 (got " + std::to_string(a.blocksize) + ")");
  }
  const bool fp8 = o.format == io::Format::fp8_block;
  if (fp8 && cmd->count("--blocksize") && (a.blocksize < 16 || a.blocksize > 1024 || (a.blocksize & (a.blocksize - 1)))) {
    throw CLI::ValidationError("--blocksize",
                               "fp8-block takes a power of two from 16 to 1024 (got " + std::to_string(a.blocksize) + ")");
  }
  if (cmd->count("--group-size") && a.group_size == 0) {
    throw CLI::ValidationError("--group-size", "must be -1 (one group per row) or positive (got 0)");
  }
  if (a.group_size && named_group && a.group_size != named_group) {
    throw CLI::ValidationError("--group-size", "disagrees with --format " + a.format);
  }
  o.blocksize = a.blocksize;
  o.double_quant = a.double_quant;
  o.group_size = a.group_size ? a.group_size : named_group ? named_group : 128;
  o.symmetric = !a.asym;
  o.include = a.include;
  o.exclude = a.exclude;
  o.device = pick_io_device(a.device, "quantize");
  o.measure_error = !a.no_report;
  o.overwrite = a.force;
  return o;
}

std::string format_label(const io::QuantizeOptions& o) {
  switch (o.format) {
    case io::Format::nf4:
    case io::Format::fp4:
      return core::cat(io::format_name(o.format), ", blocksize ", o.blocksize ? o.blocksize : 64,
                       o.double_quant ? ", double quant" : "");
    case io::Format::fp8_block: return core::cat("fp8 e4m3, ", o.blocksize ? o.blocksize : 128, "-blocks");
    case io::Format::gptq:
      return core::cat("int4 GPTQ layout (round-to-nearest), group ", o.group_size,
                       o.symmetric ? ", symmetric" : ", asymmetric");
    default: return std::string(io::format_name(o.format));
  }
}

bool is_float_2d(const io::TensorReport& t) {
  return t.shape.size() == 2 && (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16");
}

void print_table(const io::QuantizeReport& r) {
  size_t width = 6;
  for (const auto& t : r.tensors) {
    if (t.quantized || is_float_2d(t)) width = std::max(width, t.name.size());
  }
  width = std::min<size_t>(width, 56);
  std::printf("%-*s %-11s %-5s %7s %10s %10s %9s  %s\n", static_cast<int>(width), "tensor", "shape", "dtype", "bits/w",
              "RMSE", "max|err|", "cosine", "");
  size_t others = 0;
  for (const auto& t : r.tensors) {
    const std::string name = fit(t.name, width);
    if (t.quantized) {
      const double bits = 8.0 * static_cast<double>(t.bytes_out) / static_cast<double>(t.shape[0] * t.shape[1]);
      std::printf("%-*s %-11s %-5s %7.3f ", static_cast<int>(width), name.c_str(), shape_string(t.shape).c_str(),
                  t.dtype.c_str(), bits);
      if (std::isnan(t.cosine) && t.nonfinite + t.lost > 0) {
        std::printf("%31s", "(nothing finite to compare)");
      } else {
        std::printf("%10.3e %10.3e %9.6f", t.rmse, t.max_abs, t.cosine);
      }
      if (t.nonfinite > 0) std::printf("  %lld NaN/Inf in the input", static_cast<long long>(t.nonfinite));
      if (t.lost > 0) std::printf("  %lld finite restored as NaN/Inf", static_cast<long long>(t.lost));
      std::printf("%s\n", t.device.is_cuda() ? "  (gpu)" : "");
    } else if (is_float_2d(t)) {
      std::printf("%-*s %-11s %-5s %7s  kept: %s\n", static_cast<int>(width), name.c_str(),
                  shape_string(t.shape).c_str(), t.dtype.c_str(), "-", t.kept_because.c_str());
    } else {
      ++others;
    }
  }
  if (others)
    std::printf("(%zu other tensors -- biases, norms, 1-D and integer tensors -- copied as they are)\n", others);
  std::printf("\n");
}

void print_summary(const io::QuantizeReport& r, const io::QuantizeOptions& o, bool measured) {
  size_t quantized = 0;
  int64_t weights = 0;
  uint64_t qbytes = 0;
  // The error figures cover finite weights only; tensors with none are left out.
  int64_t finite = 0, nonfinite = 0, lost = 0;
  size_t nonfinite_tensors = 0;
  std::string first_nonfinite;
  double sq = 0.0, x_sq = 0.0, worst_cos = 0.0;
  std::string worst;
  for (const auto& t : r.tensors) {
    if (!t.quantized) continue;
    ++quantized;
    const int64_t n = t.shape[0] * t.shape[1];
    weights += n;
    qbytes += t.bytes_out;
    if (t.nonfinite + t.lost > 0) {
      nonfinite += t.nonfinite;
      lost += t.lost;
      if (nonfinite_tensors++ == 0) first_nonfinite = t.name;
    }
    const int64_t compared = n - t.nonfinite - t.lost;
    if (compared == 0 || std::isnan(t.cosine)) continue;
    const double m = static_cast<double>(compared);
    finite += compared;
    sq += t.rmse * t.rmse * m;
    x_sq += t.weight_rms * t.weight_rms * m;
    if (worst.empty() || t.cosine < worst_cos) {
      worst_cos = t.cosine;
      worst = t.name;
    }
  }
  std::printf("format:    %s\n", format_label(o).c_str());
  std::printf("quantized: %zu of %zu tensors, %lld weights", quantized, r.tensors.size(),
              static_cast<long long>(weights));
  if (weights) std::printf(", %.3f bits/weight", 8.0 * static_cast<double>(qbytes) / static_cast<double>(weights));
  std::printf("\n");
  if (measured && finite) {
    const double rmse = std::sqrt(sq / static_cast<double>(finite));
    std::printf("error:     RMSE %.3e over all %squantized weights (%.2f%% of their RMS); worst cosine %.6f (%s)\n",
                rmse, nonfinite + lost > 0 ? "finite " : "",
                x_sq > 0 ? 100.0 * rmse / std::sqrt(x_sq / static_cast<double>(finite)) : 0.0, worst_cos,
                worst.c_str());
  }
  if (measured && nonfinite + lost > 0) {
    std::printf("non-finite: %lld weights are NaN or Inf, %lld finite ones were restored as NaN or Inf (%zu tensor%s, "
                "first '%s'); all left out of the error figures\n",
                static_cast<long long>(nonfinite), static_cast<long long>(lost), nonfinite_tensors,
                nonfinite_tensors == 1 ? "" : "s", first_nonfinite.c_str());
  }
  std::printf("size:      %s -> %s (%.2fx smaller) in %.1f s\n", human_bytes(static_cast<double>(r.bytes_in)).c_str(),
              human_bytes(static_cast<double>(r.bytes_out)).c_str(),
              r.bytes_out ? static_cast<double>(r.bytes_in) / static_cast<double>(r.bytes_out) : 0.0, r.seconds);
  std::printf("output:    %s\n", r.output.string().c_str());
  if (r.wrote_config) {
    std::printf("config:    config.json has the quantization_config its loader expects\n");
  } else {
    std::printf("config:    %s: the quantization_config is in the file's metadata\n",
                std::filesystem::is_directory(r.output) ? "the input folder has no config.json"
                                                        : "a single file has no config.json");
  }
  if (!r.copied_files.empty())
    std::printf("copied:    %zu other files (tokenizer, configs, ...)\n", r.copied_files.size());
  for (const auto& s : r.skipped_files)
    std::printf("skipped:   %s (weights in another format, not converted)\n", s.c_str());
  for (const auto& p : r.unused_patterns)
    std::fprintf(stderr, "lowbit: warning: pattern '%s' matched no tensor\n", p.c_str());
}

void run_quantize(const QuantizeArgs& a, CLI::App* cmd) {
  io::QuantizeOptions o = options_of(a, cmd);
  InterruptGuard guard;
  ProgressBar bar("quantize");
  o.cancelled = [&guard] { return guard.requested(); };
  o.on_progress = [&bar](const io::Progress& p) { bar.update(p); };
  io::QuantizeReport r;
  try {
    r = io::quantize_checkpoint(a.in, a.out, o);
  } catch (const Error&) {
    bar.finish();
    if (guard.requested()) guard.reraise();
    throw;
  }
  bar.finish();
  if (!a.no_report) print_table(r);
  print_summary(r, o, !a.no_report);
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Quantize a safetensors checkpoint (file or folder) into the layout its loader expects");
  cmd->footer(
      "Formats: nf4, fp4 (bitsandbytes 4-bit), int8 (bitsandbytes LLM.int8), fp8-block (DeepSeek 128x128 FP8),\n"
      "int4 / int4-g<N> (GPTQ layout, round-to-nearest: no calibration). By default the 2-D weights of linear\n"
      "layers are quantized; embeddings, norms and lm_head stay as they are. See docs/cli.md and docs/checkpoints.md.\n"
      "Exit codes: 0 done, 1 lowbit error (bad input, I/O), 2 bad command line; interrupted: the signal's status.");
  cmd->add_option("in", a->in, "Input: a .safetensors file, or a folder (sharded checkpoints included)")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("out", a->out, "Output: a file for a file input (or a folder to put it in), a folder for a folder")
      ->required();
  cmd->add_option("--format,-f", a->format, "nf4 | fp4 | int8 | fp8-block | int4 | int4-g<N>")->required();
  cmd->add_flag("--double-quant", a->double_quant,
                "nf4/fp4: quantize the absmax statistics again (8-bit, blocks of 256)");
  cmd->add_option("--blocksize", a->blocksize,
                  "nf4/fp4: 32..4096, power of two (default 64); fp8-block: tile edge (default 128)")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  cmd->add_option("--group-size", a->group_size, "int4: input columns per scale (default 128; -1: one group per row)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 30));
  auto* sym = cmd->add_flag("--sym", a->sym, "int4: symmetric, zero point 8 (the default)");
  auto* asym = cmd->add_flag("--asym", a->asym, "int4: asymmetric, a zero point per group");
  sym->excludes(asym);
  cmd->add_option("--include", a->include, "Also quantize tensors matching this glob (* and ?); repeatable");
  cmd->add_option("--exclude", a->exclude,
                  "Keep tensors matching this glob as they are (wins over --include); repeatable");
  cmd->add_option("--device", a->device, "Where to quantize: auto (a GPU when present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_flag("--no-report", a->no_report, "Skip the per-tensor error table (and the dequantization it needs)");
  cmd->add_flag("--force", a->force, "Replace <out> if it exists");
  cmd->callback([a, cmd] { run_quantize(*a, cmd); });
}

}  // namespace lowbit::cli
