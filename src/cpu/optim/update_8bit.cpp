// optimizer_update_8bit on the CPU: the two passes of
// core/optim_tensorwise.h over the elements (OpenMP for large tensors), the
// maxima and the norms reduced first, then the update.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "core/float_convert.h"
#include "core/optim_tensorwise.h"
#include "core/quant_math.h"
#include "core/tables.h"
#include "cpu/optim/impls.h"
#include "cpu/quant/code_encoder.h"
#include "cpu/quant/elementwise.h"
#include "cpu/quant/spans.h"

namespace lowbit::core::cpu {
namespace {

constexpr int64_t kParallelFrom = 1 << 15;  // elements; below, threads cost more than they save
constexpr int64_t kChunk = 256;             // elements the second pass encodes at once

// One quantized state: its codes, its map and midpoints, the scale it is
// stored with; codes is null where the rule keeps no such state.
struct TensorState {
  uint8_t* codes = nullptr;
  const float* code = nullptr;
  float max = 0.0f;
  float mid[255] = {};
  std::shared_ptr<const CodeEncoder> fast;  // the map's bucket table, for large tensors

  float value(int64_t i) const { return codes ? code[codes[i]] * max : 0.0f; }
};

void init_state(TensorState& s, const TensorRef& codes, const TensorRef& code, const TensorRef& max, int64_t n) {
  if (!codes.present()) return;
  s.codes = codes.ptr<uint8_t>();
  s.code = code.ptr<const float>();
  s.max = *max.ptr<const float>();
  table_midpoints(s.code, 256, s.mid);
  s.fast = code_encoder_for(s.code, n);
}

// The codes of `count` states v stored with scale r = 1 / new max, into out.
void store(const TensorState& s, const float* v, int64_t count, float r, bool keep_sign, uint8_t* out) {
  alignas(64) uint8_t below[kChunk];  // the midpoints under each y, as encode_by_midpoints<8> counts them
  if (s.fast) {
    encode_code8_span(v, r, count, s.fast->base(), s.fast->midpoints(), s.fast->steps(), below);
  } else {
    for (int64_t i = 0; i < count; ++i) below[i] = static_cast<uint8_t>(encode_by_midpoints<8>(v[i] * r, s.mid));
  }
  for (int64_t i = 0; i < count; ++i) {
    out[i] = static_cast<uint8_t>(optim::state_code(v[i], v[i] * r, below[i], s.code, s.mid, keep_sign));
  }
}

template <class T>
void update(const OptimizerUpdate8bitArgs& a) {
  const int64_t n = a.g.numel();
  const T* g = a.g.ptr<const T>();
  T* p = a.p.ptr<T>();
  TensorState q1, q2;
  init_state(q1, a.state1, a.qmap1, a.max1, n);
  init_state(q2, a.state2, a.qmap2, a.max2, n);
  const bool two = optim::two_states(a.optimizer), norms = a.unorm_vec.present(), trust = a.max_unorm > 0.0f;
  optim::Step st = optim::make_tensorwise_step(a);

  // Pass 1: the new states' maxima and the norms, p and the states untouched.
  float m1 = 0.0f, m2 = 0.0f;
  double unorm = 0.0, pnorm = 0.0;
#pragma omp parallel for reduction(max : m1, m2) reduction(+ : unorm, pnorm) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) {
    T pi = p[i];
    float s1 = q1.value(i), s2 = q2.value(i);
    if (two) {
      optim::tensorwise_two(st, a.gnorm_scale, g[i], pi, s1, s2);
    } else {
      optim::tensorwise_one(st, a.gnorm_scale, g[i], pi, s1);
    }
    m1 = absmax_update(m1, s1);
    m2 = absmax_update(m2, s2);
    if (norms) unorm += optim::tensorwise_unorm_term(st, s1, s2);
    if (trust) {
      const double v = to_f32(p[i]);
      pnorm += v * v;
    }
  }
  *a.new_max1.ptr<float>() = m1;
  if (two) *a.new_max2.ptr<float>() = m2;
  if (norms) *a.unorm_vec.ptr<float>() = static_cast<float>(unorm);
  if (trust) {
    st.update_scale =
        optim::tensorwise_update_scale(static_cast<float>(unorm), a.max_unorm, static_cast<float>(std::sqrt(pnorm)));
  }

  // Pass 2: the same step, stored with the new maxima.
  const float r1 = absmax_reciprocal(m1), r2 = absmax_reciprocal(m2);
  const int64_t chunks = ceil_div(n, kChunk);
#pragma omp parallel for if (n >= kParallelFrom)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
    alignas(64) float s1[kChunk], s2[kChunk];
    for (int64_t j = 0; j < count; ++j) {
      const int64_t i = begin + j;
      s1[j] = q1.value(i), s2[j] = q2.value(i);
      if (two) {
        optim::tensorwise_two(st, a.gnorm_scale, g[i], p[i], s1[j], s2[j]);
      } else {
        optim::tensorwise_one(st, a.gnorm_scale, g[i], p[i], s1[j]);
      }
    }
    store(q1, s1, count, r1, true, q1.codes + begin);
    if (two) store(q2, s2, count, r2, false, q2.codes + begin);
  }
}

}  // namespace

void optimizer_update_8bit(const OptimizerUpdate8bitArgs& a, void* /*workspace*/, Stream /*stream*/) {
  const OptimizerUpdate8bitArgs b = with_clip_scale(a);
  with_float_type(b.g.dtype, OptimizerUpdate8bitArgs::kName, [&](auto t) { update<decltype(t)>(b); });
}

}  // namespace lowbit::core::cpu
