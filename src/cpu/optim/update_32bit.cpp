// optimizer_update_32bit on the CPU: the rules of core/optim_rules.h over the
// elements (OpenMP for large tensors), the update's squared norm and the
// parameter's norm summed in float64 first where the trust ratio needs them.
#include <cmath>
#include <cstdint>

#include "core/float_convert.h"
#include "core/optim_rules.h"
#include "cpu/optim/impls.h"
#include "cpu/quant/elementwise.h"

namespace lowbit::core::cpu {
namespace {

constexpr int64_t kParallelFrom = 1 << 15;  // elements; below, threads cost more than they save

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
  with_float_type(a.g.dtype, OptimizerUpdate32bitArgs::kName, [&](auto t) { update<decltype(t)>(a); });
}

}  // namespace lowbit::core::cpu
