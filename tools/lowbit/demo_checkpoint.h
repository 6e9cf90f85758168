// The checkpoint half of `lowbit demo`: the demo's synthetic layer written
// as a Hugging Face-style folder in a temporary folder, run through the
// `lowbit quantize` path into every checkpoint format, and reported from the
// files written.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "lowbit/tensor.h"

namespace lowbit::cli {

struct DemoWeight {
  std::string name;    // "q_proj", ...
  const Tensor* host;  // bf16 [rows, cols] on the CPU
};

void run_checkpoint_demo(const std::vector<DemoWeight>& weights, Device device);

// The checkpoint key of a layer weight ("model.layers.0.self_attn.q_proj.weight").
std::string demo_weight_key(const std::string& name);

// The fp8-block checkpoint at `checkpoint` applied to activations through
// act_quant + fp8_gemm, against the bf16 layer (demo_fp8.cpp).
void run_fp8_forward(const std::filesystem::path& checkpoint, const std::vector<DemoWeight>& weights, Device device);

}  // namespace lowbit::cli
