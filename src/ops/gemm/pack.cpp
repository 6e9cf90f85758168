// transform_weight's validation and the packing into the `rows` and `tiles`
// layouts (docs/gemm.md draws them): host work, done once per weight.
#include <cstring>

#include "core/check.h"
#include "core/weight_format.h"
#include "ops/gemm/common.h"

namespace lowbit::ops::gemm {
namespace {

const char* const op = kTransform;

// "[n, k]" of element i of an [rows, cols] tensor, for messages.
std::string at(int64_t i, int64_t cols) { return core::cat("[", i / cols, ", ", i % cols, "]"); }

void require_input(const char* name, const TensorRef& t, bool wanted, const char* flag) {
  if (!wanted) {
    LOWBIT_REQUIRE(!t.present(), ErrorCode::invalid_argument, op, ": ", name, " must be absent when ", flag,
                   " is false (got ", t.str(), ")");
    return;
  }
  core::require_present(op, name, t);
  core::require_contiguous(op, name, t);
}

// Codes of the weight [N, K], validated against W's type.
std::vector<uint32_t> weight_codes(const MatmulConfig& c, const TensorRef& weight) {
  const WeightType type = c.W_dtype;
  const core::WeightTypeInfo info = core::weight_type_info(type);
  std::vector<uint32_t> codes(static_cast<size_t>(weight.numel()));
  switch (info.kind) {
    case core::WeightKind::f16:
    case core::WeightKind::bf16: {
      core::require_dtype(op, "weight", weight, {type == WeightType::f16 ? DType::f16 : DType::bf16});
      const Tensor h = host_copy(weight);
      const auto* p = h.ptr<const uint16_t>();
      for (size_t i = 0; i < codes.size(); ++i) codes[i] = p[i];
      return codes;
    }
    case core::WeightKind::fp8: {
      core::require_dtype(op, "weight", weight, {DType::u8, DType::f8_e4m3});
      const Tensor h = host_copy(weight);
      const auto* p = h.ptr<const uint8_t>();
      for (size_t i = 0; i < codes.size(); ++i) codes[i] = p[i];
      return codes;
    }
    default: break;
  }
  core::require_dtype(op, "weight", weight, {DType::i8, DType::u8});
  const std::vector<int64_t> v = host_ints(weight);
  const bool integer = core::weight_is_integer(type);
  for (size_t i = 0; i < codes.size(); ++i) {
    const int64_t x = v[i];
    const bool ok = integer ? (x >= -128 && x <= 255 && core::weight_int_in_range(type, static_cast<int32_t>(x)))
                            : (x >= info.min && x <= info.max);
    if (!ok) {
      core::fail(
          ErrorCode::invalid_argument,
          core::cat(op, ": weight ", integer ? "values" : "codes", " of ", weight_type_name(type), " must be ",
                    info.kind == core::WeightKind::pm1 ? "-1 or +1" : core::cat("in [", info.min, ", ", info.max, "]"),
                    " (got ", x, " at ", at(static_cast<int64_t>(i), c.K), ")"));
    }
    codes[i] = integer ? core::weight_int_code(type, static_cast<int32_t>(x)) : static_cast<uint32_t>(x);
  }
  return codes;
}

// perm as i32, checked to be a permutation of [0, K).
Tensor check_perm(const TensorRef& perm, int64_t K) {
  core::require_contiguous(op, "perm", perm);
  core::require_dtype(op, "perm", perm, {DType::i32, DType::i64});
  core::require_shape(op, "perm", perm, {K});
  const std::vector<int64_t> v = host_ints(perm);
  std::vector<uint8_t> seen(static_cast<size_t>(K), 0);
  Tensor out = Tensor::empty({K}, DType::i32);
  for (int64_t j = 0; j < K; ++j) {
    const int64_t k = v[static_cast<size_t>(j)];
    LOWBIT_REQUIRE(k >= 0 && k < K && !seen[static_cast<size_t>(k)], ErrorCode::invalid_argument, op,
                   ": perm must be a permutation of 0..", K - 1, " (got ", k, " at [", j, "]",
                   (k >= 0 && k < K) ? ", seen before" : "", ")");
    seen[static_cast<size_t>(k)] = 1;
    out.ptr<int32_t>()[j] = static_cast<int32_t>(k);
  }
  return out;
}

Tensor f32_tensor(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}

// Quantized zeros [N, G] of W's type, packed one stream of N codes per group.
Tensor pack_quantized_zeros(const MatmulConfig& c, const TensorRef& zeros) {
  const WeightType type = c.W_dtype;
  const int bits = core::weight_bits(type);
  const int64_t N = c.N, G = c.groups();
  core::require_dtype(op, "zeros (quantized)", zeros, {DType::i8, DType::u8, DType::i32});
  const std::vector<int64_t> v = host_ints(zeros);
  const int64_t words = core::packed_zeros_words(N, bits);
  Tensor out = Tensor::empty({G, words}, DType::i32);
  std::memset(out.data(), 0, out.nbytes());
  auto* base = out.ptr<uint8_t>();
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      const int64_t z = v[static_cast<size_t>(n * G + g)];
      LOWBIT_REQUIRE(z >= INT32_MIN && z <= INT32_MAX && core::weight_int_in_range(type, static_cast<int32_t>(z)),
                     ErrorCode::invalid_argument, op, ": quantized zeros must be values of ", weight_type_name(type),
                     " (got ", z, " at [", n, ", ", g, "])");
      core::stream_write(base + g * words * 4, n, bits, core::weight_int_code(type, static_cast<int32_t>(z)));
    }
  }
  return out;
}

