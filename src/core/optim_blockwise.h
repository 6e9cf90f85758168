// The 8-bit blockwise optimizer's arithmetic, shared by every backend: one
// element's step on its dequantized states, as bitsandbytes'
// kOptimizerStatic8bit{1,2}StateBlockwise kernels compute it (which differ
// from its 32-bit kernels in where the gradient is scaled, rounded and
// decayed), and the code a new state is stored as. docs/optim.md states them.
//
// A block's step: dequantize its states (code * absmax), step every element
// (step_rule: p and the states), take the block's new absmax
// (max |state| over its elements), then store each state as state_code of
// state * absmax_reciprocal(absmax).
#pragma once

#include <cstdint>

#include "core/check.h"
#include "core/hd.h"
#include "core/optim_rules.h"
#include "core/tables.h"

namespace lowbit::core::optim {

// A rule as a type, for the kernels compiled per rule.
template <Optimizer R>
struct RuleTag {
  static constexpr Optimizer kRule = R;
};

LOWBIT_HD bool is_finite(float v) { return (float_bits(v) & 0x7f800000u) != 0x7f800000u; }

// One element's step under rule R, branch-free (the kernels unroll it over a
// thread's elements). Two-state rules (adam, and ademamix with s3, its second
// first moment): a gradient that is not finite zeroes the element's states
// and leaves p; gnorm_scale applies unrounded; no skip_zeros. One-state rules (momentum, rmsprop, lion,
// adagrad): skip_zeros reads the gradient as stored and leaves p and s1;
// weight decay joins the scaled gradient unrounded (lion: shrinks p);
// rmsprop and adagrad divide the stored gradient, not the scaled and decayed
// one they accumulate; lion's step lr * sign is rounded to p's dtype first.
template <Optimizer R, class T>
LOWBIT_HD void step_rule(const Step& s, float gnorm_scale, T g_in, T& p, float& s1, float& s2, float& s3) {
  const float g0 = to_f32(g_in);
  float pv = to_f32(p);
  if constexpr (two_states(R)) {
    const bool keep = is_finite(g0);
    const float g = g0 * gnorm_scale;
    const float n2 = s2 * s.beta2 + (1.0f - s.beta2) * g * g;
    const float n1 = s1 * s.beta1 + (1.0f - s.beta1) * g;
    float n3 = 0.0f;
    if constexpr (R == Optimizer::ademamix) {
      n3 = s3 * s.beta3 + (1.0f - s.beta3) * g;
      pv = rounded<T>(pv - s.lr * ((n1 / s.correction1 + s.alpha * n3) / (sqrtf(n2) / s.correction2 + s.eps)));
    } else {
      pv = rounded<T>(pv + s.step_size * (n1 / (sqrtf(n2) + s.correction2 * s.eps)));
    }
    if (s.weight_decay > 0.0f) pv = rounded<T>(pv * (1.0f - s.lr * s.weight_decay));
    s1 = keep ? n1 : 0.0f;
    s2 = keep ? n2 : 0.0f;
    s3 = keep ? n3 : 0.0f;
    p = keep ? to_param<T>(pv) : p;
  } else {
    const bool keep = !(s.skip_zeros && g0 == 0.0f);
    float g = g0 * gnorm_scale;
    if (s.weight_decay > 0.0f) {
      if constexpr (R == Optimizer::lion) {
        pv = rounded<T>(pv * (1.0f - s.lr * s.weight_decay));
      } else {
        g = g + pv * s.weight_decay;
      }
    }
    float n1 = s1;
    if constexpr (R == Optimizer::momentum) {
      n1 = s.first ? g : s1 * s.beta1 + g;
      pv = rounded<T>(pv - s.lr * n1);
    } else if constexpr (R == Optimizer::lion) {
      const float step = rounded<T>(s.lr * sign(s1 * s.beta1 + (1.0f - s.beta1) * g));
      n1 = s1 * s.beta2 + (1.0f - s.beta2) * g;
      pv = rounded<T>(pv - step);
    } else if constexpr (R == Optimizer::rmsprop) {
      n1 = s1 * s.beta1 + (1.0f - s.beta1) * (g * g);
      pv = rounded<T>(pv - s.lr * (g0 / (sqrtf(n1) + s.eps)));
    } else if constexpr (R == Optimizer::adagrad) {
      n1 = s1 + g * g;
      pv = rounded<T>(pv - s.lr * (g0 / (sqrtf(n1) + s.eps)));
    }
    s1 = keep ? n1 : s1;
    p = keep ? to_param<T>(pv) : p;
  }
}

// f(RuleTag<o>{}) for the rules of the blockwise states (step_rule's), o read
// at run time; the front end admits no other (an internal error otherwise).
template <class F>
void with_blockwise_rule(Optimizer o, F&& f) {
  switch (o) {
    case Optimizer::adam: f(RuleTag<Optimizer::adam>{}); break;
    case Optimizer::ademamix: f(RuleTag<Optimizer::ademamix>{}); break;
    case Optimizer::momentum: f(RuleTag<Optimizer::momentum>{}); break;
    case Optimizer::rmsprop: f(RuleTag<Optimizer::rmsprop>{}); break;
    case Optimizer::lion: f(RuleTag<Optimizer::lion>{}); break;
    case Optimizer::adagrad: f(RuleTag<Optimizer::adagrad>{}); break;
    default: fail(ErrorCode::internal, cat("optimizer_update_8bit_blockwise: no blockwise rule ", static_cast<int>(o)));
  }
}

// The stored code of a new state v, given y = v * absmax_reciprocal(absmax)
// and c = encode_by_midpoints<8>(y, mid), the midpoints below y. The nearest
// code, and for y exactly midway the even one of the two: bitsandbytes'
// binary search (quantize_2D) ends on an even index and keeps it on a tie.
// On a signed map (state1; ademamix's m2 too) a code of the other sign than
// v moves one step toward v, wrapping as its uint8 does, so a small negative
// state never stores as 0.
LOWBIT_HD uint32_t state_code(float v, float y, uint32_t c, const float* code, const float* mid, bool keep_sign) {
#if defined(__CUDA_ARCH__)
  if ((c & 1u) != 0u && c < 255u && y == mid[c]) ++c;
  if (keep_sign && ((float_bits(code[c]) ^ float_bits(v)) >> 31) != 0u) c = (v > 0.0f ? c + 1u : c - 1u) & 0xffu;
  return c;
#else
  // The same as selects: whether c is odd is a coin flip for the CPU's branch predictor.
  c += (c & 1u) & static_cast<uint32_t>(c < 255u) & static_cast<uint32_t>(y == mid[c < 255u ? c : 254u]);
  const uint32_t other_sign = static_cast<uint32_t>(keep_sign) & ((float_bits(code[c]) ^ float_bits(v)) >> 31);
  const uint32_t toward = (v > 0.0f ? c + 1u : c - 1u) & 0xffu;
  return other_sign != 0u ? toward : c;
#endif
}

}  // namespace lowbit::core::optim
