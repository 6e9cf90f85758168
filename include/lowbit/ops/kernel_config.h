// A kernel config by value: the kernel family a backend runs and its shape.
// MatmulArgs::config and Matmul4bitArgs::config take one to force it (tuning,
// tests); the default (no family) leaves the choice to the backend's
// heuristic. Its name prints and parses, so a tuned-parameter database can
// store it:
//
//   family[_m<block_m>][_n<block_n>][_k<block_k>][_s<stages>]
//
// e.g. "wgmma_m128_n128_k128", "stream_m16_n512", "mma_m64_n128_s4",
// "cpu_m8_n16_k512", "dequant_gemm". Which configs can run a given call is
// the backend's to say: kernel_configs(args) (lowbit/ops/gemm.h) lists them
// best first.
#pragma once

#include <string>
#include <string_view>

namespace lowbit {

struct KernelConfig {
  std::string family;  // empty: the backend's heuristic picks
  int block_m = 0;     // rows of M a block computes (0: not part of this family's name)
  int block_n = 0;     // rows of N (columns of out) a block computes
  int block_k = 0;     // columns of K a pipeline stage holds
  int stages = 0;      // pipeline stages

  bool empty() const { return family.empty(); }
  // The printed form above ("" when empty).
  std::string name() const;
  bool operator==(const KernelConfig&) const = default;
};

// Reads a name as KernelConfig::name prints it; "" gives the empty config.
// Throws lowbit::Error (invalid_argument) naming the fault otherwise.
KernelConfig parse_kernel_config(std::string_view name);

}  // namespace lowbit