PackedWeight pack_rows(const MatmulConfig& c, const std::vector<uint32_t>& codes) {
  PackedWeight w;
  w.format = format_of(c, WeightLayout::rows);
  const int bits = core::weight_bits(c.W_dtype);
  const int64_t row_bytes = core::rows_row_bytes(c.K, bits);
  w.qweight = Tensor::empty({c.N, row_bytes}, DType::u8);
  std::memset(w.qweight.data(), 0, w.qweight.nbytes());
  for (int64_t n = 0; n < c.N; ++n) {
    uint8_t* row = w.qweight.ptr<uint8_t>() + n * row_bytes;
    for (int64_t k = 0; k < c.K; ++k) core::stream_write(row, k, bits, codes[static_cast<size_t>(n * c.K + k)]);
  }
  return w;
}

// The `tiles` layout (src/core/weight_format.h): codes (core::tile_code)
// permuted into fragment order, scales [G, Np] in their own dtype, zero codes
// u8 [G, Np].
PackedWeight pack_tiles(const MatmulConfig& c, const std::vector<uint32_t>& codes) {
  PackedWeight w;
  w.format = format_of(c, WeightLayout::tiles);
  const int bits = core::weight_bits(c.W_dtype);
  const bool adjacent = core::tile_pairs_adjacent(c.W_dtype);
  const int kt = core::tile_k(bits);
  const int64_t k_tiles = core::tiles_k_tiles(c.K, bits);
  w.qweight = Tensor::empty({core::tiles_row_tiles(c.N), k_tiles * core::kTileBytes}, DType::u8);
  std::memset(w.qweight.data(), 0, w.qweight.nbytes());
  auto* q = w.qweight.ptr<uint8_t>();
  for (int64_t n = 0; n < c.N; ++n) {
    uint8_t* row_tiles = q + (n / core::kTileRows) * k_tiles * core::kTileBytes;
    for (int64_t k = 0; k < c.K; ++k) {
      const core::TileSpot spot =
          core::tile_spot(bits, adjacent, static_cast<int>(n % core::kTileRows), static_cast<int>(k % kt));
      uint8_t& byte = row_tiles[(k / kt) * core::kTileBytes + spot.byte];
      const uint32_t code = core::tile_code(c.W_dtype, codes[static_cast<size_t>(n * c.K + k)]);
      byte = static_cast<uint8_t>(byte | (code << spot.shift));
    }
  }
  return w;
}

// [N, G] -> [G, Np] (rows past N zero), element bytes as they are.
Tensor transpose_rows_padded(const TensorRef& t, int64_t N, int64_t G) {
  const Tensor h = host_copy(t);
  const int64_t np = core::tiles_padded_rows(N);
  const size_t size = static_cast<size_t>(dtype_bits(h.dtype()) / 8);
  Tensor out = Tensor::empty({G, np}, h.dtype());
  std::memset(out.data(), 0, out.nbytes());
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      std::memcpy(out.ptr<uint8_t>() + static_cast<size_t>(g * np + n) * size,
                  h.ptr<const uint8_t>() + static_cast<size_t>(n * G + g) * size, size);
    }
  }
  return out;
}

// Quantized zeros as codes u8 [G, Np] (core::tile_code), from the packed streams.
Tensor tiles_zero_codes(const MatmulConfig& c, const Tensor& streams) {
  const int bits = core::weight_bits(c.W_dtype);
  const int64_t np = core::tiles_padded_rows(c.N), G = c.groups();
  const int64_t words = core::packed_zeros_words(c.N, bits);
  Tensor out = Tensor::empty({G, np}, DType::u8);
  std::memset(out.data(), 0, out.nbytes());
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t n = 0; n < c.N; ++n) {
      const uint32_t code = core::stream_read(streams.ptr<const uint8_t>() + g * words * 4, n, bits);
      out.ptr<uint8_t>()[g * np + n] = static_cast<uint8_t>(core::tile_code(c.W_dtype, code));
    }
  }
  return out;
}

}  // namespace

