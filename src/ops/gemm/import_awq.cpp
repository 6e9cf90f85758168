// AWQ checkpoints (AutoAWQ's GEMM format) into the unpacked form, bit for bit.
#include "core/check.h"
#include "ops/gemm/common.h"
#include "ops/gemm/import_common.h"

namespace lowbit {
namespace {

const char* const op = "import_awq";

// AutoAWQ packs 8 columns into an int32 with nibble i holding column
// order[i] = {0, 2, 4, 6, 1, 3, 5, 7}[i] (the order its CUDA dequantizer
// unpacks in pairs); column c of a word lies in nibble kNibbleOf[c].
constexpr int kNibbleOf[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// Column n of an AWQ-packed [rows, N / 8] int32 matrix, row r.
uint32_t awq_field(const Tensor& packed, int64_t r, int64_t n) {
  const int64_t cols = packed.size(1);
  return ops::gemm::word_field(packed.ptr<const int32_t>()[r * cols + n / 8], kNibbleOf[n % 8], 4);
}

}  // namespace

QuantizedWeight import_awq(const AwqTensors& t, int64_t group_size) {
  ops::gemm::require_matrix(op, "qweight", t.qweight, {DType::i32});
  ops::gemm::require_matrix(op, "qzeros", t.qzeros, {DType::i32});
  ops::gemm::require_matrix(op, "scales", t.scales, core::kFloatDTypes);
  const int64_t K = t.qweight.size(0), N = t.qweight.size(1) * 8;
  LOWBIT_REQUIRE(group_size == -1 || group_size > 0, ErrorCode::invalid_argument, op,
                 ": group_size must be -1 or positive (got ", group_size, ")");
  const int64_t G = group_size > 0 ? (K + group_size - 1) / group_size : 1;
  core::require_shape(op, "scales", t.scales, {G, N});
  core::require_shape(op, "qzeros", t.qzeros, {G, N / 8});

  QuantizedWeight w;
  // A group at least K long is one group over K.
  w.config = ops::gemm::imported_config(WeightType::uint4, N, K, group_size >= K ? -1 : group_size, t.scales.dtype);
  w.config.with_zeros = true;
  w.config.zeros_mode = ZerosMode::quantized;  // AWQ: w = (q - z) * s, z stored as is
  check(w.config);

  const Tensor qw = ops::gemm::host_copy(t.qweight);
  w.weight = Tensor::empty({N, K}, DType::u8);
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n) w.weight.ptr<uint8_t>()[n * K + k] = static_cast<uint8_t>(awq_field(qw, k, n));
  }
  const Tensor qz = ops::gemm::host_copy(t.qzeros);
  w.zeros = Tensor::empty({N, G}, DType::u8);
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t n = 0; n < N; ++n) w.zeros.ptr<uint8_t>()[n * G + g] = static_cast<uint8_t>(awq_field(qz, g, n));
  }
  w.scale = ops::gemm::transpose_host(t.scales);
  if (t.bias.present()) {
    core::require_dtype(op, "bias", t.bias, core::kFloatDTypes);
    core::require_shape(op, "bias", t.bias, {N});
    w.bias = ops::gemm::host_copy(t.bias);
    w.config.with_bias = true;
  }
  return w;
}

}  // namespace lowbit
