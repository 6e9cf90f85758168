// The CUDA matmul's kernel families, each behind one host adapter: its shapes
// (shapes.h) as configs by value, whether a shape can run a call and why not,
// and the plan that runs it. The selection (select.cu) only enumerates, filters
// and ranks; matmul.cu launches a plan.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/gemm/kernels.h"
#include "cuda/gemm/params.h"
#include "lowbit/ops/gemm.h"

namespace lowbit::cuda::gemm {

// One call as the families read it: Params filled from its tensors (no plan
// choices yet), the M the choice is made for, and the format's facts.
struct Problem {
  const MatmulArgs* args = nullptr;
  Params p;
  int64_t m = 0;  // the prepared M (the rows when none was prepared)
  bool bf16 = false;
  bool table = false;  // 4-bit table codes (nf4, fp4, fp4_e2m1)
};

// A launch: the instance, its grid and Params, and the workspace it needs:
// split-K partial sums, then (kernels that need A fit to read as it is, when
// the caller's is not) A gathered into rows of a_lda elements.
struct Plan {
  KernelInfo k;
  Params p;
  dim3 grid;
  size_t partial_bytes = 0;
  int64_t a_lda = 0;     // 0: A is read where it is
  bool one_wave = true;  // its blocks fit in one wave (the streaming kernels' K splits may not)
  size_t bytes() const { return partial_bytes + (a_lda ? static_cast<size_t>(p.M * a_lda) * 2 : 0); }
};

struct Family {
  const char* name;  // KernelConfig::family
  WeightLayout layout;
  int shapes;  // entries of its list in shapes.h
  // Whether this build compiles the shape (LOWBIT_ALL_CONFIGS).
  bool (*built)(int shape);
  KernelConfig (*config)(int shape);
  // Null when the shape can run the problem, else why not (one clause).
  const char* (*cannot_implement)(const Problem& pr, int shape);
  // The plan of a shape that can run the problem.
  Plan (*make_plan)(const Problem& pr, int shape);
};

extern const Family kRowsFamily;    // rows layout, mma.sync
extern const Family kMmaFamily;     // tiles layout, mma.sync
extern const Family kWgmmaFamily;   // tiles layout, wgmma (sm_90a)
extern const Family kStreamFamily;  // tiles layout, weight streamed once with A in shared memory

}  // namespace lowbit::cuda::gemm