Tensor host_copy(const TensorRef& t) { return Tensor::copy_of(t, Device::cpu()); }

std::vector<float> host_floats(const TensorRef& t) {
  const Tensor h = host_copy(t);
  std::vector<float> v(static_cast<size_t>(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (h.dtype()) {
      case DType::f32: v[i] = h.ptr<const float>()[i]; break;
      case DType::f16: v[i] = core::f16_to_f32(h.ptr<const uint16_t>()[i]); break;
      case DType::bf16: v[i] = core::bf16_to_f32(h.ptr<const uint16_t>()[i]); break;
      default: core::fail(ErrorCode::internal, core::cat("host_floats: not a float dtype: ", dtype_name(h.dtype())));
    }
  }
  return v;
}

std::vector<int64_t> host_ints(const TensorRef& t) {
  const Tensor h = host_copy(t);
  std::vector<int64_t> v(static_cast<size_t>(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (h.dtype()) {
      case DType::i8: v[i] = h.ptr<const int8_t>()[i]; break;
      case DType::u8: v[i] = h.ptr<const uint8_t>()[i]; break;
      case DType::i32: v[i] = h.ptr<const int32_t>()[i]; break;
      case DType::i64: v[i] = h.ptr<const int64_t>()[i]; break;
      default: core::fail(ErrorCode::internal, core::cat("host_ints: not an integer dtype: ", dtype_name(h.dtype())));
    }
  }
  return v;
}

PackedWeight pack_weight(WeightLayout layout, const MatmulConfig& c, const TensorRef& weight, const TensorRef& scale,
                         const TensorRef& zeros, const TensorRef& bias, const TensorRef& perm) {
  check(c);
  const int64_t N = c.N, K = c.K, G = c.groups();
  core::require_present(op, "weight", weight);
  core::require_contiguous(op, "weight", weight);
  core::require_shape(op, "weight", weight, {N, K});
  require_input("scale", scale, c.with_scaling, "with_scaling");
  require_input("zeros", zeros, c.with_zeros, "with_zeros");
  require_input("bias", bias, c.with_bias, "with_bias");
  if (c.with_scaling) {
    core::require_dtype(op, "scale", scale, core::kFloatDTypes);
    core::require_shape(op, "scale", scale, {N, G});
  }
  const bool quantized_zeros = c.with_zeros && c.zeros_mode == ZerosMode::quantized;
  if (c.with_zeros) {
    core::require_shape(op, "zeros", zeros, {N, G});
    if (!quantized_zeros) {
      // BitBLAS: "zero_point has the same datatype with scale".
      LOWBIT_REQUIRE(zeros.dtype == scale.dtype, ErrorCode::unsupported_dtype, op, ": zeros (",
                     zeros_mode_name(c.zeros_mode), ") must have the scale's dtype ", dtype_name(scale.dtype), " (got ",
                     dtype_name(zeros.dtype), ")");
    }
  }
  if (c.with_bias) {
    core::require_dtype(op, "bias", bias, core::kFloatDTypes);
    core::require_shape(op, "bias", bias, {N});
  }
  LOWBIT_REQUIRE(layout == WeightLayout::rows || layout == WeightLayout::tiles, ErrorCode::invalid_argument, op,
                 ": no packer for layout value ", static_cast<int>(layout));
  const bool tiles = layout == WeightLayout::tiles;
  if (tiles) require_tiles_format(op, format_of(c, layout));
  const std::vector<uint32_t> codes = weight_codes(c, weight);
  PackedWeight w = tiles ? pack_tiles(c, codes) : pack_rows(c, codes);
  if (tiles) {
    // Scales keep their dtype (the kernels read f16/bf16/f32), transposed so
    // a tile's 16 rows of one group are contiguous.
    if (c.with_scaling) w.scale = transpose_rows_padded(scale, N, G);
    if (quantized_zeros) w.zeros = tiles_zero_codes(c, pack_quantized_zeros(c, zeros));
  } else {
    // Scales and float zeros widen to f32 (exact): the CPU kernels then read one dtype.
    if (c.with_scaling) w.scale = f32_tensor(host_floats(scale), {N, G});
    if (quantized_zeros) {
      w.zeros = pack_quantized_zeros(c, zeros);
    } else if (c.with_zeros) {
      w.zeros = f32_tensor(host_floats(zeros), {N, G});
    }
  }
  if (c.with_bias) w.bias = f32_tensor(host_floats(bias), {N});
  if (perm.present()) w.perm = check_perm(perm, K);
  return w;
}

}  // namespace lowbit::ops::gemm
