// The checkpoint half of `lowbit demo`: the demo's synthetic layer written
// as a Hugging Face-style folder in a temporary folder, run through the
// `lowbit quantize` path into every checkpoint format, and reported from the
// files written.
#pragma once

#include <string>
#include <vector>

#include "lowbit/tensor.h"

namespace lowbit::cli {

struct DemoWeight {
  std::string name;    // "q_proj", ...
  const Tensor* host;  // bf16 [rows, cols] on the CPU
};

void run_checkpoint_demo(const std::vector<DemoWeight>& weights, Device device);

}  // namespace lowbit::cli
