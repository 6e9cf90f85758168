// The optimizer update rules of one element, as bitsandbytes' 32-bit kernels
// apply them (the order of operations and where values are rounded to the
// parameter's dtype), shared by every backend. docs/optim.md states them.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include "core/float_convert.h"
#include "core/hd.h"
#include "lowbit/ops/optim.h"

namespace lowbit::core::optim {

// A step's constants.
struct Step {
  Optimizer rule;
  float beta1, beta2, beta3, alpha, eps, weight_decay, lr;
  float correction1;  // 1 - beta1^step
  float bias2;        // 1 - beta2^step
  float correction2;  // sqrt(1 - beta2^step)
  float step_size;    // -lr * correction2 / correction1 (adam, lamb)
  float update_scale; // the trust ratio (lamb, lars), else 1
  bool first;         // step == 1
  bool skip_zeros;
};

// From the Args of either update (32-bit or 8-bit blockwise states).
template <class Args>
Step make_step(const Args& a) {
  Step s{};
  s.rule = a.optimizer;
  s.beta1 = a.beta1, s.beta2 = a.beta2, s.beta3 = a.beta3, s.alpha = a.alpha;
  s.eps = a.eps, s.weight_decay = a.weight_decay, s.lr = a.lr;
  const float t = static_cast<float>(a.step);
  s.correction1 = 1.0f - powf(a.beta1, t);
  s.bias2 = 1.0f - powf(a.beta2, t);
  s.correction2 = sqrtf(s.bias2);
  s.step_size = -a.lr * s.correction2 / s.correction1;
  s.update_scale = 1.0f;
  s.first = a.step == 1;
  s.skip_zeros = a.skip_zeros;
  return s;
}

// The rules of two states (adam and lamb; ademamix with s3, its second first moment).
LOWBIT_HD constexpr bool two_states(Optimizer o) { return o == Optimizer::adam || o == Optimizer::lamb || o == Optimizer::ademamix; }

// The trust ratio from the update's squared norm and the parameter's norm:
// the update is scaled to max_unorm * |p| when longer (one-state rules add eps
// to the bound, as bitsandbytes' kernels do).
LOWBIT_HD float update_scale(Optimizer o, float unorm, float max_unorm, float param_norm, float eps) {
  if (!(max_unorm > 0.0f)) return 1.0f;
  const float u = sqrtf(unorm);
  const float bound = two_states(o) ? max_unorm * param_norm : max_unorm * param_norm + eps;
  return u > bound ? bound / u : 1.0f;
}

// v in the parameter's dtype. On the device through the hardware's
// conversion, which equals core's but for NaN payloads (the CUDA selftest's
// f32 -> f16 / bf16 checks over every input): NaN keeps core's.
template <class T>
LOWBIT_HD T to_param(float v) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, BFloat16>) {
    return v == v ? BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(v))} : from_f32<T>(v);
  } else if constexpr (std::is_same_v<T, Half>) {
    return v == v ? Half{__half_as_ushort(__float2half_rn(v))} : from_f32<T>(v);
  }
#endif
  return from_f32<T>(v);
}

template <class T>
LOWBIT_HD float rounded(float v) {
  return to_f32(to_param<T>(v));
}

// g as the update reads it: times gnorm_scale, rounded to the gradient's dtype.
template <class T>
LOWBIT_HD float scaled_grad(T g, float gnorm_scale) {
  return rounded<T>(gnorm_scale * to_f32(g));
}

LOWBIT_HD float sign(float v) { return static_cast<float>((0.0f < v) - (v < 0.0f)); }

