// GPTQ checkpoints (AutoGPTQ / GPTQModel, formats gptq and gptq_v2) into the
// unpacked form: integer codes and zeros are copied bit for bit, scales keep
// their dtype — nothing passes through a lossy float.
#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "core/float_convert.h"
#include "ops/gemm/common.h"
#include "ops/gemm/import_common.h"

namespace lowbit {
namespace {

const char* const op = "import_gptq";

WeightType uint_type(int bits) {
  switch (bits) {
    case 2: return WeightType::uint2;
    case 4: return WeightType::uint4;
    case 8: return WeightType::uint8;
    default: break;
  }
  core::fail(ErrorCode::invalid_argument,
             core::cat(op, ": bits must be 2, 4 or 8 (got ", bits,
                       bits == 3 ? "; 3-bit GPTQ packs values across int32 words and is not supported)" : ")"));
}

// Act-order: the column order that makes every group contiguous (a stable
// sort by group), or an empty vector when g_idx is already k / group_size.
std::vector<int64_t> contiguous_group_order(const std::vector<int64_t>& g_idx, int64_t K, int64_t gs, int64_t G) {
  bool trivial = true;
  for (int64_t k = 0; k < K; ++k) {
    const int64_t g = g_idx[static_cast<size_t>(k)];
    LOWBIT_REQUIRE(g >= 0 && g < G, ErrorCode::invalid_argument, op, ": g_idx values must be in [0, ", G,
                   ") (the scales' rows; got ", g, " at [", k, "])");
    trivial = trivial && g == (gs > 0 ? k / gs : 0);
  }
  if (trivial) return {};
  std::vector<int64_t> order(static_cast<size_t>(K));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return g_idx[static_cast<size_t>(a)] < g_idx[static_cast<size_t>(b)]; });
  // Contiguous groups of group_size columns each: the packed weight's
  // group g is then columns [g * gs, (g + 1) * gs).
  for (int64_t j = 0; j < K; ++j) {
    const int64_t g = g_idx[static_cast<size_t>(order[static_cast<size_t>(j)])];
    LOWBIT_REQUIRE(gs > 0 && g == j / gs, ErrorCode::invalid_argument, op, ": every group of g_idx must hold ", gs,
                   " columns (group ", g, " does not), so groups cannot be made contiguous");
  }
  return order;
}

}  // namespace

QuantizedWeight import_gptq(const GptqTensors& t, const GptqOptions& o) {
  const WeightType type = uint_type(o.bits);
  const int bits = o.bits, pack = 32 / bits;
  ops::gemm::require_matrix(op, "qweight", t.qweight, {DType::i32});
  ops::gemm::require_matrix(op, "scales", t.scales, core::kFloatDTypes);
  ops::gemm::require_matrix(op, "qzeros", t.qzeros, {DType::i32});
  const int64_t K = t.qweight.size(0) * pack, N = t.qweight.size(1);
  const int64_t G = t.scales.size(0);
  LOWBIT_REQUIRE(o.group_size == -1 || o.group_size > 0, ErrorCode::invalid_argument, op,
                 ": group_size must be -1 or positive (got ", o.group_size, ")");
  const int64_t want_groups = o.group_size > 0 ? (K + o.group_size - 1) / o.group_size : 1;
  core::require_shape(op, "scales", t.scales, {want_groups, N});
  core::require_shape(op, "qzeros", t.qzeros, {G, (N + pack - 1) / pack});
  LOWBIT_REQUIRE(o.zeros_mode == ZerosMode::quantized || o.zeros_mode == ZerosMode::original,
                 ErrorCode::invalid_argument, op, ": zeros_mode must be quantized or original (got ",
                 zeros_mode_name(o.zeros_mode), ")");

  QuantizedWeight w;
  // A group at least K long is one group over K (GPTQ quantizes small layers so).
  const int64_t gs = o.group_size >= K ? -1 : o.group_size;
  w.config = ops::gemm::imported_config(type, N, K, gs, t.scales.dtype);
  w.config.with_zeros = true;
  w.config.zeros_mode = o.zeros_mode;
  check(w.config);  // group_size divides K, is a multiple of 32

  std::vector<int64_t> order;
  if (t.g_idx.present()) {
    core::require_dtype(op, "g_idx", t.g_idx, {DType::i32, DType::i64});
    core::require_shape(op, "g_idx", t.g_idx, {K});
    order = contiguous_group_order(ops::gemm::host_ints(t.g_idx), K, gs, G);
  }
  // qweight [K / pack, N]: column n of W, element k in field k % pack of word k / pack.
  const Tensor qw = ops::gemm::host_copy(t.qweight);
  w.weight = Tensor::empty({N, K}, DType::u8);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < K; ++j) {
      const int64_t k = order.empty() ? j : order[static_cast<size_t>(j)];
      const int32_t word = qw.ptr<const int32_t>()[(k / pack) * N + n];
      w.weight.ptr<uint8_t>()[n * K + j] =
          static_cast<uint8_t>(ops::gemm::word_field(word, static_cast<int>(k % pack), bits));
    }
  }
  // qzeros [G, N / pack]: zero of (g, n) in field n % pack of word n / pack,
  // stored minus one in format v1 (and never masked back: a stored all-ones
  // field means 2^bits, as GPTQ's kernels read it).
  const Tensor qz = ops::gemm::host_copy(t.qzeros);
  const int64_t zcols = t.qzeros.size(1);
  const int64_t offset = o.zero_plus_one ? 1 : 0;
  std::vector<float> zf(static_cast<size_t>(N * G));
  w.zeros = Tensor::empty({N, G}, DType::i32);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      const int32_t word = qz.ptr<const int32_t>()[g * zcols + n / pack];
      const int64_t z = ops::gemm::word_field(word, static_cast<int>(n % pack), bits) + offset;
      LOWBIT_REQUIRE(o.zeros_mode == ZerosMode::original || z < (int64_t{1} << bits), ErrorCode::invalid_argument, op,
                     ": zero point ", z, " at [", g, ", ", n, "] does not fit ", weight_type_name(type),
                     " (a v1 zero stored as all ones); import with zeros_mode = original");
      w.zeros.ptr<int32_t>()[n * G + g] = static_cast<int32_t>(z);
      zf[static_cast<size_t>(n * G + g)] = static_cast<float>(z);
    }
  }
  w.scale = ops::gemm::transpose_host(t.scales);
  if (o.zeros_mode == ZerosMode::original) {
    // Integers up to 256 are exact in f16, bf16 and f32: the zeros keep the scales' dtype.
    Tensor zt = Tensor::empty({N, G}, t.scales.dtype);
    for (size_t i = 0; i < zf.size(); ++i) {
      switch (zt.dtype()) {
        case DType::f32: zt.ptr<float>()[i] = zf[i]; break;
        case DType::f16: zt.ptr<uint16_t>()[i] = core::f32_to_f16(zf[i]); break;
        default: zt.ptr<uint16_t>()[i] = core::f32_to_bf16(zf[i]); break;
      }
    }
    w.zeros = zt;
  }
  if (t.bias.present()) {
    core::require_dtype(op, "bias", t.bias, core::kFloatDTypes);
    core::require_shape(op, "bias", t.bias, {N});
    w.bias = ops::gemm::host_copy(t.bias);
    w.config.with_bias = true;
  }
  if (!order.empty()) {
    w.perm = Tensor::empty({K}, DType::i32);
    for (int64_t j = 0; j < K; ++j) w.perm.ptr<int32_t>()[j] = static_cast<int32_t>(order[static_cast<size_t>(j)]);
  }
  return w;
}

}  // namespace lowbit
