// Reading a packed weight back on the host: its dequantized values (what
// every backend multiplies by) and its unpacked form.
#include <cstring>

#include "core/check.h"
#include "core/weight_format.h"
#include "ops/gemm/common.h"

namespace lowbit {
namespace {

// A packed weight's contents on the host, read element by element through
// the one definition of the format (src/core/weight_format.h).
struct HostReader {
  WeightFormat f;
  int bits;
  Tensor q, zq;
  std::vector<float> scale, zf;
  std::vector<int64_t> perm;
  const float* table;
  int64_t row_bytes, zwords;
  // tiles: padded rows of the per-row tensors, k tiles, the pair order.
  int64_t np = 0, k_tiles = 0;
  bool adjacent = false;

  explicit HostReader(const PackedWeight& W) : f(W.format), bits(core::weight_bits(W.format.type)) {
    ops::gemm::check_packed("dequantize_weight", W.ref());
    q = ops::gemm::host_copy(W.qweight);
    if (f.with_scaling) scale = ops::gemm::host_floats(W.scale);
    if (quantized_zeros()) {
      zq = ops::gemm::host_copy(W.zeros);
    } else if (f.with_zeros) {
      zf = ops::gemm::host_floats(W.zeros);
    }
    if (W.perm.defined()) perm = ops::gemm::host_ints(W.perm);
    table = core::weight_table16(f.type);
    row_bytes = W.qweight.size(1);
    zwords = core::packed_zeros_words(f.N, bits);
    np = core::tiles_padded_rows(f.N);
    k_tiles = core::tiles_k_tiles(f.K, bits);
    adjacent = core::tile_pairs_adjacent(f.type);
  }
  bool tiles() const { return f.layout == WeightLayout::tiles; }
  bool quantized_zeros() const { return f.with_zeros && f.zeros_mode == ZerosMode::quantized; }
  uint32_t code(int64_t n, int64_t k) const {
    if (!tiles()) return core::stream_read(q.ptr<const uint8_t>() + n * row_bytes, k, bits);
    const int kt = core::tile_k(bits);
    const core::TileSpot spot =
        core::tile_spot(bits, adjacent, static_cast<int>(n % core::kTileRows), static_cast<int>(k % kt));
    const uint8_t byte =
        q.ptr<const uint8_t>()[((n / core::kTileRows) * k_tiles + k / kt) * core::kTileBytes + spot.byte];
    return core::tile_code(f.type, (static_cast<uint32_t>(byte) >> spot.shift) & core::code_mask(bits));
  }
  uint32_t zero_code(int64_t n, int64_t g) const {
    if (tiles()) return core::tile_code(f.type, zq.ptr<const uint8_t>()[g * np + n]);
    return core::stream_read(zq.ptr<const uint8_t>() + g * zwords * 4, n, bits);
  }
  float scale_at(int64_t n, int64_t g) const {
    if (!f.with_scaling) return 1.0f;
    return scale[static_cast<size_t>(tiles() ? g * np + n : n * f.groups() + g)];
  }
  float zero_at(int64_t n, int64_t g) const {
    if (quantized_zeros()) return core::weight_code_value(f.type, zero_code(n, g), table);
    return f.with_zeros ? zf[static_cast<size_t>(n * f.groups() + g)] : 0.0f;
  }
};

// Integer values (or codes) as i8 / u8 tensors: signed kinds as int8.
DType int_dtype(WeightType t) {
  const core::WeightKind k = core::weight_type_info(t).kind;
  return (k == core::WeightKind::sint || k == core::WeightKind::pm1) ? DType::i8 : DType::u8;
}

void store_int(Tensor& t, int64_t i, int64_t v) {
  if (t.dtype() == DType::i8) {
    t.ptr<int8_t>()[i] = static_cast<int8_t>(v);
  } else {
    t.ptr<uint8_t>()[i] = static_cast<uint8_t>(v);
  }
}

Tensor f32_copy(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}

}  // namespace

Tensor dequantize_weight(const PackedWeight& W) {
  const HostReader r(W);
  const WeightFormat& f = r.f;
  const core::DequantRule rule = core::dequant_rule(f);
  Tensor out = Tensor::empty({f.N, f.K}, DType::f32);
  for (int64_t n = 0; n < f.N; ++n) {
    for (int64_t k = 0; k < f.K; ++k) {
      const int64_t g = k / f.group_length();
      const float v = core::weight_code_value(f.type, r.code(n, k), r.table);
      // Column k of the packed weight multiplies A's column perm[k].
      const int64_t col = r.perm.empty() ? k : r.perm[static_cast<size_t>(k)];
      out.ptr<float>()[n * f.K + col] = core::dequant(rule, v, r.scale_at(n, g), r.zero_at(n, g));
    }
  }
  return out;
}

QuantizedWeight unpack_weight(const PackedWeight& W) {
  const HostReader r(W);
  const WeightFormat& f = r.f;
  QuantizedWeight u;
  MatmulConfig& c = u.config;
  c.N = f.N;
  c.K = f.K;
  c.W_dtype = f.type;
  c.group_size = f.group_size;
  c.with_scaling = f.with_scaling;
  c.with_zeros = f.with_zeros;
  c.zeros_mode = f.zeros_mode;
  c.with_bias = f.with_bias;
  const core::WeightKind kind = core::weight_type_info(f.type).kind;
  const bool integer = core::weight_is_integer(f.type);
  if (kind == core::WeightKind::f16 || kind == core::WeightKind::bf16) {
    u.weight = Tensor::empty({f.N, f.K}, kind == core::WeightKind::f16 ? DType::f16 : DType::bf16);
  } else {
    u.weight = Tensor::empty({f.N, f.K}, int_dtype(f.type));
  }
  for (int64_t n = 0; n < f.N; ++n) {
    for (int64_t k = 0; k < f.K; ++k) {
      const uint32_t code = r.code(n, k);
      const int64_t i = n * f.K + k;
      if (u.weight.dtype() == DType::f16 || u.weight.dtype() == DType::bf16) {
        u.weight.ptr<uint16_t>()[i] = static_cast<uint16_t>(code);
      } else {
        store_int(u.weight, i, integer ? core::weight_int_value(f.type, code) : static_cast<int64_t>(code));
      }
    }
  }
  const int64_t G = f.groups();
  if (f.with_scaling) {
    std::vector<float> s(static_cast<size_t>(f.N * G));
    for (int64_t n = 0; n < f.N; ++n) {
      for (int64_t g = 0; g < G; ++g) s[static_cast<size_t>(n * G + g)] = r.scale_at(n, g);
    }
    u.scale = f32_copy(s, {f.N, G});
  }
  if (r.quantized_zeros()) {
    u.zeros = Tensor::empty({f.N, G}, int_dtype(f.type));
    for (int64_t n = 0; n < f.N; ++n) {
      for (int64_t g = 0; g < G; ++g) store_int(u.zeros, n * G + g, core::weight_int_value(f.type, r.zero_code(n, g)));
    }
  } else if (f.with_zeros) {
    u.zeros = f32_copy(r.zf, {f.N, G});
  }
  if (f.with_bias) u.bias = ops::gemm::host_copy(W.bias);
  if (W.perm.defined()) u.perm = ops::gemm::host_copy(W.perm);
  return u;
}

}  // namespace lowbit