// One element of a two-state rule: p, s1, s2 (and s3 for ademamix) updated.
template <class T>
LOWBIT_HD void update_two(const Step& s, float g, T& p, float& s1, float& s2, float& s3) {
  float pv = to_f32(p);
  if (s.rule == Optimizer::ademamix) {
    s1 = s1 * s.beta1 + (1.0f - s.beta1) * g;
    s3 = s3 * s.beta3 + (1.0f - s.beta3) * g;
    s2 = s2 * s.beta2 + (1.0f - s.beta2) * g * g;
    pv = rounded<T>(pv - s.lr * ((s1 / s.correction1 + s.alpha * s3) / (sqrtf(s2) / s.correction2 + s.eps)));
    if (s.weight_decay > 0.0f) pv = rounded<T>(pv * (1.0f - s.lr * s.weight_decay));
    p = to_param<T>(pv);
    return;
  }
  if (s.skip_zeros && g == 0.0f) return;
  s1 = s1 * s.beta1 + (1.0f - s.beta1) * g;
  s2 = s2 * s.beta2 + (1.0f - s.beta2) * (g * g);
  pv = rounded<T>(pv + s.update_scale * s.step_size * (s1 / (sqrtf(s2) + s.eps * s.correction2)));
  if (s.weight_decay > 0.0f) pv = rounded<T>(pv * (1.0f - s.lr * s.weight_decay));
  p = to_param<T>(pv);
}

// One element of a one-state rule (momentum, lars, rmsprop, adagrad, lion):
// weight decay joins the gradient (rounded to its dtype), but for lion,
// which shrinks p by it.
template <class T>
LOWBIT_HD void update_one(const Step& s, float g, T& p, float& s1) {
  float pv = to_f32(p);
  if (s.weight_decay > 0.0f && s.rule != Optimizer::lion) g = rounded<T>(g + pv * s.weight_decay);
  if (s.skip_zeros && g == 0.0f) return;
  switch (s.rule) {
    case Optimizer::momentum:
    case Optimizer::lars:
      s1 = s.first ? g : s1 * s.beta1 + g;
      pv = rounded<T>(pv + s.update_scale * (-s.lr * s1));
      break;
    case Optimizer::lion:
      if (s.weight_decay > 0.0f) pv = rounded<T>(pv * (1.0f - s.lr * s.weight_decay));
      pv = rounded<T>(pv - s.update_scale * (s.lr * sign(s1 * s.beta1 + (1.0f - s.beta1) * g)));
      s1 = s1 * s.beta2 + (1.0f - s.beta2) * g;
      break;
    case Optimizer::rmsprop:
      s1 = s1 * s.beta1 + (1.0f - s.beta1) * g * g;
      pv = rounded<T>(pv - s.update_scale * (s.lr * (g / (sqrtf(s1) + s.eps))));
      break;
    case Optimizer::adagrad:
      s1 = s1 + g * g;
      pv = rounded<T>(pv - s.lr * (g / (sqrtf(s1) + s.eps)));
      break;
    default:
      break;
  }
  p = to_param<T>(pv);
}

// One element's term of the update's squared norm (lamb, lars; the other
// rules when max_unorm > 0), from the states before the step, as
// bitsandbytes' precondition kernels: no weight decay, no skip_zeros;
// lion's term is its new state itself, unsquared; ademamix has none.
LOWBIT_HD float unorm_term(const Step& s, float g, float s1, float s2) {
  switch (s.rule) {
    case Optimizer::adam:
    case Optimizer::lamb: {
      const float m = (s1 * s.beta1 + (1.0f - s.beta1) * g) * (1.0f / s.correction1);
      const float v = (s2 * s.beta2 + (1.0f - s.beta2) * (g * g)) * (1.0f / s.bias2);
      const float u = m / (sqrtf(v) + s.eps);
      return u * u;
    }
    case Optimizer::momentum:
    case Optimizer::lars: {
      const float m = s.first ? g : s1 * s.beta1 + g;
      return m * m;
    }
    case Optimizer::lion:
      return s1 * s.beta2 + (1.0f - s.beta2) * g;
    case Optimizer::rmsprop: {
      const float u = g / (sqrtf(s1 * s.beta1 + (1.0f - s.beta1) * g * g) + s.eps);
      return u * u;
    }
    case Optimizer::adagrad: {
      const float u = g / (sqrtf(s1 + g * g) + s.eps);
      return u * u;
    }
    default:
      return 0.0f;
  }
}

}  // namespace lowbit::core::optim
