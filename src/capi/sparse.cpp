// The C ABI of the BSR products (lowbit/c/lowbit.h, "block-sparse"):
// DLTensors in, the op's Args out, then the op's own check and run.
#include "lowbit/ops/sparse.h"

#include "capi/capi.h"

using namespace lowbit;  // NOLINT(google-build-using-namespace): this file only forwards
using capi::guarded;
using capi::run_op;
using capi::to_ref;

namespace {

BsrRef bsr_ref(const char* op, const DLTensor* crow_indices, const DLTensor* col_indices, const DLTensor* values,
               int64_t M, int64_t K) {
  return BsrRef{to_ref(op, "crow_indices", crow_indices), to_ref(op, "col_indices", col_indices),
                to_ref(op, "values", values), M, K};
}

}  // namespace

lowbit_status lowbit_bsr_dense_addmm(const DLTensor* input, const DLTensor* crow_indices, const DLTensor* col_indices,
                                     const DLTensor* values, int64_t M, int64_t K, const DLTensor* dense, double beta,
                                     double alpha, DLTensor* out, void* stream) {
  constexpr const char* op = BsrDenseAddmmArgs::kName;
  return guarded(op, [&] {
    const BsrDenseAddmmArgs x{to_ref(op, "input", input),
                              bsr_ref(op, crow_indices, col_indices, values, M, K),
                              to_ref(op, "dense", dense),
                              beta,
                              alpha,
                              to_ref(op, "out", out)};
    run_op(x, x.dense.device, stream);
  });
}

lowbit_status lowbit_sampled_addmm(const DLTensor* crow_indices, const DLTensor* col_indices, const DLTensor* values,
                                   int64_t M, int64_t N, const DLTensor* mat1, const DLTensor* mat2, double beta,
                                   double alpha, DLTensor* out_values, void* stream) {
  constexpr const char* op = SampledAddmmArgs::kName;
  return guarded(op, [&] {
    const SampledAddmmArgs x{bsr_ref(op, crow_indices, col_indices, values, M, N),
                             to_ref(op, "mat1", mat1),
                             to_ref(op, "mat2", mat2),
                             beta,
                             alpha,
                             to_ref(op, "out_values", out_values)};
    run_op(x, x.mat1.device, stream);
  });
}

lowbit_status lowbit_bsr_softmax(const DLTensor* crow_indices, const DLTensor* col_indices, const DLTensor* values,
                                 int64_t M, int64_t K, DLTensor* out_values, void* stream) {
  constexpr const char* op = BsrSoftmaxArgs::kName;
  return guarded(op, [&] {
    const BsrSoftmaxArgs x{bsr_ref(op, crow_indices, col_indices, values, M, K), to_ref(op, "out_values", out_values)};
    run_op(x, x.input.values.device, stream);
  });
}

lowbit_status lowbit_scatter_mm(int format, const DLTensor* blocks, const DLTensor* others, const DLTensor* c_indices,
                                const DLTensor* pq, const DLTensor* r_offsets, const DLTensor* p_offsets,
                                const DLTensor* q_offsets, int64_t split_n, DLTensor* accumulators, void* stream) {
  constexpr const char* op = ScatterMmArgs::kName;
  return guarded(op, [&] {
    const ScatterMmArgs x{static_cast<ScatterMmFormat>(format),
                          to_ref(op, "blocks", blocks),
                          to_ref(op, "others", others),
                          to_ref(op, "c_indices", c_indices),
                          to_ref(op, "pq", pq),
                          to_ref(op, "r_offsets", r_offsets),
                          to_ref(op, "p_offsets", p_offsets),
                          to_ref(op, "q_offsets", q_offsets),
                          split_n,
                          to_ref(op, "accumulators", accumulators)};
    run_op(x, x.blocks.device, stream);
  });
}
