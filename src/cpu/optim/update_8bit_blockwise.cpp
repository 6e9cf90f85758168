// optimizer_update_8bit_blockwise on the CPU: block by block (OpenMP over the
// blocks of large tensors), the arithmetic of core/optim_blockwise.h.
#include <algorithm>
#include <cstdint>

#include "core/float_convert.h"
#include "core/optim_blockwise.h"
#include "core/quant_math.h"
#include "core/tables.h"
#include "cpu/optim/impls.h"
#include "cpu/quant/code_encoder.h"
#include "cpu/quant/elementwise.h"
#include "cpu/quant/spans.h"

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
