// The tuned-parameter database's keys of the ops that take a KernelConfig
// (docs/tune.md): `version` the call's dtypes and format words, `key` its
// shape. `lowbit tune` writes entries under these keys and every call looks
// its own up, so the two always agree.
#pragma once

#include <string>
#include <vector>

#include "lowbit/ops/fp8_gemm.h"
#include "lowbit/ops/gemm.h"

namespace lowbit::ops {

struct TuneKey {
  std::string version;
  std::vector<std::string> key;
};

// fp8_gemm: out's dtype; M N K.
TuneKey tune_key(const Fp8GemmArgs& a);
// matmul_4bit: A's dtype, the 4-bit type, the blocksize, "nested" when the absmax is; M N K.
TuneKey tune_key(const Matmul4bitArgs& a);
// matmul (Matmul): A's dtype, the weight's type, its groups ("g128", "row", "noscale"), its zeros mode when it
// has zeros; rows of A, N, K.
TuneKey tune_key(const MatmulArgs& a);

}  // namespace lowbit::ops
