// optimizer_update_8bit_blockwise on the CPU: block by block (OpenMP over the
// blocks of large tensors), the arithmetic of core/optim_blockwise.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/float_convert.h"
#include "core/optim_blockwise.h"
#include "core/quant_math.h"
#include "core/tables.h"
#include "cpu/optim/impls.h"
#include "cpu/quant/code_encoder.h"
#include "cpu/quant/elementwise.h"
#include "cpu/quant/spans.h"
#include "cpu/simd_clones.h"

namespace lowbit::core::cpu {
namespace {

constexpr int64_t kBlock = OptimizerUpdate8bitBlockwiseArgs::kBlocksize;
constexpr int64_t kParallelFrom = 1 << 15;  // elements; below, threads cost more than they save

// One quantized state: its codes, the map they index and its midpoints, and
// one absmax per block; codes is null where the rule keeps no such state.
struct QuantizedState {
  uint8_t* codes = nullptr;
  const float* code = nullptr;
  float* absmax = nullptr;
  const float* mid = nullptr;         // the map's 255 midpoints
  bool keep_sign = false;             // a signed map: see optim::state_code
  const CodeEncoder* fast = nullptr;  // the map's bucket table, where there is one

  void dequantize(int64_t b, int64_t count, float* s) const {
    for (int64_t i = 0; i < count; ++i) s[i] = codes ? code[codes[b * kBlock + i]] * absmax[b] : 0.0f;
  }
  // Stores block b's new states with the block's new absmax.
  void quantize(int64_t b, int64_t count, const float* s) const {
    if (!codes) return;
    float m = 0.0f;
    for (int64_t i = 0; i < count; ++i) m = absmax_update(m, s[i]);
    quantize(b, count, s, m);
  }
  // The same with the block's new absmax m known.
  void quantize(int64_t b, int64_t count, const float* s, float m) const {
    absmax[b] = m;
    const float r = absmax_reciprocal(m);
    alignas(64) uint8_t below[kBlock];  // the midpoints under each y, as encode_by_midpoints<8> counts them
    if (fast) {
      encode_code8_span(s, r, count, fast->base(), fast->midpoints(), fast->steps(), below);
    } else {
      for (int64_t i = 0; i < count; ++i) below[i] = static_cast<uint8_t>(encode_by_midpoints<8>(s[i] * r, mid));
    }
    for (int64_t i = 0; i < count; ++i) {
      codes[b * kBlock + i] = static_cast<uint8_t>(optim::state_code(s[i], s[i] * r, below[i], code, mid, keep_sign));
    }
  }
};

// optim::step_rule<adam> on fp32 parameters over a block's dequantized
// states, then each state's new absmax (max |state|, as absmax_update takes
// it: a NaN never wins, so lanes may take it in any order): the same
// operations in the same order, branch-free so every clone vectorizes; equal
// to step_rule bit for bit.
LOWBIT_SIMD_CLONES void adam_block_f32(int64_t n, const float* g, float* p, float* s1, float* s2, float gnorm_scale,
                                       const optim::Step& s, float* absmax1, float* absmax2) {
  const float b1 = s.beta1, nb1 = 1.0f - s.beta1, b2 = s.beta2, nb2 = 1.0f - s.beta2;
  const float eps = s.correction2 * s.eps, step = s.step_size;
  const bool decay = s.weight_decay > 0.0f;
  const float shrink = 1.0f - s.lr * s.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    const float g0 = g[i];
    const bool keep = (float_bits(g0) & 0x7f800000u) != 0x7f800000u;
    const float gi = g0 * gnorm_scale;
    const float v = s2[i] * b2 + nb2 * gi * gi;
    const float m = s1[i] * b1 + nb1 * gi;
    float pv = p[i] + step * (m / (sqrtf(v) + eps));
    pv = decay ? pv * shrink : pv;
    s1[i] = keep ? m : 0.0f;
    s2[i] = keep ? v : 0.0f;
    p[i] = keep ? pv : p[i];
  }
  constexpr int kLanes = 16;
  float l1[kLanes] = {}, l2[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float a1 = fabsf(s1[i + l]), a2 = fabsf(s2[i + l]);
      l1[l] = a1 > l1[l] ? a1 : l1[l];
      l2[l] = a2 > l2[l] ? a2 : l2[l];
    }
  }
  float m1 = 0.0f, m2 = 0.0f;
  for (; i < n; ++i) m1 = absmax_update(m1, s1[i]), m2 = absmax_update(m2, s2[i]);
  for (int l = 0; l < kLanes; ++l) m1 = absmax_update(m1, l1[l]), m2 = absmax_update(m2, l2[l]);
  *absmax1 = m1;
  *absmax2 = m2;
}

