// check / workspace_size / run of the matmul primitives (MatmulArgs,
// Matmul4bitArgs).
#include <cstdint>
#include <utility>

#include "core/check.h"
#include "core/weight_format.h"
#include "ops/common.h"
#include "ops/dispatch.h"
#include "ops/gemm/common.h"

namespace lowbit {
namespace ops::gemm {
namespace {

// A present, contiguous tensor of one dtype and shape, or an absent one, as
// `wanted` says; `why` names the flag that decides.
void require_optional(const char* op, const char* name, const TensorRef& t, bool wanted, const char* why,
                      std::initializer_list<DType> dtypes, std::initializer_list<int64_t> shape) {
  if (!wanted) {
    LOWBIT_REQUIRE(!t.present(), ErrorCode::invalid_argument, op, ": ", name, " must be absent when ", why,
                   " is false (got ", t.str(), ")");
    return;
  }
  core::require_present(op, name, t);
  core::require_dtype(op, name, t, dtypes);
  core::require_shape(op, name, t, shape);
  core::require_contiguous(op, name, t);
}

void check_rows_layout(const char* op, const PackedWeightRef& w) {
  const WeightFormat& f = w.format;
  const int bits = core::weight_bits(f.type);
  const int64_t G = f.groups();
  core::require_present(op, "weight.qweight", w.qweight);
  core::require_dtype(op, "weight.qweight", w.qweight, {DType::u8});
  core::require_shape(op, "weight.qweight", w.qweight, {f.N, core::rows_row_bytes(f.K, bits)});
  core::require_contiguous(op, "weight.qweight", w.qweight);
  const auto address = reinterpret_cast<uintptr_t>(w.qweight.data);
  LOWBIT_REQUIRE(address % core::kRowsAlignBytes == 0, ErrorCode::invalid_argument, op, ": weight.qweight must be ",
                 core::kRowsAlignBytes, "-byte aligned (rows are read as 16-byte words; got an address ",
                 address % core::kRowsAlignBytes, " bytes past alignment)");
  require_optional(op, "weight.scale", w.scale, f.with_scaling, "with_scaling", {DType::f32}, {f.N, G});
  if (f.with_zeros && f.zeros_mode == ZerosMode::quantized) {
    require_optional(op, "weight.zeros", w.zeros, true, "with_zeros", {DType::i32},
                     {G, core::packed_zeros_words(f.N, bits)});
  } else {
    require_optional(op, "weight.zeros", w.zeros, f.with_zeros, "with_zeros", {DType::f32}, {f.N, G});
  }
}

void check_tiles_layout(const char* op, const PackedWeightRef& w) {
  const WeightFormat& f = w.format;
  require_tiles_format(op, f);
  const int bits = core::weight_bits(f.type);
  const int64_t G = f.groups(), np = core::tiles_padded_rows(f.N);
  core::require_present(op, "weight.qweight", w.qweight);
  core::require_dtype(op, "weight.qweight", w.qweight, {DType::u8});
  core::require_shape(op, "weight.qweight", w.qweight,
                      {core::tiles_row_tiles(f.N), core::tiles_k_tiles(f.K, bits) * core::kTileBytes});
  core::require_contiguous(op, "weight.qweight", w.qweight);
  // Tiles are read as 16-byte words, a tile's scales and zero codes as 16-byte copies.
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef*>{"weight.qweight", &w.qweight},
                                {"weight.scale", &w.scale},
                                {"weight.zeros", &w.zeros}}) {
    const auto address = reinterpret_cast<uintptr_t>(t->data);
    LOWBIT_REQUIRE(!t->present() || address % 16 == 0, ErrorCode::invalid_argument, op, ": ", name,
                   " must be 16-byte aligned in the tiles layout (got an address ", address % 16,
                   " bytes past alignment)");
  }
  require_optional(op, "weight.scale", w.scale, f.with_scaling, "with_scaling", core::kFloatDTypes, {G, np});
  require_optional(op, "weight.zeros", w.zeros, f.with_zeros, "with_zeros", {DType::u8}, {G, np});
}

// A [..., K] and out [..., N] with the same leading dims.
void check_rows_io(const char* op, const TensorRef& A, const TensorRef& out, int64_t K, int64_t N) {
  LOWBIT_REQUIRE(A.ndim >= 1, ErrorCode::invalid_argument, op, ": A must have at least one dimension (got ",
                 core::shape_str(A), ")");
  core::require_contiguous(op, "A", A);
  LOWBIT_REQUIRE(A.size(-1) == K, ErrorCode::invalid_argument, op, ": A's last dimension must equal K = ", K,
                 " (got A ", core::shape_str(A), ")");
  core::require_present(op, "out", out);
  core::require_dtype(op, "out", out, core::kFloatDTypes);
  core::require_contiguous(op, "out", out);
  bool same = out.ndim == A.ndim && out.size(-1) == N;
  for (int i = 0; same && i + 1 < A.ndim; ++i)
    same = out.shape[static_cast<size_t>(i)] == A.shape[static_cast<size_t>(i)];
  if (same) return;
  std::string want = "[";
  for (int i = 0; i + 1 < A.ndim; ++i) want += std::to_string(A.shape[static_cast<size_t>(i)]) + ", ";
  core::fail(ErrorCode::invalid_argument, core::cat(op, ": out must have shape ", want, N,
                                                    "] (A's leading dims, then N; got ", core::shape_str(out), ")"));
}

}  // namespace

