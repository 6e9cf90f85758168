// flash_attention on the CPU: the reference (lowbit/ops/attention.h). Per
// (batch, head, query): the scores in float64, their maximum, the exponentials'
// sum, the weighted sum of v in float64, each output rounded once (to float32,
// then to the dtype); the log-sum-exp in float64, rounded to float32.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/float_convert.h"
#include "core/registry.h"
#include "cpu/quant/elementwise.h"
#include "cpu/quant/parallel.h"
#include "cpu/register.h"
#include "lowbit/ops/attention.h"

namespace lowbit::core::cpu {
namespace {

template <class T>
void reference(const FlashAttentionArgs& a) {
  const bool t = a.k_layout == KLayout::bdhs;
  const int64_t B = a.q.size(0), Sq = a.q.size(1), H = a.q.size(2), D = a.q.size(3);
  const int64_t Skv = t ? a.k.size(3) : a.k.size(1), Hkv = a.k.size(2), Dv = a.v.size(3);
  const int64_t group = H / Hkv;
  const double scale = a.scale != 0.0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(D));
  const T* q = a.q.ptr<const T>();
  const T* k = a.k.ptr<const T>();
  const T* v = a.v.ptr<const T>();
  T* out = a.out.ptr<T>();
  float* lse = a.lse.present() ? a.lse.ptr<float>() : nullptr;
  // k[b, j, g, d] (bshd) or k[b, d, g, j] (bdhs).
  const auto k_at = [&](int64_t b, int64_t j, int64_t g, int64_t d) {
    return t ? k[((b * D + d) * Hkv + g) * Skv + j] : k[((b * Skv + j) * Hkv + g) * D + d];
  };
  parallel_for(B * H * Sq, B * H * Sq * Skv * (D + Dv), [&](int64_t task) {
    const int64_t i = task % Sq, h = task / Sq % H, b = task / Sq / H, g = h / group;
    // Bottom-right causal alignment: query i sees keys j <= i + Skv - Sq.
    const int64_t last = a.causal ? std::min(Skv - 1, i + Skv - Sq) : Skv - 1;
    const T* qi = q + ((b * Sq + i) * H + h) * D;
    T* oi = out + ((b * Sq + i) * H + h) * Dv;
    std::vector<double> s(static_cast<size_t>(std::max<int64_t>(last + 1, 0)));
    double peak = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j <= last; ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(to_f32(qi[d])) * to_f32(k_at(b, j, g, d));
      s[static_cast<size_t>(j)] = scale * dot;
      peak = std::max(peak, s[static_cast<size_t>(j)]);
    }
    if (last < 0) {  // no key: zeros, and a log-sum-exp of -inf
      for (int64_t e = 0; e < Dv; ++e) oi[e] = from_f32<T>(0.0f);
      if (lse) lse[(b * H + h) * Sq + i] = -std::numeric_limits<float>::infinity();
      return;
    }
    double sum = 0.0;
    for (int64_t j = 0; j <= last; ++j) sum += std::exp(s[static_cast<size_t>(j)] - peak);
    std::vector<double> acc(static_cast<size_t>(Dv), 0.0);
    for (int64_t j = 0; j <= last; ++j) {
      const double p = std::exp(s[static_cast<size_t>(j)] - peak) / sum;
      const T* vj = v + ((b * Skv + j) * Hkv + g) * Dv;
      for (int64_t e = 0; e < Dv; ++e) acc[static_cast<size_t>(e)] += p * to_f32(vj[e]);
    }
    for (int64_t e = 0; e < Dv; ++e) oi[e] = from_f32<T>(static_cast<float>(acc[static_cast<size_t>(e)]));
    if (lse) lse[(b * H + h) * Sq + i] = static_cast<float>(peak + std::log(sum));
  });
}

void flash_attention_reference(const FlashAttentionArgs& a, void* /*workspace*/, Stream /*stream*/) {
  if (a.out.numel() == 0) return;
  with_float_type(a.q.dtype, FlashAttentionArgs::kName, [&](auto type) { reference<decltype(type)>(a); });
}

}  // namespace

void register_attention_ops() {
  OpRegistry<FlashAttentionArgs>::add({"cpu-reference", DeviceType::cpu, 0, flash_attention_reference});
}

}  // namespace lowbit::core::cpu
