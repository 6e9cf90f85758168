// Shared by the optimizer tests (CPU and CUDA): distances in units of a
// dtype's last place, host tensors copied to the GPU off alignment, and the
// inputs of optimizer_update_8bit_blockwise (the constants of a step, fresh
// random states: codes on bitsandbytes' maps, positive block scales).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/float_convert.h"
#include "harness/harness.h"
#include "lowbit/code_maps.h"
#include "lowbit/ops/optim.h"

namespace lowbit::test {

// v rounded to dtype through float32 (float32 too: where a rule stores
// g + p * weight_decay, the float32 rounding of a cancellation is part of the
// result).
inline double round_to(DType dtype, double v) {
  const float f = static_cast<float>(v);
  if (dtype == DType::f16) return core::f16_to_f32(core::f32_to_f16(f));
  if (dtype == DType::bf16) return core::bf16_to_f32(core::f32_to_bf16(f));
  return f;
}

// An ordered integer of v's bits in dtype (v representable there): the
// distance of two of them counts the dtype's units in the last place.
inline int64_t ordered_bits(DType dtype, float v) {
  uint32_t b = core::float_bits(v), sign = 0x80000000u;
  if (dtype == DType::f16) b = core::f32_to_f16(v), sign = 0x8000u;
  if (dtype == DType::bf16) b = core::f32_to_bf16(v), sign = 0x8000u;
  const int64_t mag = static_cast<int64_t>(b & (sign - 1u));
  return (b & sign) ? -mag : mag;
}

// A host tensor copied to cuda:0, `offset_bytes` into a buffer (off 16-byte
// alignment: the kernels' element-by-element path).
struct OffsetCopy {
  Tensor buffer;
  TensorRef ref;
};
inline OffsetCopy gpu_copy_at(const Tensor& src, int64_t offset_bytes) {
  OffsetCopy d;
  d.buffer = Tensor::empty({static_cast<int64_t>(src.nbytes()) + offset_bytes}, DType::u8, Device::cuda(0));
  const std::vector<int64_t> shape(src.sizes().begin(), src.sizes().end());
  d.ref = TensorRef::contiguous(static_cast<char*>(d.buffer.data()) + offset_bytes, src.dtype(), Shape(shape),
                                Device::cuda(0));
  copy(d.ref, src.ref());
  return d;
}

struct Hyper8 {
  float beta1 = 0.9f, beta2 = 0.99f, beta3 = 0.999f, alpha = 5.0f, eps = 1e-6f, weight_decay = 0.0f, lr = 1e-2f;
  float gnorm_scale = 1.0f;
  bool skip_zeros = false;
  bool zeros_in_g = false;     // every third gradient element 0
  bool specials_in_g = false;  // some gradient elements Inf or NaN
};

// One parameter's tensors, on the host.
struct State8 {
  Tensor p, state1, state2, qmap1, qmap2, absmax1, absmax2;
};

inline int64_t blocks8(int64_t n) {
  return (n + OptimizerUpdate8bitBlockwiseArgs::kBlocksize - 1) / OptimizerUpdate8bitBlockwiseArgs::kBlocksize;
}

inline Tensor map_tensor(const std::vector<float>& values) { return host_tensor(values); }

// Random codes: state1 on the signed map (its non-negative half for the
// rules that keep sums of squares there), state2 on the unsigned map.
inline State8 random_state8(Optimizer o, DType dtype, int64_t n) {
  State8 s;
  const bool two = optimizer_has_state2(o), mix = o == Optimizer::ademamix;
  const bool squares = o == Optimizer::rmsprop || o == Optimizer::adagrad;
  s.p = random_floats({n}, dtype);
  s.qmap1 = map_tensor(create_dynamic_map(true));
  s.state1 = random_bytes({mix ? 2 * n : n}, DType::u8);
  if (squares) {
    auto* c = s.state1.ptr<uint8_t>();
    for (int64_t i = 0; i < s.state1.numel(); ++i) c[i] = static_cast<uint8_t>(127 + c[i] % 129);
  }
  std::uniform_real_distribution<float> scale(0.01f, 0.5f);
  s.absmax1 = Tensor::empty({mix ? 2 * blocks8(n) : blocks8(n)}, DType::f32);
  for (int64_t i = 0; i < s.absmax1.numel(); ++i) s.absmax1.ptr<float>()[i] = scale(rng());
  if (two) {
    s.qmap2 = map_tensor(create_dynamic_map(false));
    s.state2 = random_bytes({n}, DType::u8);
    s.absmax2 = Tensor::empty({blocks8(n)}, DType::f32);
    for (int64_t i = 0; i < s.absmax2.numel(); ++i) s.absmax2.ptr<float>()[i] = scale(rng()) * 0.1f;
  }
  return s;
}

// A fresh gradient for a step of h.
inline Tensor random_grad8(const Hyper8& h, DType dtype, int64_t n) {
  Tensor g = random_floats({n}, dtype);
  const size_t bytes = static_cast<size_t>(dtype_bits(dtype) / 8);
  auto put = [&](int64_t i, float v) {
    if (dtype == DType::f32) {
      g.ptr<float>()[i] = v;
    } else {
      const uint16_t b = dtype == DType::f16 ? core::f32_to_f16(v) : core::f32_to_bf16(v);
      std::memcpy(static_cast<char*>(g.data()) + static_cast<size_t>(i) * bytes, &b, bytes);
    }
  };
  if (h.zeros_in_g) {
    for (int64_t i = 0; i < n; i += 3) put(i, 0.0f);
  }
  if (h.specials_in_g) {
    for (int64_t i = 1; i < n; i += 97) put(i, i % 2 ? std::numeric_limits<float>::infinity() : NAN);
  }
  return g;
}

inline OptimizerUpdate8bitBlockwiseArgs make_args8(Optimizer o, const Hyper8& h, int64_t step, const TensorRef& g,
                                                   const TensorRef& p, const TensorRef& state1, const TensorRef& state2,
                                                   const TensorRef& qmap1, const TensorRef& qmap2,
                                                   const TensorRef& absmax1, const TensorRef& absmax2) {
  OptimizerUpdate8bitBlockwiseArgs a;
  a.optimizer = o;
  a.g = g, a.p = p, a.state1 = state1, a.state2 = state2;
  a.qmap1 = qmap1, a.qmap2 = qmap2, a.absmax1 = absmax1, a.absmax2 = absmax2;
  a.beta1 = h.beta1, a.beta2 = h.beta2, a.beta3 = h.beta3, a.alpha = h.alpha;
  a.eps = h.eps, a.weight_decay = h.weight_decay, a.lr = h.lr, a.gnorm_scale = h.gnorm_scale;
  a.step = step, a.skip_zeros = h.skip_zeros;
  return a;
}

inline const Optimizer kRules8[] = {Optimizer::adam, Optimizer::momentum, Optimizer::rmsprop,
                                    Optimizer::lion, Optimizer::adagrad,  Optimizer::ademamix};

}  // namespace lowbit::test