void check_packed(const char* op, const PackedWeightRef& w) {
  const WeightFormat& f = w.format;
  check_format(op, f.type, f.N, f.K, f.group_size, f.with_scaling, f.with_zeros, f.zeros_mode);
  switch (f.layout) {
    case WeightLayout::rows: check_rows_layout(op, w); break;
    case WeightLayout::tiles: check_tiles_layout(op, w); break;
    default:
      core::fail(ErrorCode::invalid_argument,
                 core::cat(op, ": weight.layout must be a WeightLayout (got value ", static_cast<int>(f.layout), ")"));
  }
  // Both layouts: bias f32 [N]; perm i32 [K].
  require_optional(op, "weight.bias", w.bias, f.with_bias, "with_bias", {DType::f32}, {f.N});
  if (w.perm.present()) {
    core::require_dtype(op, "weight.perm", w.perm, {DType::i32});
    core::require_shape(op, "weight.perm", w.perm, {f.K});
    core::require_contiguous(op, "weight.perm", w.perm);
  }
}

}  // namespace ops::gemm

void check(const MatmulArgs& a) {
  const char* op = MatmulArgs::kName;
  core::require_present(op, "A", a.A);
  LOWBIT_REQUIRE(a.A.dtype != DType::i8, ErrorCode::invalid_argument, op,
                 ": A int8 (W8A8) runs through Matmul::forward, which hands it to int8_linear_matmul; MatmulArgs "
                 "take float16 or bfloat16 A");
  core::require_dtype(op, "A", a.A, {DType::f16, DType::bf16});
  ops::gemm::check_packed(op, a.weight);
  ops::gemm::check_rows_io(op, a.A, a.out, a.weight.format.K, a.weight.format.N);
  ops::gemm::require_dtype_field(op, "accum_dtype", a.accum_dtype, {DType::f32, DType::f16});
  LOWBIT_REQUIRE(a.prepared_m >= 0, ErrorCode::invalid_argument, op, ": prepared_m must be >= 0 (got ", a.prepared_m,
                 ")");
  const PackedWeightRef& w = a.weight;
  core::require_same_device(op, {{"A", &a.A},
                                 {"out", &a.out},
                                 {"weight.qweight", &w.qweight},
                                 {"weight.scale", &w.scale},
                                 {"weight.zeros", &w.zeros},
                                 {"weight.bias", &w.bias},
                                 {"weight.perm", &w.perm}});
}
size_t workspace_size(const MatmulArgs& a) { return ops::backend_workspace(a, a.A.device); }
void run(const MatmulArgs& a, void* ws, Stream s) { ops::dispatch(a, a.A.device, ws, s); }
std::vector<KernelConfig> kernel_configs(const MatmulArgs& a) { return ops::backend_configs(a, a.A.device); }

void check(const Matmul4bitArgs& a) {
  const char* op = Matmul4bitArgs::kName;
  core::require_present(op, "A", a.A);
  core::require_dtype(op, "A", a.A, core::kFloatDTypes);
  LOWBIT_REQUIRE(a.N >= 1, ErrorCode::invalid_argument, op, ": N must be positive (got ", a.N, ")");
  LOWBIT_REQUIRE(a.A.ndim >= 1 && a.A.size(-1) >= 1, ErrorCode::invalid_argument, op,
                 ": A must have a positive last dimension K (got ", core::shape_str(a.A), ")");
  const int64_t K = a.A.size(-1);
  ops::gemm::check_rows_io(op, a.A, a.out, K, a.N);
  // N comes apart from any tensor: N * K (the sizes below) must not wrap.
  const int64_t weight_shape[] = {a.N, K};
  core::checked_numel(op, "weight [N, K]", Shape(weight_shape), DType::u4);
  core::require_blocksize(op, "blocksize", a.blocksize);
  LOWBIT_REQUIRE(a.type == Quant4Type::nf4 || a.type == Quant4Type::fp4, ErrorCode::invalid_argument, op,
                 ": type must be nf4 or fp4 (got value ", static_cast<int>(a.type), ")");
  core::require_present(op, "packed", a.packed);
  core::require_dtype(op, "packed", a.packed, {DType::u8});
  core::require_contiguous(op, "packed", a.packed);
  core::require_numel(op, "packed", a.packed, (a.N * K + 1) / 2);
  ops::check_absmax_arg(op, a.absmax, a.nested, ops::ceil_div(a.N * K, a.blocksize));
  if (a.bias.present()) {
    core::require_dtype(op, "bias", a.bias, core::kFloatDTypes);
    core::require_numel(op, "bias", a.bias, a.N);
    core::require_contiguous(op, "bias", a.bias);
  }
  core::require_same_device(op, {{"A", &a.A},
                                 {"out", &a.out},
                                 {"packed", &a.packed},
                                 {"absmax", &a.absmax},
                                 {"bias", &a.bias},
                                 {"nested.code", &a.nested.code}});
}
size_t workspace_size(const Matmul4bitArgs& a) { return ops::backend_workspace(a, a.A.device); }
void run(const Matmul4bitArgs& a, void* ws, Stream s) { ops::dispatch(a, a.A.device, ws, s); }
std::vector<KernelConfig> kernel_configs(const Matmul4bitArgs& a) { return ops::backend_configs(a, a.A.device); }

}  // namespace lowbit
