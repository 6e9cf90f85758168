// MatmulConfig validation and the rules every weight format obeys.
#include "core/check.h"
#include "core/weight_format.h"
#include "ops/gemm/common.h"

namespace lowbit {
namespace ops::gemm {

void require_dtype_field(const char* op, const char* name, DType d, std::initializer_list<DType> allowed) {
  for (DType a : allowed) {
    if (a == d) return;
  }
  core::fail(ErrorCode::unsupported_dtype, core::cat(op, ": ", name, " must be ", allowed.size() == 1 ? "" : "one of ",
                                                     core::dtypes_str(allowed), " (got ", dtype_name(d), ")"));
}

void check_format(const char* op, WeightType type, int64_t N, int64_t K, int64_t group_size, bool with_scaling,
                  bool with_zeros, ZerosMode zeros_mode) {
  LOWBIT_REQUIRE(static_cast<int>(type) < kNumWeightTypes, ErrorCode::unsupported_dtype, op,
                 ": W_dtype must be a WeightType (got value ", static_cast<int>(type), ")");
  LOWBIT_REQUIRE(N >= 1, ErrorCode::invalid_argument, op, ": N must be positive (got ", N, ")");
  LOWBIT_REQUIRE(K >= 1, ErrorCode::invalid_argument, op, ": K must be positive (got ", K, ")");
  // The float32 [N, K] weight dequantize_weight gives back must be countable.
  const int64_t nk[2] = {N, K};
  core::checked_numel(op, "the weight [N, K]", nk, DType::f32);
  // Groups of whole 32-element runs keep every group start byte-aligned in
  // a packed row at any bit width, and aligned to the K tiles of kernels.
  LOWBIT_REQUIRE(group_size == -1 || (group_size > 0 && group_size % 32 == 0), ErrorCode::invalid_argument, op,
                 ": group_size must be -1 or a positive multiple of 32 (got ", group_size, ")");
  LOWBIT_REQUIRE(group_size == -1 || K % group_size == 0, ErrorCode::invalid_argument, op, ": group_size ", group_size,
                 " must divide K (got K = ", K, ")");
  LOWBIT_REQUIRE(group_size == -1 || with_scaling, ErrorCode::invalid_argument, op, ": group_size ", group_size,
                 " needs with_scaling (groups are the extent of a scale; got with_scaling = false)");
  if (!with_zeros) return;
  LOWBIT_REQUIRE(with_scaling, ErrorCode::invalid_argument, op,
                 ": with_zeros needs with_scaling (every zeros mode scales; got with_scaling = false)");
  LOWBIT_REQUIRE(core::weight_is_integer(type), ErrorCode::invalid_argument, op,
                 ": with_zeros needs an integer W_dtype (int8..int1, uint8..uint1; got ", weight_type_name(type), ")");
  LOWBIT_REQUIRE(
      zeros_mode == ZerosMode::original || zeros_mode == ZerosMode::rescale || zeros_mode == ZerosMode::quantized,
      ErrorCode::invalid_argument, op, ": zeros_mode must be original, rescale or quantized (got value ",
      static_cast<int>(zeros_mode), ")");
}

WeightLayout layout_for(Device device, const MatmulConfig& c) {
  switch (device.type) {
    case DeviceType::cpu: return WeightLayout::rows;
    // The tile kernels take the common quantized formats; the rest (fp8,
    // f16/bf16 weights, float zeros, groups smaller than a tile) stay `rows`,
    // as does W8A8's int8 weight, which the int8 GEMM reads as it is.
    case DeviceType::cuda:
      if (c.A_dtype == DType::i8) return WeightLayout::rows;
      return core::tiles_supported(format_of(c, WeightLayout::tiles)) ? WeightLayout::tiles : WeightLayout::rows;
  }
  core::fail(ErrorCode::no_backend, core::cat(kMatmul, ": no weight layout for device ", device.str()));
}

void require_tiles_format(const char* op, const WeightFormat& f) {
  LOWBIT_REQUIRE(core::tiles_supported(f), ErrorCode::invalid_argument, op,
                 ": the tiles layout takes integer types of 1/2/4/8 bits and 4-bit tables, no zeros or quantized "
                 "zeros, groups of a power-of-two count of tiles (got ",
                 weight_type_name(f.type), " group_size ", f.group_size,
                 f.with_zeros ? core::cat(" zeros ", zeros_mode_name(f.zeros_mode)) : std::string(), ")");
}

WeightFormat format_of(const MatmulConfig& c, WeightLayout layout) {
  WeightFormat f;
  f.layout = layout;
  f.type = c.W_dtype;
  f.N = c.N;
  f.K = c.K;
  f.group_size = c.group_size;
  f.with_scaling = c.with_scaling;
  f.with_zeros = c.with_zeros;
  f.zeros_mode = c.zeros_mode;
  f.with_bias = c.with_bias;
  return f;
}

}  // namespace ops::gemm

void check(const MatmulConfig& c) {
  const char* op = ops::gemm::kMatmul;
  LOWBIT_REQUIRE(!c.M.empty(), ErrorCode::invalid_argument, op,
                 ": M (the prepared batch sizes) must list at least one value (got none)");
  for (int64_t m : c.M) {
    LOWBIT_REQUIRE(m >= 1, ErrorCode::invalid_argument, op, ": every prepared M must be positive (got ", m, ")");
  }
  ops::gemm::require_dtype_field(op, "A_dtype", c.A_dtype, {DType::f16, DType::bf16, DType::i8});
  if (c.A_dtype == DType::i8) {  // W8A8 (BitBLAS' int8 x int8): the exact int32 product, through int8_linear_matmul
    const char* why = " (A_dtype int8 is W8A8: int8 weights, int32 accumulation and output)";
    LOWBIT_REQUIRE(c.W_dtype == WeightType::int8, ErrorCode::invalid_argument, op, ": W_dtype must be int8",
                   why, " (got ", weight_type_name(c.W_dtype), ")");
    ops::gemm::require_dtype_field(op, "accum_dtype", c.accum_dtype, {DType::i32});
    ops::gemm::require_dtype_field(op, "out_dtype", c.out_dtype, {DType::i32});
    LOWBIT_REQUIRE(!c.with_scaling && !c.with_zeros && !c.with_bias && c.group_size == -1,
                   ErrorCode::invalid_argument, op,
                   ": A_dtype int8 takes no scaling, zeros, bias or groups (the int32 product is exact; scale it "
                   "afterwards, e.g. with int8_mm_dequant; got with_scaling ", c.with_scaling ? "true" : "false",
                   ", with_zeros ", c.with_zeros ? "true" : "false", ", with_bias ", c.with_bias ? "true" : "false",
                   ", group_size ", c.group_size, ")");
    LOWBIT_REQUIRE(c.K % 16 == 0, ErrorCode::invalid_argument, op,
                   ": A_dtype int8 needs K a multiple of 16 (the packed rows, 16-byte multiples, are the int8 "
                   "GEMM's B as they are; got K = ", c.K, ")");
  } else {
    ops::gemm::require_dtype_field(op, "accum_dtype", c.accum_dtype, {DType::f32, DType::f16});
    ops::gemm::require_dtype_field(op, "out_dtype", c.out_dtype, {DType::f16, DType::bf16, DType::f32});
  }
  LOWBIT_REQUIRE(c.layout == "nt", ErrorCode::invalid_argument, op,
                 ": layout must be \"nt\" (A [M, K] times W [N, K] transposed; got \"", c.layout, "\")");
  ops::gemm::check_format(op, c.W_dtype, c.N, c.K, c.group_size, c.with_scaling, c.with_zeros, c.zeros_mode);
}

}  // namespace lowbit
