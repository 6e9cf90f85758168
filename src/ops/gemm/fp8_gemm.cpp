// Front ends of the block-scaled FP8 GEMMs (lowbit/ops/fp8_gemm.h): the
// argument checks every backend relies on, and the allocating calls.
#include "lowbit/ops/fp8_gemm.h"

#include <string>
#include <vector>

#include "core/check.h"
#include "ops/common.h"
#include "ops/dispatch.h"

namespace lowbit {
namespace {

int64_t blocks(int64_t n) { return ops::ceil_div(n, kFp8ScaleBlock); }

// a: e4m3, contiguous, `dims` dimensions (0: at least one), K a positive
// multiple of 16. Returns K.
int64_t check_a(const char* op, const TensorRef& a, int dims) {
  core::require_present(op, "a", a);
  core::require_dtype(op, "a", a, {DType::f8_e4m3});
  core::require_contiguous(op, "a", a);
  if (dims > 0) {
    LOWBIT_REQUIRE(a.ndim == dims, ErrorCode::invalid_argument, op, ": a must be ", dims, "-D (got ", a.ndim, "-D ",
                   core::shape_str(a), ")");
  } else {
    LOWBIT_REQUIRE(a.ndim >= 1, ErrorCode::invalid_argument, op, ": a must have at least 1 dimension (got a scalar)");
  }
  const int64_t K = a.size(-1);
  LOWBIT_REQUIRE(K > 0 && K % 16 == 0, ErrorCode::invalid_argument, op,
                 ": K (a's last dimension) must be a positive multiple of 16 (got ", K, ")");
  return K;
}

// b: e4m3 [N, K] (experts == 0) or [experts, N, K], contiguous. Returns N.
int64_t check_b(const char* op, const TensorRef& b, int64_t K, int64_t experts) {
  core::require_present(op, "b", b);
  core::require_dtype(op, "b", b, {DType::f8_e4m3});
  core::require_contiguous(op, "b", b);
  const int dims = experts > 0 ? 3 : 2;
  LOWBIT_REQUIRE(b.ndim == dims, ErrorCode::invalid_argument, op, ": b must be ", dims == 2 ? "2-D [N, K]" : "3-D [E, N, K]",
                 " (got ", b.ndim, "-D ", core::shape_str(b), ")");
  LOWBIT_REQUIRE(b.size(-1) == K, ErrorCode::invalid_argument, op, ": b's last dimension (", b.size(-1),
                 ") must equal a's K (", K, ")");
  if (experts > 0) {
    LOWBIT_REQUIRE(b.shape[0] == experts, ErrorCode::invalid_argument, op, ": b must hold one matrix per expert: ",
                   experts, " (got ", b.shape[0], ")");
  }
  return b.size(-2);
}

}  // namespace

void check(const Fp8GemmArgs& a) {
  const char* op = Fp8GemmArgs::kName;
  const int64_t K = check_a(op, a.a, 0);
  const int64_t N = check_b(op, a.b, K, 0);
  ops::require_shaped(op, "a_s", a.a_s, {DType::f32}, ops::with_last(a.a, blocks(K)));
  ops::require_shaped(op, "b_s", a.b_s, {DType::f32}, {blocks(N), blocks(K)});
  if (a.bias.present()) ops::require_shaped(op, "bias", a.bias, {DType::f32}, {N});
  ops::require_shaped(op, "out", a.out, core::kFloatDTypes, ops::with_last(a.a, N));
  core::require_same_device(op, {{"a", &a.a},
                                 {"a_s", &a.a_s},
                                 {"b", &a.b},
                                 {"b_s", &a.b_s},
                                 {"bias", &a.bias},
                                 {"out", &a.out}});
}
size_t workspace_size(const Fp8GemmArgs& a) { return ops::backend_workspace(a, a.a.device); }
void run(const Fp8GemmArgs& a, void* ws, Stream s) { ops::dispatch(a, a.a.device, ws, s); }
std::vector<KernelConfig> kernel_configs(const Fp8GemmArgs& a) { return ops::backend_configs(a, a.a.device); }

void check(const Fp8GroupedGemmContiguousArgs& a) {
  const char* op = Fp8GroupedGemmContiguousArgs::kName;
  const int64_t K = check_a(op, a.a, 2);
  const int64_t M = a.a.shape[0];
  core::require_present(op, "b", a.b);
  LOWBIT_REQUIRE(a.b.ndim == 3 && a.b.shape[0] >= 1, ErrorCode::invalid_argument, op,
                 ": b must be 3-D [E, N, K] with E >= 1 (got ", core::shape_str(a.b), ")");
  const int64_t E = a.b.shape[0];
  const int64_t N = check_b(op, a.b, K, E);
  ops::require_shaped(op, "a_s", a.a_s, {DType::f32}, {M, blocks(K)});
  ops::require_shaped(op, "b_s", a.b_s, {DType::f32}, {E, blocks(N), blocks(K)});
  ops::require_shaped(op, "m_indices", a.m_indices, {DType::i32}, {M});
  ops::require_shaped(op, "out", a.out, core::kFloatDTypes, {M, N});
  core::require_same_device(op, {{"a", &a.a},
                                 {"a_s", &a.a_s},
                                 {"b", &a.b},
                                 {"b_s", &a.b_s},
                                 {"m_indices", &a.m_indices},
                                 {"out", &a.out}});
}
size_t workspace_size(const Fp8GroupedGemmContiguousArgs& a) { return ops::backend_workspace(a, a.a.device); }
void run(const Fp8GroupedGemmContiguousArgs& a, void* ws, Stream s) { ops::dispatch(a, a.a.device, ws, s); }
std::vector<KernelConfig> kernel_configs(const Fp8GroupedGemmContiguousArgs& a) { return ops::backend_configs(a, a.a.device); }

void check(const Fp8GroupedGemmMaskedArgs& a) {
  const char* op = Fp8GroupedGemmMaskedArgs::kName;
  const int64_t K = check_a(op, a.a, 3);
  const int64_t E = a.a.shape[0], max_m = a.a.shape[1];
  LOWBIT_REQUIRE(E >= 1, ErrorCode::invalid_argument, op, ": a must hold at least one expert (got ",
                 core::shape_str(a.a), ")");
  const int64_t N = check_b(op, a.b, K, E);
  ops::require_shaped(op, "a_s", a.a_s, {DType::f32}, {E, max_m, blocks(K)});
  ops::require_shaped(op, "b_s", a.b_s, {DType::f32}, {E, blocks(N), blocks(K)});
  ops::require_shaped(op, "masked_m", a.masked_m, {DType::i32}, {E});
  ops::require_shaped(op, "out", a.out, core::kFloatDTypes, {E, max_m, N});
  core::require_same_device(op, {{"a", &a.a},
                                 {"a_s", &a.a_s},
                                 {"b", &a.b},
                                 {"b_s", &a.b_s},
                                 {"masked_m", &a.masked_m},
                                 {"out", &a.out}});
}
size_t workspace_size(const Fp8GroupedGemmMaskedArgs& a) { return ops::backend_workspace(a, a.a.device); }
void run(const Fp8GroupedGemmMaskedArgs& a, void* ws, Stream s) { ops::dispatch(a, a.a.device, ws, s); }
std::vector<KernelConfig> kernel_configs(const Fp8GroupedGemmMaskedArgs& a) { return ops::backend_configs(a, a.a.device); }

Tensor fp8_gemm(const TensorRef& a, const TensorRef& a_s, const TensorRef& b, const TensorRef& b_s, DType out_dtype,
                const TensorRef& bias, Stream stream, const KernelConfig& config) {
  const char* op = Fp8GemmArgs::kName;
  check_a(op, a, 0);
  core::require_present(op, "b", b);
  LOWBIT_REQUIRE(b.ndim == 2, ErrorCode::invalid_argument, op, ": b must be 2-D [N, K] (got ", b.ndim, "-D ",
                 core::shape_str(b), ")");
  Tensor out = Tensor::empty(Shape(ops::with_last(a, b.shape[0])), out_dtype, a.device, stream);
  ops::run_with_workspace(Fp8GemmArgs{a, a_s, b, b_s, bias, out, config}, a.device, stream);
  return out;
}

Tensor fp8_grouped_gemm_contiguous(const TensorRef& a, const TensorRef& a_s, const TensorRef& b, const TensorRef& b_s,
                                   const TensorRef& m_indices, DType out_dtype, Stream stream,
                                   const KernelConfig& config) {
  const char* op = Fp8GroupedGemmContiguousArgs::kName;
  check_a(op, a, 2);
  core::require_present(op, "b", b);
  LOWBIT_REQUIRE(b.ndim == 3, ErrorCode::invalid_argument, op, ": b must be 3-D [E, N, K] (got ", b.ndim, "-D ",
                 core::shape_str(b), ")");
  Tensor out = Tensor::empty({a.shape[0], b.shape[1]}, out_dtype, a.device, stream);
  ops::run_with_workspace(Fp8GroupedGemmContiguousArgs{a, a_s, b, b_s, m_indices, out, config}, a.device, stream);
  return out;
}

Tensor fp8_grouped_gemm_masked(const TensorRef& a, const TensorRef& a_s, const TensorRef& b, const TensorRef& b_s,
                               const TensorRef& masked_m, DType out_dtype, Stream stream,
                               const KernelConfig& config) {
  const char* op = Fp8GroupedGemmMaskedArgs::kName;
  check_a(op, a, 3);
  core::require_present(op, "b", b);
  LOWBIT_REQUIRE(b.ndim == 3, ErrorCode::invalid_argument, op, ": b must be 3-D [E, N, K] (got ", b.ndim, "-D ",
                 core::shape_str(b), ")");
  Tensor out = Tensor::empty({a.shape[0], a.shape[1], b.shape[1]}, out_dtype, a.device, stream);
  ops::run_with_workspace(Fp8GroupedGemmMaskedArgs{a, a_s, b, b_s, masked_m, out, config}, a.device, stream);
  return out;
}

}  // namespace lowbit
