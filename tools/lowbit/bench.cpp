// `lowbit bench quant|gemm`: the command lines of the benchmarks in bench/,
// which measure and report (docs/cli.md).
#include <memory>
#include <string>

#include "benchmarks.h"
#include "commands.h"
#include "lowbit/error.h"
#include "lowbit/ops/kernel_config.h"

namespace lowbit::cli {
namespace {

void add_quant(CLI::App& parent) {
  auto opts = std::make_shared<bench::QuantOptions>();
  CLI::App* quant = parent.add_subcommand("quant", "Quantization ops: GB/s and fraction of copy bandwidth");
  quant->add_option("--device", opts->device, "cpu or cuda (default: cuda when a GPU is visible)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  quant->add_option("--elements", opts->elements, "elements per op (default 2^28 on cuda, 2^26 on cpu)");
  quant->add_option("--reps", opts->reps, "timed repetitions per case (default 20 on cuda, 5 on cpu)");
  quant->callback([opts] { bench::run_quant(*opts); });
}

void add_gemm(CLI::App& parent) {
  auto opts = std::make_shared<bench::GemmOptions>();
  CLI::App* gemm = parent.add_subcommand(
      "gemm", "Mixed-precision matmul (Matmul) vs cuBLAS fp16 and the memory floor, over Llama shapes");
  gemm->add_option("--device", opts->device, "cpu or cuda (default: cuda when a GPU is visible)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  gemm->add_option("--shapes", opts->shapes,
                   "weight shapes NxK, comma-separated (default: the Llama list 4096x4096,14336x4096,4096x14336,"
                   "8192x8192,28672x8192,8192x28672 on cuda; 4096x4096 on cpu)")
      ->delimiter(',')
      ->check(CLI::Validator([](std::string& s) { return bench::shape_error(s); }, "NxK"));
  gemm->add_option("--m", opts->m,
                   "batch sizes M, comma-separated (default 1,16,32,64,128,256,4096 on cuda; 1,16 on cpu)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  gemm->add_option("--types", opts->types,
                   "weight types TYPE[:gN|:row|:noscale][:zeros[=MODE]], comma-separated (default "
                   "uint4:g128:zeros,int4:g128,nf4:g128,int2:g128)")
      ->delimiter(',')
      ->check(CLI::Validator([](std::string& s) { return bench::type_spec_error(s); }, "TYPE[:gN][:zeros]"));
  gemm->add_option("--reps", opts->reps, "timed repetitions per case, median reported (default 20 on cuda, 3 on cpu)")
      ->check(CLI::Range(1, 1000000));
  gemm->add_option("--warmup", opts->warmup, "untimed runs before timing (default 3 on cuda, 1 on cpu)")
      ->check(CLI::Range(0, 1000000));
  gemm->add_option("--config", opts->config,
                   "force a kernel config by name, e.g. wgmma_m128_n128_k128 (default: the backend's heuristic)")
      ->check(CLI::Validator(
          [](std::string& s) {
            try {
              lowbit::parse_kernel_config(s);
              return std::string();
            } catch (const lowbit::Error& e) {
              return std::string(e.what());
            }
          },
          "NAME"));
  gemm->add_flag("--no-check", opts->no_check, "skip the check of each result against the CPU backend");
  gemm->add_option("--csv", opts->csv, "also write every case to this CSV file");
  gemm->callback([opts] { bench::run_gemm(*opts); });
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* cmd =
      app.add_subcommand("bench", "Measure ops against the machine's limits: copy bandwidth, cuBLAS in the same run");
  cmd->require_subcommand(1);
  add_quant(*cmd);
  add_gemm(*cmd);
}

}  // namespace lowbit::cli
