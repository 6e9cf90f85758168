// `lowbit dequantize <in> <out>`: a quantized checkpoint (any layout lowbit
// reads) back to float weights under their original names.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "io_cli.h"
#include "lowbit/io.h"

namespace lowbit::cli {
namespace {

struct DequantizeArgs {
  std::string in, out, dtype = "auto", device = "auto";
  bool force = false;
};

void run_dequantize(const DequantizeArgs& a) {
  io::DequantizeOptions o;
  if (a.dtype != "auto") {
    DType d{};
    parse_dtype(a.dtype, &d);  // the option's check admits only float names
    o.dtype = d;
  }
  o.device = pick_io_device(a.device, "dequantize");
  o.overwrite = a.force;
  InterruptGuard guard;
  ProgressBar bar("dequantize");
  o.cancelled = [&guard] { return guard.requested(); };
  o.on_progress = [&bar](const io::Progress& p) { bar.update(p); };
  io::DequantizeReport r;
  try {
    r = io::dequantize_checkpoint(a.in, a.out, o);
  } catch (const Error&) {
    bar.finish();
    if (guard.requested()) guard.reraise();
    throw;
  }
  bar.finish();
  std::printf("dequantized %zu weights (%zu tensors written): %s -> %s in %.1f s\noutput: %s\n", r.weights, r.tensors,
              human_bytes(static_cast<double>(r.bytes_in)).c_str(),
              human_bytes(static_cast<double>(r.bytes_out)).c_str(), r.seconds, r.output.string().c_str());
}

}  // namespace

void add_dequantize_command(CLI::App& app) {
  auto a = std::make_shared<DequantizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "dequantize", "Turn a quantized checkpoint (nf4, fp4, int8, fp8-block, GPTQ) back into float weights");
  cmd->footer("Exit codes: 0 done, 1 lowbit error (bad input, I/O), 2 bad command line. See docs/cli.md.");
  cmd->add_option("in", a->in, "Input: a quantized .safetensors file or folder")->required()->check(CLI::ExistingPath);
  cmd->add_option("out", a->out, "Output: a file for a file input (or a folder to put it in), a folder for a folder")
      ->required();
  cmd->add_option("--dtype", a->dtype,
                  "Float type of the weights: auto (as recorded: the 4-bit state's dtype, else config.json's "
                  "torch_dtype, else bfloat16 for fp8 and float16 otherwise), float32, float16 or bfloat16")
      ->check(CLI::IsMember({"auto", "float32", "float16", "bfloat16"}))
      ->capture_default_str();
  cmd->add_option("--device", a->device, "Where to dequantize: auto (a GPU when present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_flag("--force", a->force, "Replace <out> if it exists");
  cmd->callback([a] { run_dequantize(*a); });
}

}  // namespace lowbit::cli