QuantizedState quantized_state(uint8_t* codes, const TensorRef& code, float* absmax, bool keep_sign,
                               const float* mid, const CodeEncoder* fast) {
  QuantizedState q;
  if (!codes) return q;
  q.codes = codes;
  q.code = code.ptr<const float>();
  q.absmax = absmax;
  q.keep_sign = keep_sign;
  q.mid = mid;
  q.fast = fast;
  return q;
}

template <class T>
void update(const OptimizerUpdate8bitBlockwiseArgs& a, const BlockwiseMaps& maps) {
  const int64_t n = a.g.numel(), blocks = ceil_div(n, kBlock);
  const bool two = optim::two_states(a.optimizer), mix = a.optimizer == Optimizer::ademamix;
  uint8_t* c1 = a.state1.ptr<uint8_t>();
  float* m1 = a.absmax1.ptr<float>();
  const CodeEncoder* f1 = maps.fast1.get();
  const CodeEncoder* f2 = maps.fast2.get();
  const QuantizedState q1 = quantized_state(c1, a.qmap1, m1, true, maps.mid1, f1);
  const QuantizedState q2 = quantized_state(two ? a.state2.ptr<uint8_t>() : nullptr, a.qmap2,
                                            two ? a.absmax2.ptr<float>() : nullptr, false, maps.mid2, f2);
  // ademamix's m2: codes after m1's, blocks after m1's, on m1's map.
  const QuantizedState q3 =
      quantized_state(mix ? c1 + n : nullptr, a.qmap1, mix ? m1 + blocks : nullptr, true, maps.mid1, f1);
  const optim::Step st = optim::make_step(a);
  const T* g = a.g.ptr<const T>();
  T* p = a.p.ptr<T>();
  optim::with_blockwise_rule(a.optimizer, [&](auto rule) {
    constexpr Optimizer R = decltype(rule)::kRule;
#pragma omp parallel for if (n >= kParallelFrom)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t begin = b * kBlock, count = std::min(kBlock, n - begin);
      float s1[kBlock], s2[kBlock], s3[kBlock];
      q1.dequantize(b, count, s1);
      q2.dequantize(b, count, s2);
      q3.dequantize(b, count, s3);
      if constexpr (R == Optimizer::adam && std::is_same_v<T, float>) {
        float m1, m2;
        adam_block_f32(count, g + begin, p + begin, s1, s2, a.gnorm_scale, st, &m1, &m2);
        q1.quantize(b, count, s1, m1);
        q2.quantize(b, count, s2, m2);
        continue;
      }
      for (int64_t i = 0; i < count; ++i) {
        optim::step_rule<R>(st, a.gnorm_scale, g[begin + i], p[begin + i], s1[i], s2[i], s3[i]);
      }
      q1.quantize(b, count, s1);
      q2.quantize(b, count, s2);
      q3.quantize(b, count, s3);
    }
  });
}

}  // namespace

BlockwiseMaps blockwise_maps(Optimizer o, const TensorRef& qmap1, const TensorRef& qmap2, int64_t elements) {
  BlockwiseMaps m;
  table_midpoints(qmap1.ptr<const float>(), 256, m.mid1);
  m.fast1 = code_encoder_for(qmap1.ptr<const float>(), elements, kEncoderTableMinRepeated);
  if (optim::two_states(o)) {
    table_midpoints(qmap2.ptr<const float>(), 256, m.mid2);
    m.fast2 = code_encoder_for(qmap2.ptr<const float>(), elements, kEncoderTableMinRepeated);
  }
  return m;
}

void optimizer_update_8bit_blockwise(const OptimizerUpdate8bitBlockwiseArgs& a, const BlockwiseMaps& maps) {
  const OptimizerUpdate8bitBlockwiseArgs b = with_clip_scale(a);
  with_float_type(b.g.dtype, OptimizerUpdate8bitBlockwiseArgs::kName, [&](auto t) { update<decltype(t)>(b, maps); });
}

void optimizer_update_8bit_blockwise(const OptimizerUpdate8bitBlockwiseArgs& a, void* /*workspace*/,
                                     Stream /*stream*/) {
  optimizer_update_8bit_blockwise(a, blockwise_maps(a.optimizer, a.qmap1, a.qmap2, a.g.numel()));
}

}  // namespace lowbit::core::cpu
