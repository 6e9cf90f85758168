#include "io/gptq.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/float_convert.h"

namespace lowbit::io::detail {
namespace {

using core::cat;

// Tiles of rows: qweight and qzeros pack along the other axis, so a tile's
// words are written (and read back) contiguously instead of one word per
// row scattered across the whole tensor.
constexpr int64_t kTileRows = 64;

template <class T>
void to_floats(const T* src, int64_t count, float* dst) {
  for (int64_t i = 0; i < count; ++i) dst[i] = core::to_f32(src[i]);
}

// Row `n` of a [rows, count] float tensor, as floats.
void load_row(const TensorRef& t, int64_t n, int64_t count, float* dst) {
  switch (t.dtype) {
    case DType::f16: return to_floats(t.ptr<const core::Half>() + n * count, count, dst);
    case DType::bf16: return to_floats(t.ptr<const core::BFloat16>() + n * count, count, dst);
    default: return to_floats(t.ptr<const float>() + n * count, count, dst);
  }
}

// count elements of a float tensor from `first`, to dst[0], dst[stride], ...
template <class T>
void to_floats_strided(const T* src, int64_t count, int64_t stride, float* dst) {
  for (int64_t i = 0; i < count; ++i) dst[i * stride] = core::to_f32(src[i]);
}

void load_span(const TensorRef& t, int64_t first, int64_t count, int64_t stride, float* dst) {
  switch (t.dtype) {
    case DType::f16: return to_floats_strided(t.ptr<const core::Half>() + first, count, stride, dst);
    case DType::bf16: return to_floats_strided(t.ptr<const core::BFloat16>() + first, count, stride, dst);
    default: return to_floats_strided(t.ptr<const float>() + first, count, stride, dst);
  }
}

template <class T>
void from_floats(const float* src, int64_t count, T* dst) {
  for (int64_t i = 0; i < count; ++i) dst[i] = core::from_f32<T>(src[i]);
}

void store_row(const TensorRef& t, int64_t n, int64_t count, const float* src) {
  switch (t.dtype) {
    case DType::f16: return from_floats(src, count, t.ptr<core::Half>() + n * count);
    case DType::bf16: return from_floats(src, count, t.ptr<core::BFloat16>() + n * count);
    default: return from_floats(src, count, t.ptr<float>() + n * count);
  }
}

constexpr float kMaxHalf = 65504.0f;  // fp16's largest finite value

// A scale as the file will hold it (fp16), kept away from 0 and infinity so
// x / s stays finite.
float fp16_scale(float s) {
  constexpr float kMinSubnormal = 5.9604645e-8f;  // 2^-24
  const float h = core::f16_to_f32(core::f32_to_f16(std::min(s, kMaxHalf)));
  return h > 0.0f ? h : kMinSubnormal;
}

struct GroupParams {
  float scale;
  int zero;
  bool overflow;  // the group's scale is beyond fp16: its codes would be meaningless
};

// GPTQ's Quantizer.find_params for one (row, group), then the fp16 scale.
GroupParams find_params(const float* x, int64_t count, int maxq, bool symmetric, bool v2_zeros) {
  float xmin = 0.0f, xmax = 0.0f;  // the range always holds 0
  for (int64_t i = 0; i < count; ++i) {
    if (x[i] < xmin) xmin = x[i];
    if (x[i] > xmax) xmax = x[i];
  }
  if (symmetric) {
    xmax = std::max(-xmin, xmax);
    if (xmin < 0.0f) xmin = -xmax;
  }
  if (xmin == 0.0f && xmax == 0.0f) {
    xmin = -1.0f;
    xmax = 1.0f;
  }
  const float raw = (xmax - xmin) / static_cast<float>(maxq);
  float scale = fp16_scale(raw);
  if (symmetric) return {scale, (maxq + 1) / 2, raw > kMaxHalf};
  int zero = static_cast<int>(std::clamp(std::nearbyint(-xmin / scale), 0.0f, static_cast<float>(maxq)));
  if (zero == 0 && !v2_zeros) {
    // v1 stores zero - 1, and -1 does not fit the packed field: move the
    // grid one step up and stretch the scale so xmax still lands on maxq.
    zero = 1;
    scale = fp16_scale(xmax / static_cast<float>(maxq - 1));
    return {scale, zero, xmax / static_cast<float>(maxq - 1) > kMaxHalf};
  }
  return {scale, zero, raw > kMaxHalf};
}

uint32_t code_of(float x, const GroupParams& p, int maxq) {
  const float q = std::nearbyint(x / p.scale) + static_cast<float>(p.zero);
  if (!(q > 0.0f)) return 0;  // also NaN
  return static_cast<uint32_t>(std::min(q, static_cast<float>(maxq)));
}

// NaN and Inf counts of a float [N, K] CPU tensor, and the first one's index.
struct NonFinite {
  int64_t nan = 0, inf = 0, first = -1;
};

NonFinite count_nonfinite(const TensorRef& w, int64_t N, int64_t K) {
  NonFinite c;
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    load_row(w, n, K, row.data());
    for (int64_t k = 0; k < K; ++k) {
      const float x = row[static_cast<size_t>(k)];
      if (std::isfinite(x)) continue;
      ++(std::isnan(x) ? c.nan : c.inf);
      if (c.first < 0) c.first = n * K + k;
    }
  }
  return c;
}

}  // namespace

