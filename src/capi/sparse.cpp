// The C ABI of the BSR products (lowbit/c/lowbit.h, "block-sparse"):
// DLTensors in, BsrDenseAddmmArgs out, then the op's own check and run.
#include "lowbit/ops/sparse.h"

#include "capi/capi.h"

using namespace lowbit;  // NOLINT(google-build-using-namespace): this file only forwards
using capi::guarded;
using capi::run_op;
using capi::to_ref;

lowbit_status lowbit_bsr_dense_addmm(const DLTensor* input, const DLTensor* crow_indices, const DLTensor* col_indices,
                                     const DLTensor* values, int64_t M, int64_t K, const DLTensor* dense, double beta,
                                     double alpha, DLTensor* out, void* stream) {
  constexpr const char* op = BsrDenseAddmmArgs::kName;
  return guarded(op, [&] {
    const BsrDenseAddmmArgs x{to_ref(op, "input", input),
                              BsrRef{to_ref(op, "crow_indices", crow_indices), to_ref(op, "col_indices", col_indices),
                                     to_ref(op, "values", values), M, K},
                              to_ref(op, "dense", dense),
                              beta,
                              alpha,
                              to_ref(op, "out", out)};
    run_op(x, x.dense.device, stream);
  });
}
