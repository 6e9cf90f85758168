#include "gemm/gemm_cases.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/float_convert.h"
#include "core/tables.h"
#include "core/weight_format.h"
#include "cpu/gemm/tiles.h"
#if defined(LOWBIT_WITH_CUDA)
#include "cuda/gemm/ops.h"
#endif

namespace lowbit::test {
namespace {

// Integer range of an integer W type, by the test's own reading of docs/gemm.md.
bool integer_range(WeightType t, int* lo, int* hi) {
  switch (t) {
    case WeightType::int8: *lo = -128, *hi = 127; return true;
    case WeightType::int4: *lo = -8, *hi = 7; return true;
    case WeightType::int2: *lo = -2, *hi = 1; return true;
    case WeightType::int1: *lo = -1, *hi = 1; return true;
    case WeightType::uint8: *lo = 0, *hi = 255; return true;
    case WeightType::uint4: *lo = 0, *hi = 15; return true;
    case WeightType::uint2: *lo = 0, *hi = 3; return true;
    case WeightType::uint1: *lo = 0, *hi = 1; return true;
    default: return false;
  }
}

int random_int(WeightType t) {
  int lo = 0, hi = 0;
  integer_range(t, &lo, &hi);
  if (t == WeightType::int1) return (rng()() & 1) ? 1 : -1;
  return std::uniform_int_distribution<int>(lo, hi)(rng());
}

float largest_value(WeightType t) {
  int lo = 0, hi = 0;
  if (integer_range(t, &lo, &hi)) return static_cast<float>(std::max(-lo, hi));
  switch (t) {
    case WeightType::fp4_e2m1: return 6.0f;
    case WeightType::fp8_e4m3: return 448.0f;
    default: return 1.0f;  // nf4, fp4, and halves drawn as N(0, 1)
  }
}

void store(Tensor& t, int64_t i, float v) {
  switch (t.dtype()) {
    case DType::f32: t.ptr<float>()[i] = v; break;
    case DType::f16: t.ptr<uint16_t>()[i] = core::f32_to_f16(v); break;
    default: t.ptr<uint16_t>()[i] = core::f32_to_bf16(v); break;
  }
}
void negate(Tensor& t, int64_t i) {
  if (t.dtype() == DType::f32) {
    t.ptr<float>()[i] = -t.ptr<float>()[i];
  } else {
    t.ptr<uint16_t>()[i] ^= 0x8000u;  // the sign bit of f16 and bf16
  }
}

Tensor floats_tensor(std::vector<int64_t> shape, DType dtype, float lo, float hi) {
  Tensor t = Tensor::empty(Shape(shape), dtype);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) store(t, i, u(rng()));
  return t;
}

}  // namespace

