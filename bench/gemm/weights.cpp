#include "gemm/weights.h"

#include <omp.h>

#include <exception>

#include "internals.h"
#include "random.h"

namespace lowbit::bench {
namespace {

// An unpacked weight [N, K] for transform_weight: integer values of the type
// (int8/uint8), codes (nf4/fp4), E4M3 bits without NaN, or f16/bf16 values.
Tensor random_weight(WeightType type, int64_t N, int64_t K, uint64_t seed) {
  const WeightTypeInfo info = weight_type_info(type);
  if (info.kind == WeightKind::f16 || info.kind == WeightKind::bf16) {
    Tensor t = Tensor::empty({N, K}, info.kind == WeightKind::f16 ? DType::f16 : DType::bf16);
    auto* p = t.ptr<uint16_t>();
    const bool half = info.kind == WeightKind::f16;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N * K; ++i) {
      const float x = 0.05f * normal_from_bits(random_bits(seed, static_cast<uint64_t>(i)));
      p[i] = half ? f32_to_f16(x) : f32_to_bf16(x);
    }
    return t;
  }
  const bool is_signed = info.kind == WeightKind::sint || info.kind == WeightKind::pm1;
  Tensor t = Tensor::empty({N, K}, is_signed ? DType::i8 : DType::u8);
  auto* p = static_cast<uint8_t*>(t.data());
  const uint64_t span = static_cast<uint64_t>(info.max - info.min + 1);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * K; ++i) {
    const uint64_t r = random_bits(seed, static_cast<uint64_t>(i));
    // Uniform in [0, span): the high half of a 32 x 32-bit product (no division).
    int32_t v = static_cast<int32_t>(((r & 0xffffffffu) * span) >> 32);
    if (info.kind == WeightKind::pm1) {
      v = (r & 1) ? 1 : -1;
    } else if (info.kind == WeightKind::fp8) {
      if ((v & 0x7f) == 0x7f) v = 0x7e;  // codes 0..255 without the NaNs 0x7f and 0xff
    } else {
      v += info.min;
    }
    p[i] = static_cast<uint8_t>(static_cast<int8_t>(v));
  }
  return t;
}

// Scales f16 [N, groups], near 0.01 (so sums over K stay well inside fp16).
Tensor random_scale(int64_t N, int64_t G, uint64_t seed) {
  Tensor t = Tensor::empty({N, G}, DType::f16);
  auto* p = t.ptr<uint16_t>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * G; ++i) {
    const uint64_t r = random_bits(seed, static_cast<uint64_t>(i));
    p[i] = f32_to_f16(0.005f + 0.01f * static_cast<float>(r & 0xffff) / 65535.0f);
  }
  return t;
}

// Zeros [N, groups]: integers of W's type (quantized) or small f16 floats.
Tensor random_zeros(const TypeSpec& t, int64_t N, int64_t G, uint64_t seed) {
  if (t.zeros_mode == ZerosMode::quantized) return random_weight(t.type, N, G, seed);
  Tensor z = Tensor::empty({N, G}, DType::f16);
  auto* p = z.ptr<uint16_t>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * G; ++i)
    p[i] = f32_to_f16(0.01f * normal_from_bits(random_bits(seed, static_cast<uint64_t>(i))));
  return z;
}

}  // namespace

Tensor random_f16(std::initializer_list<int64_t> shape, float scale, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f16);
  auto* p = t.ptr<uint16_t>();
  const int64_t n = t.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    p[i] = f32_to_f16(scale * normal_from_bits(random_bits(seed, static_cast<uint64_t>(i))));
  return t;
}

PreparedWeight prepare(const TypeSpec& t, const WeightShape& sh, const std::vector<int64_t>& ms, Device dev,
                       uint64_t seed) {
  PreparedWeight p;
  try {
    const MatmulConfig cfg = config_for(t, sh.N, sh.K, ms);
    p.mm.emplace(cfg, dev);
    p.weight = random_weight(t.type, sh.N, sh.K, seed);
    if (t.scaling) p.scale = random_scale(sh.N, cfg.groups(), seed + 1);
    if (t.zeros) p.zeros = random_zeros(t, sh.N, cfg.groups(), seed + 2);
    p.W = p.mm->transform_weight(p.weight, p.scale, p.zeros);
  } catch (const Error& e) {
    p.error = e.what();
    p.code = e.code();
  } catch (const std::exception& e) {  // e.g. std::bad_alloc
    p.error = e.what();
    p.code = ErrorCode::internal;
  }
  return p;
}

size_t packed_bytes(const PackedWeight& w) {
  size_t b = 0;
  for (const Tensor* t : {&w.qweight, &w.scale, &w.zeros, &w.bias, &w.perm}) {
    if (t->defined()) b += t->nbytes();
  }
  return b;
}

}  // namespace lowbit::bench