GptqTensors gptq_quantize_rtn(const TensorRef& w, const GptqSpec& spec, std::string_view name) {
  constexpr const char* op = "gptq_quantize_rtn";
  LOWBIT_REQUIRE(w.ndim == 2 && w.device.is_cpu() && w.is_contiguous(), ErrorCode::invalid_argument, op,
                 ": weight must be a contiguous 2-D CPU tensor (got ", w.str(), ")");
  LOWBIT_REQUIRE(spec.bits == 2 || spec.bits == 4 || spec.bits == 8, ErrorCode::invalid_argument, op,
                 ": bits must be 2, 4 or 8 (got ", spec.bits, ")");
  // Checked here: nothing may throw inside the parallel region below.
  core::require_dtype(op, "weight", w, core::kFloatDTypes);
  const int64_t N = w.size(0), K = w.size(1);
  const int per = 32 / spec.bits;
  LOWBIT_REQUIRE(K % per == 0 && N % per == 0, ErrorCode::invalid_argument, op, ": both extents of ",
                 core::shape_str(w), " must be multiples of ", per, " to pack ", spec.bits, "-bit codes in int32");
  LOWBIT_REQUIRE(spec.group_size == -1 || spec.group_size > 0, ErrorCode::invalid_argument, op,
                 ": group_size must be -1 or positive (got ", spec.group_size, ")");
  if (const NonFinite bad = count_nonfinite(w, N, K); bad.first >= 0) {
    core::fail(ErrorCode::invalid_argument,
               core::cat(op, ": '", name, "' holds ", bad.nan + bad.inf, " non-finite values (", bad.nan, " NaN, ",
                         bad.inf, " Inf; the first at [", bad.first / K, ", ", bad.first % K, "]); the int", spec.bits,
                         " grid has no code for them: fix the weight, or keep it unquantized (--exclude)"));
  }
  const int64_t g = spec.group_size > 0 ? std::min(spec.group_size, std::max<int64_t>(K, 1)) : std::max<int64_t>(K, 1);
  const int64_t G = core::ceil_div(K, g);
  const int maxq = (1 << spec.bits) - 1;

  GptqTensors t;
  t.qweight = Tensor::empty({K / per, N}, DType::i32);
  t.qzeros = Tensor::empty({G, N / per}, DType::i32);
  t.scales = Tensor::empty({G, N}, DType::f16);
  t.g_idx = Tensor::empty({K}, DType::i32);
  auto* qweight = t.qweight.ptr<uint32_t>();
  auto* scales = t.scales.ptr<uint16_t>();
  std::vector<uint8_t> zeros(static_cast<size_t>(G * N));

  const int64_t tiles = (N + kTileRows - 1) / kTileRows;
  int64_t first_overflow = -1;  // row * G + group of the first group whose scale fp16 cannot hold
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(K));
    std::vector<uint8_t> codes(static_cast<size_t>(kTileRows * K));
