// optimizer_update_32bit on the CPU: the rules of core/optim_rules.h over the
// elements (OpenMP for large tensors), the update's squared norm and the
// parameter's norm summed in float64 first where the trust ratio needs them.
// adam and lamb on fp32 parameters run a span loop each target clone
// vectorizes (the file is built without errno for sqrtf, which then vectorizes).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/float_convert.h"
#include "core/optim_rules.h"
#include "cpu/optim/impls.h"
#include "cpu/quant/elementwise.h"
#include "cpu/simd_clones.h"

namespace lowbit::core::cpu {
namespace {

constexpr int64_t kParallelFrom = 1 << 15;  // elements; below, threads cost more than they save
constexpr int64_t kSpan = 1 << 14;          // elements a span loop takes at once (an OpenMP iteration)

// optim::update_two for adam and lamb on fp32 parameters, over a span: the
// same operations in the same order (weight decay a multiplication by 1 when
// off, skip_zeros a select), branch-free so every clone vectorizes; equal to
// update_two bit for bit.
LOWBIT_SIMD_CLONES void adam_span_f32(
    int64_t n, const float* g, float* p, float* s1, float* s2, float gnorm_scale, const optim::Step& s) {
  const float b1 = s.beta1, nb1 = 1.0f - s.beta1, b2 = s.beta2, nb2 = 1.0f - s.beta2;
  const float scale = s.update_scale * s.step_size, eps = s.eps * s.correction2;
  const float decay = s.weight_decay > 0.0f ? 1.0f - s.lr * s.weight_decay : 1.0f;
  const bool skip_zeros = s.skip_zeros;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = gnorm_scale * g[i];
    const float m = s1[i] * b1 + nb1 * gi;
    const float v = s2[i] * b2 + nb2 * (gi * gi);
    const float pv = (p[i] + scale * (m / (sqrtf(v) + eps))) * decay;
    const bool keep = skip_zeros && gi == 0.0f;
    s1[i] = keep ? s1[i] : m;
    s2[i] = keep ? s2[i] : v;
    p[i] = keep ? p[i] : pv;
  }
}

template <class T>
void update(const OptimizerUpdate32bitArgs& a) {
  const int64_t n = a.g.numel();
  const T* g = static_cast<const T*>(a.g.data);
  T* p = static_cast<T*>(a.p.data);
  float* s1 = static_cast<float*>(a.state1.data);
  float* s2 = a.state2.present() ? static_cast<float*>(a.state2.data) : nullptr;
  optim::Step step = optim::make_step(a);
  const bool trust = a.max_unorm > 0.0f && a.optimizer != Optimizer::ademamix;
  if (a.max_unorm > 0.0f) {
    double unorm = 0.0, pnorm = 0.0;
#pragma omp parallel for reduction(+ : unorm, pnorm) if (n >= kParallelFrom)
    for (int64_t i = 0; i < n; ++i) {
      const float gi = optim::scaled_grad(g[i], a.gnorm_scale);
      unorm += optim::unorm_term(step, gi, s1[i], s2 ? s2[i] : 0.0f);
      const double pi = to_f32(p[i]);
      pnorm += pi * pi;
    }
    *static_cast<float*>(a.unorm_vec.data) = static_cast<float>(unorm);
    if (trust) {
      step.update_scale = optim::update_scale(a.optimizer, static_cast<float>(unorm), a.max_unorm,
                                              static_cast<float>(std::sqrt(pnorm)), a.eps);
    }
  }
  if constexpr (std::is_same_v<T, float>) {
    if (a.optimizer == Optimizer::adam || a.optimizer == Optimizer::lamb) {
      const int64_t spans = (n + kSpan - 1) / kSpan;
#pragma omp parallel for if (n >= kParallelFrom)
      for (int64_t k = 0; k < spans; ++k) {
        const int64_t i = k * kSpan;
        adam_span_f32(std::min(kSpan, n - i), g + i, p + i, s1 + i, s2 + i, a.gnorm_scale, step);
      }
      return;
    }
  }
  if (optim::two_states(a.optimizer)) {
    float* s3 = a.optimizer == Optimizer::ademamix ? s1 + n : nullptr;
#pragma omp parallel for if (n >= kParallelFrom)
    for (int64_t i = 0; i < n; ++i) {
      float unused = 0.0f;
      optim::update_two(step, optim::scaled_grad(g[i], a.gnorm_scale), p[i], s1[i], s2[i], s3 ? s3[i] : unused);
    }
  } else {
#pragma omp parallel for if (n >= kParallelFrom)
    for (int64_t i = 0; i < n; ++i) optim::update_one(step, optim::scaled_grad(g[i], a.gnorm_scale), p[i], s1[i]);
  }
}

}  // namespace

void optimizer_update_32bit(const OptimizerUpdate32bitArgs& a, void* /*workspace*/, Stream /*stream*/) {
  const OptimizerUpdate32bitArgs b = with_clip_scale(a);
  with_float_type(b.g.dtype, OptimizerUpdate32bitArgs::kName, [&](auto t) { update<decltype(t)>(b); });
}

}  // namespace lowbit::core::cpu
