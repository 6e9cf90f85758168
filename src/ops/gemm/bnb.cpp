// bitsandbytes 4-bit weights: import into the unpacked form, and
// matmul_4bit / gemv_4bit straight on a QuantState.
#include "core/check.h"
#include "core/quant_math.h"
#include "ops/common.h"
#include "ops/dispatch.h"
#include "ops/gemm/common.h"
#include "ops/gemm/import_common.h"

namespace lowbit {
namespace {

Quant4Type quant4_type(const char* op, const QuantState& s) {
  if (s.quant_type == "nf4") return Quant4Type::nf4;
  if (s.quant_type == "fp4") return Quant4Type::fp4;
  core::fail(ErrorCode::invalid_argument,
             core::cat(op, ": quant state quant_type must be nf4 or fp4 (got '", s.quant_type, "')"));
}

// [N, K] of a Linear4bit weight's state.
std::pair<int64_t, int64_t> weight_shape(const char* op, const QuantState& s) {
  LOWBIT_REQUIRE(s.shape.size() == 2 && s.shape[0] >= 1 && s.shape[1] >= 1, ErrorCode::invalid_argument, op,
                 ": quant state shape must be a weight's [N, K] (got ", s.shape.size(), " dims)");
  core::checked_numel(op, "quant state", Shape(s.shape), s.dtype);
  return {s.shape[0], s.shape[1]};
}

// absmax of every block in fp32, double quantization undone as
// bitsandbytes does (code2[q] * absmax2 + offset, each step rounded).
std::vector<float> restored_absmax(const char* op, const QuantState& s, int64_t nblocks) {
  LOWBIT_REQUIRE(s.absmax.defined(), ErrorCode::invalid_argument, op, ": quant state must hold absmax (got none)");
  ops::check_absmax_arg(op, s.absmax, ops::nested_of(s), nblocks);
  if (!s.nested()) return ops::gemm::host_floats(s.absmax);
  const std::vector<int64_t> q = ops::gemm::host_ints(s.absmax);
  const std::vector<float> code2 = ops::gemm::host_floats(s.state2->code);
  const std::vector<float> absmax2 = ops::gemm::host_floats(s.state2->absmax);
  const float offset = ops::gemm::host_floats(s.offset)[0];
  std::vector<float> out(static_cast<size_t>(nblocks));
  for (int64_t b = 0; b < nblocks; ++b) {
    out[static_cast<size_t>(b)] =
        core::nested_absmax_decode(code2[static_cast<size_t>(q[static_cast<size_t>(b)])],
                                   absmax2[static_cast<size_t>(b / s.state2->blocksize)], offset);
  }
  return out;
}

}  // namespace

QuantizedWeight import_bnb_4bit(const TensorRef& packed, const QuantState& state, const TensorRef& bias) {
  const char* op = "import_bnb_4bit";
  const Quant4Type type = quant4_type(op, state);
  const auto [N, K] = weight_shape(op, state);
  const int64_t bs = state.blocksize;
  core::require_blocksize(op, "quant state blocksize", bs);
  LOWBIT_REQUIRE(K % bs == 0, ErrorCode::invalid_argument, op, ": the blocksize ", bs, " must divide K (got K = ", K,
                 "): blocks crossing rows have no per-row scale; run matmul_4bit "
                 "on the state instead");
  core::require_present(op, "packed", packed);
  core::require_dtype(op, "packed", packed, {DType::u8});
  core::require_contiguous(op, "packed", packed);
  core::require_numel(op, "packed", packed, (N * K + 1) / 2);
  const int64_t G = K / bs;
  const std::vector<float> absmax = restored_absmax(op, state, N * G);

  QuantizedWeight w;
  w.config =
      ops::gemm::imported_config(type == Quant4Type::nf4 ? WeightType::nf4 : WeightType::fp4, N, K, bs, state.dtype);
  // Codes: element e of the flattened weight in the high nibble of byte e / 2 when e is even.
  const Tensor p = ops::gemm::host_copy(packed);
  w.weight = Tensor::empty({N, K}, DType::u8);
  for (int64_t e = 0; e < N * K; ++e) {
    const uint8_t byte = p.ptr<const uint8_t>()[e / 2];
    w.weight.ptr<uint8_t>()[e] = static_cast<uint8_t>(e % 2 == 0 ? byte >> 4 : byte & 0xf);
  }
  w.scale = Tensor::empty({N, G}, DType::f32);
  for (int64_t i = 0; i < N * G; ++i) w.scale.ptr<float>()[i] = absmax[static_cast<size_t>(i)];
  if (bias.present()) {
    core::require_dtype(op, "bias", bias, core::kFloatDTypes);
    core::require_shape(op, "bias", bias, {N});
    w.bias = ops::gemm::host_copy(bias);
    w.config.with_bias = true;
  }
  return w;
}

Tensor matmul_4bit(const TensorRef& A, const TensorRef& packed, const QuantState& state, const TensorRef& bias,
                   Stream stream) {
  const char* op = Matmul4bitArgs::kName;
  core::require_present(op, "A", A);
  const Quant4Type type = quant4_type(op, state);
  const auto [N, K] = weight_shape(op, state);
  LOWBIT_REQUIRE(A.ndim >= 1 && A.size(-1) == K, ErrorCode::invalid_argument, op,
                 ": A's last dimension must equal the weight's K = ", K, " (got A ", core::shape_str(A), ")");
  LOWBIT_REQUIRE(state.absmax.defined(), ErrorCode::invalid_argument, op, ": quant state must hold absmax (got none)");
  std::vector<int64_t> shape(A.sizes().begin(), A.sizes().end());
  shape.back() = N;
  Tensor out = Tensor::empty(Shape(shape), A.dtype, A.device, stream);
  Matmul4bitArgs args;
  args.A = A;
  args.packed = packed;
  args.absmax = state.absmax;
  args.nested = ops::nested_of(state);
  args.bias = bias;
  args.out = out;
  args.N = N;
  args.blocksize = state.blocksize;
  args.type = type;
  ops::run_with_workspace(args, A.device, stream);
  return out;
}

Tensor gemv_4bit(const TensorRef& A, const TensorRef& packed, const QuantState& state, const TensorRef& bias,
                 Stream stream) {
  core::require_present("gemv_4bit", "A", A);
  LOWBIT_REQUIRE(A.ndim >= 1 && A.size(-1) > 0 && A.numel() == A.size(-1), ErrorCode::invalid_argument,
                 "gemv_4bit: A must hold one row (got ", core::shape_str(A), "; matmul_4bit takes any rows)");
  return matmul_4bit(A, packed, state, bias, stream);
}

}  // namespace lowbit