#pragma omp for schedule(dynamic)
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t n0 = tile * kTileRows, rows = std::min(kTileRows, N - n0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t n = n0 + r;
        load_row(w, n, K, row.data());
        uint8_t* q = codes.data() + r * K;
        for (int64_t gi = 0; gi < G; ++gi) {
          const int64_t k0 = gi * g, k1 = std::min(K, k0 + g);
          const GroupParams p = find_params(row.data() + k0, k1 - k0, maxq, spec.symmetric, spec.v2_zeros);
          if (p.overflow) {
#pragma omp critical(lowbit_gptq_overflow)
            if (first_overflow < 0 || n * G + gi < first_overflow) first_overflow = n * G + gi;
          }
          scales[gi * N + n] = core::f32_to_f16(p.scale);
          zeros[static_cast<size_t>(gi * N + n)] = static_cast<uint8_t>(p.zero);
          for (int64_t k = k0; k < k1; ++k) q[k] = static_cast<uint8_t>(code_of(row[static_cast<size_t>(k)], p, maxq));
        }
      }
      // qweight[i, n] packs codes i*per .. i*per + per - 1 of row n.
      for (int64_t i = 0; i < K / per; ++i) {
        for (int64_t r = 0; r < rows; ++r) {
          const uint8_t* q = codes.data() + r * K + i * per;
          uint32_t word = 0;
          for (int j = 0; j < per; ++j) word |= static_cast<uint32_t>(q[j]) << (spec.bits * j);
          qweight[i * N + n0 + r] = word;
        }
      }
    }
  }
  if (first_overflow >= 0) {
    const int64_t n = first_overflow / G, k0 = first_overflow % G * g;
    core::fail(ErrorCode::invalid_argument,
               core::cat(op, ": '", name, "' row ", n, ", columns ", k0, "..", std::min(K, k0 + g) - 1,
                         ": the group's scale would exceed fp16's largest value ", kMaxHalf, " (its values span more than ",
                         kMaxHalf, " x ", maxq, "); the int", spec.bits,
                         " layout cannot hold it: keep the weight unquantized (--exclude)"));
  }
  auto* qzeros = t.qzeros.ptr<uint32_t>();
  const uint32_t offset = spec.v2_zeros ? 0u : 1u;
  for (int64_t gi = 0; gi < G; ++gi) {
    for (int64_t c = 0; c < N / per; ++c) {
      uint32_t word = 0;
      for (int j = 0; j < per; ++j) {
        const uint32_t z = zeros[static_cast<size_t>(gi * N + c * per + j)] - offset;
        word |= (z & static_cast<uint32_t>(maxq)) << (spec.bits * j);
      }
      qzeros[gi * (N / per) + c] = word;
    }
  }
  for (int64_t k = 0; k < K; ++k) t.g_idx.ptr<int32_t>()[k] = static_cast<int32_t>(k / g);
  return t;
}

Tensor gptq_dequantize(const TensorRef& qweight, const TensorRef& qzeros, const TensorRef& scales,
                       const TensorRef& g_idx, const GptqSpec& spec, DType dtype) {
  constexpr const char* op = "gptq_dequantize";
  core::require_dtype(op, "scales", scales, core::kFloatDTypes);
  LOWBIT_REQUIRE(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16, ErrorCode::unsupported_dtype, op,
                 ": out dtype must be float32, float16 or bfloat16 (got ", dtype_name(dtype), ")");
  const int per = 32 / spec.bits;
  const int64_t N = qweight.size(1), K = qweight.size(0) * per, G = scales.size(0);
  const int maxq = (1 << spec.bits) - 1;
  const auto* gi = g_idx.ptr<const int32_t>();
  for (int64_t k = 0; k < K; ++k) {
    LOWBIT_REQUIRE(gi[k] >= 0 && gi[k] < G, ErrorCode::format_error, op, ": g_idx[", k, "] = ", gi[k],
                   " is not a group of the ", G, " that scales holds");
  }
  Tensor out = Tensor::empty({N, K}, dtype);
  const TensorRef o = out.ref();
  const auto* qw = qweight.ptr<const uint32_t>();
  const auto* qz = qzeros.ptr<const uint32_t>();
  const uint32_t offset = spec.v2_zeros ? 0u : 1u;
  const int64_t tiles = (N + kTileRows - 1) / kTileRows;
#pragma omp parallel
  {
    std::vector<float> rows_out(static_cast<size_t>(kTileRows * K));
    std::vector<float> scale(static_cast<size_t>(kTileRows * G)), zero(static_cast<size_t>(kTileRows * G));
#pragma omp for schedule(dynamic)
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t n0 = tile * kTileRows, rows = std::min(kTileRows, N - n0);
      for (int64_t grp = 0; grp < G; ++grp) {
        float* s = scale.data() + grp;
        load_span(scales, grp * N + n0, rows, G, s);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t n = n0 + r;
          const uint32_t z = (qz[grp * (N / per) + n / per] >> (spec.bits * (n % per))) & static_cast<uint32_t>(maxq);
          zero[static_cast<size_t>(r * G + grp)] = static_cast<float>(z + offset);
        }
      }
      for (int64_t i = 0; i < K / per; ++i) {
        for (int64_t r = 0; r < rows; ++r) {
          const uint32_t word = qw[i * N + n0 + r];
          float* dst = rows_out.data() + r * K + i * per;
          for (int j = 0; j < per; ++j) {
            const int64_t grp = gi[i * per + j];
            const float q = static_cast<float>((word >> (spec.bits * j)) & static_cast<uint32_t>(maxq));
            dst[j] = (q - zero[static_cast<size_t>(r * G + grp)]) * scale[static_cast<size_t>(r * G + grp)];
          }
        }
      }
      for (int64_t r = 0; r < rows; ++r) store_row(o, n0 + r, K, rows_out.data() + r * K);
    }
  }
  return out;
}

}  // namespace lowbit::io::detail
