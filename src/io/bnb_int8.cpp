#include "io/bnb_int8.h"

#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/float_convert.h"

namespace lowbit::io::detail {
namespace {

// The value as bitsandbytes sees it after transformers' cast to fp16.
template <class T>
float as_f16(T v) {
  return core::f16_to_f32(core::f32_to_f16(core::to_f32(v)));
}

template <class T>
void quantize_rows(const T* w, int64_t N, int64_t K, int8_t* codes, float* scb) {
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(K));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      float absmax = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        const float v = as_f16(w[n * K + k]);
        row[static_cast<size_t>(k)] = v;
        absmax = std::fabs(v) > absmax ? std::fabs(v) : absmax;  // NaN ignored
      }
      scb[n] = absmax;
      // An all-zero row stays zero (bitsandbytes: 0 * Inf = NaN -> code 0).
      const float factor = absmax > 0.0f ? 127.0f * (1.0f / absmax) : 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        const float q = std::nearbyint(row[static_cast<size_t>(k)] * factor);
        codes[n * K + k] = q == q ? static_cast<int8_t>(std::fmin(std::fmax(q, -127.0f), 127.0f)) : int8_t{0};
      }
    }
  }
}

}  // namespace

BnbInt8 bnb_int8_quantize(const TensorRef& w) {
  constexpr const char* op = "bnb_int8_quantize";
  LOWBIT_REQUIRE(w.ndim == 2 && w.device.is_cpu() && w.is_contiguous(), ErrorCode::invalid_argument, op,
                 ": weight must be a contiguous 2-D CPU tensor (got ", w.str(), ")");
  core::require_dtype(op, "weight", w, core::kFloatDTypes);
  const int64_t N = w.size(0), K = w.size(1);
  BnbInt8 r{Tensor::empty({N, K}, DType::i8), Tensor::empty({N}, DType::f32)};
  auto* codes = r.codes.ptr<int8_t>();
  auto* scb = r.scb.ptr<float>();
  switch (w.dtype) {
    case DType::f16: quantize_rows(w.ptr<const core::Half>(), N, K, codes, scb); break;
    case DType::bf16: quantize_rows(w.ptr<const core::BFloat16>(), N, K, codes, scb); break;
    default: quantize_rows(w.ptr<const float>(), N, K, codes, scb); break;
  }
  return r;
}

}  // namespace lowbit::io::detail