QuantizedWeight random_weight(const MatmulConfig& c, DType scale_dtype, bool with_perm) {
  QuantizedWeight w;
  w.config = c;
  const int64_t N = c.N, K = c.K, G = c.groups();
  const WeightType t = c.W_dtype;
  int lo = 0, hi = 0;
  if (integer_range(t, &lo, &hi)) {
    w.weight = Tensor::empty({N, K}, lo < 0 ? DType::i8 : DType::u8);
    for (int64_t i = 0; i < N * K; ++i) {
      const int v = random_int(t);
      if (lo < 0) {
        w.weight.ptr<int8_t>()[i] = static_cast<int8_t>(v);
      } else {
        w.weight.ptr<uint8_t>()[i] = static_cast<uint8_t>(v);
      }
    }
  } else if (t == WeightType::f16 || t == WeightType::bf16) {
    w.weight = random_floats({N, K}, t == WeightType::f16 ? DType::f16 : DType::bf16, 0.5f);
  } else {
    const bool fp8 = t == WeightType::fp8_e4m3;
    w.weight = Tensor::empty({N, K}, fp8 && (rng()() & 1) ? DType::f8_e4m3 : DType::u8);
    for (int64_t i = 0; i < N * K; ++i) {
      uint8_t b = static_cast<uint8_t>(rng()() & (fp8 ? 0xffu : 0x0fu));
      if (fp8 && (b & 0x7f) == 0x7f) b = 0x3c;  // no NaN
      w.weight.ptr<uint8_t>()[i] = b;
    }
  }
  const float top = largest_value(t);
  if (c.with_scaling) {
    // Scales of both signs keep weights O(1): |w| up to ~1.5.
    w.scale = floats_tensor({N, G}, scale_dtype, 0.25f / top, 1.5f / top);
    for (int64_t i = 0; i < N * G; i += 3) negate(w.scale, i);
  }
  if (c.with_zeros && c.zeros_mode == ZerosMode::quantized) {
    w.zeros = Tensor::empty({N, G}, lo < 0 ? DType::i8 : DType::i32);
    for (int64_t i = 0; i < N * G; ++i) {
      const int z = random_int(t);
      if (lo < 0) {
        w.zeros.ptr<int8_t>()[i] = static_cast<int8_t>(z);
      } else {
        w.zeros.ptr<int32_t>()[i] = z;
      }
    }
  } else if (c.with_zeros) {
    // original: a zero point on the values' scale; rescale: on the weights'.
    const bool rescale = c.zeros_mode == ZerosMode::rescale;
    w.zeros = floats_tensor({N, G}, scale_dtype, rescale ? -1.0f : static_cast<float>(lo),
                            rescale ? 1.0f : static_cast<float>(hi));
  }
  if (c.with_bias) w.bias = random_floats({N}, (rng()() & 1) ? DType::f32 : DType::bf16, 1.0f);
  if (with_perm) {
    std::vector<int32_t> p(static_cast<size_t>(K));
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), rng());
    w.perm = Tensor::empty({K}, DType::i32);
    std::copy(p.begin(), p.end(), w.perm.ptr<int32_t>());
  }
  return w;
}

float expected_value(WeightType t, const Tensor& weight, int64_t i) {
  switch (t) {
    case WeightType::int8:
    case WeightType::int4:
    case WeightType::int2:
    case WeightType::int1: return weight.ptr<const int8_t>()[i];
    case WeightType::uint8:
    case WeightType::uint4:
    case WeightType::uint2:
    case WeightType::uint1: return weight.ptr<const uint8_t>()[i];
    case WeightType::nf4: return core::kNf4Table[weight.ptr<const uint8_t>()[i]];
    case WeightType::fp4: return core::kFp4Table[weight.ptr<const uint8_t>()[i]];
    case WeightType::fp4_e2m1: return core::kFp4E2m1Table[weight.ptr<const uint8_t>()[i]];
    case WeightType::fp8_e4m3: return core::e4m3_to_f32(weight.ptr<const uint8_t>()[i]);
    case WeightType::f16: return core::f16_to_f32(weight.ptr<const uint16_t>()[i]);
    case WeightType::bf16: return core::bf16_to_f32(weight.ptr<const uint16_t>()[i]);
  }
  return NAN;
}

std::vector<float> expected_dequant(const QuantizedWeight& w) {
  const MatmulConfig& c = w.config;
  const int64_t N = c.N, K = c.K, G = c.groups(), gl = c.group_length();
  const std::vector<float> s = c.with_scaling ? to_floats(w.scale) : std::vector<float>();
  const bool qz = c.with_zeros && c.zeros_mode == ZerosMode::quantized;
  const std::vector<float> z = c.with_zeros && !qz ? to_floats(w.zeros) : std::vector<float>();
  std::vector<float> out(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t gi = n * G + k / gl;
      const float v = expected_value(c.W_dtype, w.weight, n * K + k);
      float x = v;
      if (qz) {
        const int64_t zi = w.zeros.dtype() == DType::i8   ? w.zeros.ptr<const int8_t>()[gi]
                           : w.zeros.dtype() == DType::u8 ? w.zeros.ptr<const uint8_t>()[gi]
                                                          : w.zeros.ptr<const int32_t>()[gi];
        x = static_cast<float>(static_cast<int64_t>(v) - zi) * s[static_cast<size_t>(gi)];  // GPTQ's (q - z) * s
      } else if (c.with_zeros && c.zeros_mode == ZerosMode::original) {
        x = (v - z[static_cast<size_t>(gi)]) * s[static_cast<size_t>(gi)];
      } else if (c.with_zeros) {
        x = v * s[static_cast<size_t>(gi)] - z[static_cast<size_t>(gi)];
      } else if (c.with_scaling) {
        x = v * s[static_cast<size_t>(gi)];
      }
      const int64_t col = w.perm.defined() ? w.perm.ptr<const int32_t>()[k] : k;
      out[static_cast<size_t>(n * K + col)] = x;
    }
  }
  return out;
}

