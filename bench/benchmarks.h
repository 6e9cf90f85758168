// The benchmarks behind `lowbit bench` (docs/cli.md): each takes its options
// as the command line gave them, prints its table and a `summary:` block on
// stdout (scripts/gpu-check reads them), and throws lowbit::Error when a
// result fails its check or the device fails.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lowbit::bench {

// `lowbit bench quant`: each quantization op's bandwidth against the
// machine's copy bandwidth, measured in the same run (quant.cpp).
struct QuantOptions {
  std::string device;    // empty: cuda when a GPU is visible, else cpu
  int64_t elements = 0;  // 0: 2^28 on the GPU, 2^26 on the CPU
  int reps = 0;          // 0: 20 on the GPU, 5 on the CPU
};
void run_quant(const QuantOptions& o);

// `lowbit bench gemm`: the mixed-precision matmul against cuBLAS fp16 and the
// memory floor, measured in the same run (gemm/run.cpp).
struct GemmOptions {
  std::string device;               // empty: cuda when a GPU is visible, else cpu
  std::vector<std::string> shapes;  // "NxK"; empty: the defaults (gemm/args.h)
  std::vector<int64_t> m;
  std::vector<std::string> types;  // specs, see gemm/args.h
  int reps = 0;                    // 0: 20 on cuda, 3 on cpu
  int warmup = -1;                 // -1: 3 on cuda, 1 on cpu
  std::string config;              // MatmulArgs::config by name (empty: the backend's heuristic)
  bool no_check = false;
  std::string csv;
};
void run_gemm(GemmOptions o);

// Why `s` is not a weight shape "NxK" / a weight type spec; empty when it is
// (the command line's validators).
std::string shape_error(const std::string& s);
std::string type_spec_error(const std::string& s);

}  // namespace lowbit::bench
