// Kernel selection for the CUDA matmul: enumerate the families' shapes for the
// weight's layout, filter out what cannot run (each filter with its reason),
// rank what is left by the prepared M.
#pragma once

#include <vector>

#include "cuda/gemm/families.h"

namespace lowbit::cuda::gemm {

// The configs that can run the problem, the heuristic's pick first, then the
// others in the families' order (kernel_configs).
std::vector<KernelConfig> ranked_configs(const Problem& pr);

// The plan of the config the call forces (args->config), else of the
// heuristic's pick. A forced config that is not a candidate, or cannot run
// the problem, is an error naming why.
Plan select_plan(const Problem& pr);

}  // namespace lowbit::cuda::gemm