Oracle matmul_oracle(const Tensor& A, const std::vector<float>& W, int64_t N, int64_t K,
                     const std::vector<float>& bias) {
  const std::vector<float> a = to_floats(A);
  const int64_t M = static_cast<int64_t>(a.size()) / K;
  Oracle o;
  o.value.resize(static_cast<size_t>(M * N));
  o.magnitude.resize(static_cast<size_t>(M * N));
  o.a_magnitude.resize(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double sum = bias.empty() ? 0.0 : bias[static_cast<size_t>(n)];
      double mag = std::fabs(sum), amag = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double x = a[static_cast<size_t>(m * K + k)];
        const double t = x * W[static_cast<size_t>(n * K + k)];
        sum += t;
        mag += std::fabs(t);
        amag += std::fabs(x);
      }
      o.value[static_cast<size_t>(m * N + n)] = sum;
      o.magnitude[static_cast<size_t>(m * N + n)] = mag;
      o.a_magnitude[static_cast<size_t>(m * N + n)] = amag;
    }
  }
  return o;
}

CloseCase<MatmulArgs> matmul_case(const std::string& name, const QuantizedWeight& w, const Tensor& A,
                                  const std::vector<float>& dequantized) {
  const MatmulConfig& c = w.config;
  CloseCase<MatmulArgs> cc;
  cc.name = name;
  std::vector<int64_t> shape;
  for (int d = 0; d + 1 < A.ndim(); ++d) shape.push_back(A.size(d));
  shape.push_back(c.N);
  cc.output = {shape, c.out_dtype};
  cc.make = [w, A](Device device, const TensorRef& out, std::vector<Tensor>& keep) {
    const Matmul mm(w.config, device);
    const PackedWeight packed = mm.transform_weight(w.weight, w.scale, w.zeros, w.bias, w.perm);
    for (const Tensor& t : {packed.qweight, packed.scale, packed.zeros, packed.bias, packed.perm}) keep.push_back(t);
    keep.push_back(device.is_cpu() ? A : A.to(device));
    return mm.args(keep.back(), packed.ref(), out);
  };
  cc.oracle = matmul_oracle(A, dequantized.empty() ? expected_dequant(w) : dequantized, c.N, c.K,
                            c.with_bias ? to_floats(w.bias) : std::vector<float>());
  cc.tolerance = [c](DeviceType d, const std::string& impl) {
    Tolerance t = matmul_tolerance(c.A_dtype, c.out_dtype, c.accum_dtype, c.K, d);
    // The CPU fast path on bf16 A multiplies weights rounded to bf16: the few-rows kernel the 4-bit table, the
    // large-M path (oneDNN) every dequantized weight (docs/gemm.md).
    if (d == DeviceType::cpu && impl == "cpu" && c.A_dtype == DType::bf16) t.terms += unit_roundoff(DType::bf16);
    return t;
  };
  return cc;
}

std::string describe(const MatmulConfig& c) {
  std::string s = std::string(weight_type_name(c.W_dtype)) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K);
  if (c.with_scaling) s += " g=" + std::to_string(c.group_size);
  if (c.with_zeros) s += std::string(" zeros=") + std::string(zeros_mode_name(c.zeros_mode));
  s += std::string(" A=") + std::string(dtype_name(c.A_dtype)) + " out=" + std::string(dtype_name(c.out_dtype));
  if (c.with_bias) s += " bias";
  return s;
}

}  // namespace lowbit::test
