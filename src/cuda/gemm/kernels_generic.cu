// Instances of the generic decoder (every type and dequantization rule),
// one per bit width and kind of code.
#include "cuda/gemm/instance.cuh"

namespace lowbit::cuda::gemm {
namespace {

template <int kBits, GenericKind kKind>
struct Generic {
  template <class T>
  using Of = GenericDecoder<kBits, kKind, T>;
};

}  // namespace

KernelInfo generic_kernel(WeightType type, bool bf16, int mt) {
  using K = GenericKind;
  switch (type) {
    case WeightType::int1:
    case WeightType::uint1: return instance_at<Generic<1, K::integer>::template Of>(bf16, mt);
    case WeightType::int2:
    case WeightType::uint2: return instance_at<Generic<2, K::integer>::template Of>(bf16, mt);
    case WeightType::int4:
    case WeightType::uint4: return instance_at<Generic<4, K::integer>::template Of>(bf16, mt);
    case WeightType::nf4:
    case WeightType::fp4:
    case WeightType::fp4_e2m1: return instance_at<Generic<4, K::table>::template Of>(bf16, mt);
    case WeightType::int8:
    case WeightType::uint8: return instance_at<Generic<8, K::integer>::template Of>(bf16, mt);
    case WeightType::fp8_e4m3: return instance_at<Generic<8, K::fp8>::template Of>(bf16, mt);
    case WeightType::f16: return instance_at<Generic<16, K::f16>::template Of>(bf16, mt);
    case WeightType::bf16: return instance_at<Generic<16, K::bf16>::template Of>(bf16, mt);
  }
  return {};
}

}  // namespace lowbit::cuda::gemm
