// The CPU reference of the matmul ops — the oracle the other backends are
// tested against: every weight element dequantized to fp32 through the one
// definition of its format (src/core/weight_format.h), then dot products
// accumulated in float64, rounded once to the output dtype.
#include "core/check.h"
#include "core/quant_math.h"
#include "core/weight_format.h"
#include "cpu/gemm/impls.h"
#include "cpu/quant/elementwise.h"

namespace lowbit::core::cpu {
namespace {

int64_t rows_of(const TensorRef& A) { return A.numel() / A.size(-1); }

// out[m, n] = Σ_k A[m, col(k)] · W[n, k] (+ bias[n]), in double.
template <class Col>
void dot_products(const TensorRef& A, const float* W, int64_t N, int64_t K, const TensorRef& bias, Col col,
                  const TensorRef& out, const char* op) {
  const int64_t M = rows_of(A);
  const std::vector<double> b = [&] {
    std::vector<double> v(static_cast<size_t>(N), 0.0);
    if (!bias.present()) return v;
    with_float_type(bias.dtype, op, [&](auto t) {
      using B = decltype(t);
      for (int64_t n = 0; n < N; ++n) v[static_cast<size_t>(n)] = to_f32(bias.ptr<const B>()[n]);
    });
    return v;
  }();
  with_float_type(A.dtype, op, [&](auto ta) {
    using TA = decltype(ta);
    with_float_type(out.dtype, op, [&](auto to) {
      using TO = decltype(to);
      const TA* a = A.ptr<const TA>();
      TO* o = out.ptr<TO>();
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
          double acc = 0.0;
          for (int64_t k = 0; k < K; ++k) {
            acc += static_cast<double>(to_f32(a[m * K + col(k)])) * static_cast<double>(W[n * K + k]);
          }
          o[m * N + n] = from_f32<TO>(static_cast<float>(acc + b[static_cast<size_t>(n)]));
        }
      }
    });
  });
}

}  // namespace

size_t matmul_reference_workspace(const MatmulArgs& a) {
  return static_cast<size_t>(a.weight.format.N * a.weight.format.K) * sizeof(float);
}

void matmul_reference(const MatmulArgs& a, void* workspace, Stream) {
  const PackedWeightRef& w = a.weight;
  const WeightFormat& f = w.format;
  LOWBIT_REQUIRE(f.layout == WeightLayout::rows, ErrorCode::invalid_argument, a.kName,
                 ": the cpu kernels read the rows layout (got layout ", weight_layout_name(f.layout), ")");
  const int bits = weight_bits(f.type);
  const int64_t N = f.N, K = f.K, G = f.groups(), row_bytes = w.qweight.size(1);
  const int64_t zbytes = packed_zeros_words(N, bits) * 4;
  const bool qzeros = f.with_zeros && f.zeros_mode == ZerosMode::quantized;
  const float* table = weight_table16(f.type);
  const DequantRule rule = dequant_rule(f);
  auto* W = static_cast<float*>(workspace);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t g = k / f.group_length();
      const float v =
          weight_code_value(f.type, stream_read(w.qweight.ptr<const uint8_t>() + n * row_bytes, k, bits), table);
      const float s = f.with_scaling ? w.scale.ptr<const float>()[n * G + g] : 1.0f;
      float z = 0.0f;
      if (qzeros) {
        z = weight_code_value(f.type, stream_read(w.zeros.ptr<const uint8_t>() + g * zbytes, n, bits), table);
      } else if (f.with_zeros) {
        z = w.zeros.ptr<const float>()[n * G + g];
      }
      W[n * K + k] = dequant(rule, v, s, z);
    }
  }
  const int32_t* perm = w.perm.present() ? w.perm.ptr<const int32_t>() : nullptr;
  for (int64_t k = 0; perm && k < K; ++k) {
    LOWBIT_REQUIRE(perm[k] >= 0 && perm[k] < K, ErrorCode::invalid_argument, a.kName,
                   ": weight.perm values must be in [0, ", K, ") (got ", perm[k], " at [", k, "])");
  }
  dot_products(
      a.A, W, N, K, w.bias, [perm](int64_t k) { return perm ? static_cast<int64_t>(perm[k]) : k; }, a.out, a.kName);
}

size_t matmul_4bit_reference_workspace(const Matmul4bitArgs& a) {
  return static_cast<size_t>(a.N * a.A.size(-1)) * sizeof(float);
}

void matmul_4bit_reference(const Matmul4bitArgs& a, void* workspace, Stream) {
  const int64_t N = a.N, K = a.A.size(-1);
  const float* table = a.type == Quant4Type::nf4 ? kNf4Table : kFp4Table;
  const uint8_t* packed = a.packed.ptr<const uint8_t>();
  auto absmax = [&](int64_t b) {
    if (!a.nested.present()) return a.absmax.ptr<const float>()[b];
    return nested_absmax_decode(a.nested.code.ptr<const float>()[a.absmax.ptr<const uint8_t>()[b]],
                                a.nested.absmax.ptr<const float>()[b / a.nested.blocksize],
                                a.nested.offset.ptr<const float>()[0]);
  };
  auto* W = static_cast<float*>(workspace);
  for (int64_t e = 0; e < N * K; ++e) {
    const uint32_t c = (e % 2 == 0) ? packed[e / 2] >> 4 : packed[e / 2] & 0xfu;
    W[e] = table[c] * absmax(e / a.blocksize);  // dequantize_4bit's value, bit for bit
  }
  dot_products(
      a.A, W, N, K, a.bias, [](int64_t k) { return k; }, a.out, a.kName);
}

}  // namespace lowbit::core::cpu
