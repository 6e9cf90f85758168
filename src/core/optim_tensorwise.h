// The tensor-wise 8-bit optimizer's arithmetic, shared by every backend: one
// element's step on its dequantized states, as bitsandbytes'
// kOptimizerStatic8bit{1,2}State kernels compute it, and its term of the
// update's squared norm. docs/optim.md, "8-bit tensor-wise states", states
// them and where they depart from those kernels.
//
// A step is two passes over the tensor. The first runs step_* on copies and
// keeps the new states' max |s| (new_max) and the norm terms; the second runs
// step_* again with the trust ratio and stores each state as
// optim::state_code of s / new_max (core/optim_blockwise.h): both passes
// compute the same new states, so new_max bounds every stored one.
#pragma once

#include <cstdint>

#include "core/hd.h"
#include "core/optim_blockwise.h"
#include "core/optim_rules.h"

namespace lowbit::core::optim {

// The step's constants from OptimizerUpdate8bitArgs (no beta3, alpha or skip_zeros).
template <class Args>
Step make_tensorwise_step(const Args& a) {
  struct {
    Optimizer optimizer;
    float beta1, beta2, beta3, alpha, eps, weight_decay, lr;
    int64_t step;
    bool skip_zeros;
  } v{a.optimizer, a.beta1, a.beta2, 0.0f, 0.0f, a.eps, a.weight_decay, a.lr, a.step, false};
  return make_step(v);
}

// adam, lamb: g scaled unrounded, no guard for Inf / NaN gradients, decoupled
// weight decay.
template <class T>
LOWBIT_HD void tensorwise_two(const Step& s, float gnorm_scale, T g_in, T& p, float& s1, float& s2) {
  const float g = to_f32(g_in) * gnorm_scale;
  s1 = s1 * s.beta1 + (1.0f - s.beta1) * g;
  s2 = s2 * s.beta2 + (1.0f - s.beta2) * g * g;
  float pv = rounded<T>(to_f32(p) + s.update_scale * s.step_size * (s1 / (sqrtf(s2) + s.correction2 * s.eps)));
  if (s.weight_decay > 0.0f) pv = rounded<T>(pv * (1.0f - s.lr * s.weight_decay));
  p = to_param<T>(pv);
}

// momentum, lars, rmsprop, lion: weight decay joins the scaled gradient
// unrounded (lion: shrinks p); rmsprop divides that gradient.
template <class T>
LOWBIT_HD void tensorwise_one(const Step& s, float gnorm_scale, T g_in, T& p, float& s1) {
  float g = to_f32(g_in) * gnorm_scale;
  float pv = to_f32(p);
  if (s.weight_decay > 0.0f) {
    if (s.rule == Optimizer::lion) {
      pv = rounded<T>(pv * (1.0f - s.lr * s.weight_decay));
    } else {
      g = g + pv * s.weight_decay;
    }
  }
  switch (s.rule) {
    case Optimizer::momentum:
    case Optimizer::lars:
      s1 = s.first ? g : s1 * s.beta1 + g;
      pv = rounded<T>(pv + -s.lr * s.update_scale * s1);
      break;
    case Optimizer::lion:
      pv = rounded<T>(pv - s.lr * sign(s1 * s.beta1 + (1.0f - s.beta1) * g));
      s1 = s1 * s.beta2 + (1.0f - s.beta2) * g;
      break;
    case Optimizer::rmsprop:
      s1 = s1 * s.beta1 + (1.0f - s.beta1) * (g * g);
      pv = rounded<T>(pv - s.lr * (g / (sqrtf(s1) + s.eps)));
      break;
    default: break;
  }
  p = to_param<T>(pv);
}

// An element's term of the update's squared norm, from its new states:
// adam / lamb the bias-corrected update, momentum / lars the new momentum
// (the rules whose kernels have a trust ratio); 0 for the others.
LOWBIT_HD float tensorwise_unorm_term(const Step& s, float s1, float s2) {
  switch (s.rule) {
    case Optimizer::adam:
    case Optimizer::lamb: {
      const float m = s1 * (1.0f / s.correction1);
      const float v = s2 * (1.0f / s.bias2);
      const float u = m / (sqrtf(v) + s.eps);
      return u * u;
    }
    case Optimizer::momentum:
    case Optimizer::lars: return s1 * s1;
    default: return 0.0f;
  }
}

// The trust ratio: the update scaled to max_unorm * |p| when longer (no eps
// in the bound, as the tensor-wise kernels have it).
LOWBIT_HD float tensorwise_update_scale(float unorm, float max_unorm, float param_norm) {
  if (!(max_unorm > 0.0f)) return 1.0f;
  const float u = sqrtf(unorm);
  const float bound = max_unorm * param_norm;
  return u > bound ? bound / u : 1.0f;
}

}  // namespace lowbit::core::optim
