// Instances of the 4-bit table decoder (nf4, fp4, fp4_e2m1).
#include "cuda/gemm/instance.cuh"

namespace lowbit::cuda::gemm {
namespace {

template <int kLB>
struct Table {
  template <class T>
  using Of = TableDecoder<kLB, T>;
};

}  // namespace

KernelInfo table_kernel(int lb, bool bf16, int mt) {
  if (lb == 16) return instance_at<Table<16>::template Of>(bf16, mt);
  if (lb == 8) return instance_at<Table<8>::template Of>(bf16, mt);
  return {};
}

}  // namespace lowbit::cuda::gemm
