// The CPU reference ("cpu-reference"): scalar, single-threaded, obviously
// right — the oracle every other implementation is tested against. Code
// selection here counts midpoints linearly instead of searching.
#include <algorithm>
#include <vector>

#include "core/quant_math.h"
#include "core/reduce.h"
#include "core/registry.h"
#include "core/tables.h"
#include "cpu/quant/elementwise.h"
#include "cpu/quant/impls.h"

namespace lowbit::core::cpu {
namespace {

uint32_t count_below(float y, const float* mid, int n) {
  if (!(y == y)) y = 0.0f;
  uint32_t c = 0;
  for (int i = 0; i < n; ++i) c += (y > mid[i]) ? 1u : 0u;
  return c;
}

template <class T>
float block_absmax(const T* x, int64_t begin, int64_t end) {
  float m = 0.0f;
  for (int64_t i = begin; i < end; ++i) m = absmax_update(m, to_f32(x[i]));
  return m;
}

// absmax of block b, restoring a nested absmax when present.
struct AbsmaxReader {
  const float* plain = nullptr;
  const uint8_t* q = nullptr;
  const float* code2 = nullptr;
  const float* absmax2 = nullptr;
  float offset = 0.0f;
  int64_t blocksize2 = 1;

  AbsmaxReader(const TensorRef& absmax, const NestedAbsmax& nested) {
    if (!nested.present()) {
      plain = absmax.ptr<const float>();
      return;
    }
    q = absmax.ptr<const uint8_t>();
    code2 = nested.code.ptr<const float>();
    absmax2 = nested.absmax.ptr<const float>();
    offset = nested.offset.ptr<const float>()[0];
    blocksize2 = nested.blocksize;
  }
  float operator()(int64_t b) const {
    if (plain) return plain[b];
    return nested_absmax_decode(code2[q[b]], absmax2[b / blocksize2], offset);
  }
};

void quantize_blockwise_ref(const QuantizeBlockwiseArgs& a, void*, Stream) {
  float mid[255];
  table_midpoints(a.code.ptr<const float>(), 256, mid);
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    const T* x = a.input.ptr<const T>();
    uint8_t* q = a.out.ptr<uint8_t>();
    float* absmax = a.absmax.ptr<float>();
    const int64_t n = a.input.numel();
    for (int64_t b = 0; b * a.blocksize < n; ++b) {
      const int64_t begin = b * a.blocksize, end = std::min(n, begin + a.blocksize);
      absmax[b] = block_absmax(x, begin, end);
      const float r = absmax_reciprocal(absmax[b]);
      for (int64_t i = begin; i < end; ++i) q[i] = static_cast<uint8_t>(count_below(to_f32(x[i]) * r, mid, 255));
    }
  });
}

void dequantize_blockwise_ref(const DequantizeBlockwiseArgs& a, void*, Stream) {
  const AbsmaxReader absmax(a.absmax, a.nested);
  const float* code = a.code.ptr<const float>();
  const uint8_t* q = a.input.ptr<const uint8_t>();
  with_float_type(a.out.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    T* out = a.out.ptr<T>();
    const int64_t n = a.input.numel();
    for (int64_t i = 0; i < n; ++i) out[i] = from_f32<T>(code[q[i]] * absmax(i / a.blocksize));
  });
}

void quantize_4bit_ref(const Quantize4bitArgs& a, void*, Stream) {
  float mid[15];
  table_midpoints(kNf4Table, 16, mid);
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    const T* x = a.input.ptr<const T>();
    uint8_t* out = a.out.ptr<uint8_t>();
    float* absmax = a.absmax.ptr<float>();
    const int64_t n = a.input.numel();
    for (int64_t b = 0; b * a.blocksize < n; ++b) {
      const int64_t begin = b * a.blocksize;
      absmax[b] = block_absmax(x, begin, std::min(n, begin + a.blocksize));
    }
    for (int64_t i = 0; i < n; ++i) {
      const float y = to_f32(x[i]) * absmax_reciprocal(absmax[i / a.blocksize]);
      const uint32_t c = a.type == Quant4Type::nf4 ? count_below(y, mid, 15) : encode_fp4(y);
      uint8_t& byte = out[i / 2];
      if (i % 2 == 0) {
        byte = static_cast<uint8_t>(c << 4);
      } else {
        byte = static_cast<uint8_t>(byte | c);
      }
    }
  });
}

void dequantize_4bit_ref(const Dequantize4bitArgs& a, void*, Stream) {
  const AbsmaxReader absmax(a.absmax, a.nested);
  const float* table = a.type == Quant4Type::nf4 ? kNf4Table : kFp4Table;
  const uint8_t* packed = a.input.ptr<const uint8_t>();
  with_float_type(a.out.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    T* out = a.out.ptr<T>();
    const int64_t n = a.out.numel();
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t c = (i % 2 == 0) ? packed[i / 2] >> 4 : packed[i / 2] & 0xfu;
      out[i] = from_f32<T>(table[c] * absmax(i / a.blocksize));
    }
  });
}

void absmax_center_ref(const AbsmaxCenterArgs& a, void*, Stream) {
  float* v = a.values.ptr<float>();
  const int64_t n = a.values.numel();
  const float mean = deterministic_mean(v, n);
  for (int64_t i = 0; i < n; ++i) v[i] -= mean;
  a.mean.ptr<float>()[0] = mean;
}

void act_quant_ref(const ActQuantArgs& a, void*, Stream) {
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    const T* x = a.input.ptr<const T>();
    uint8_t* y = a.out.ptr<uint8_t>();
    float* scale = a.scale.ptr<float>();
    const int64_t nblocks = a.input.numel() / a.block;  // blocks never straddle rows: K % block == 0
    for (int64_t b = 0; b < nblocks; ++b) {
      const float s = fp8_block_scale(block_absmax(x, b * a.block, (b + 1) * a.block), a.ue8m0);
      scale[b] = s;
      for (int64_t i = b * a.block; i < (b + 1) * a.block; ++i) y[i] = fp8_block_encode(to_f32(x[i]), s);
    }
  });
}

void weight_quant_ref(const WeightQuantArgs& a, void*, Stream) {
  const int64_t n = a.input.shape[0], k = a.input.shape[1], bs = a.block;
  const int64_t sk = ceil_div(k, bs);
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    const T* w = a.input.ptr<const T>();
    uint8_t* q = a.out.ptr<uint8_t>();
    float* scale = a.scale.ptr<float>();
    for (int64_t bi = 0; bi * bs < n; ++bi) {
      for (int64_t bj = 0; bj * bs < k; ++bj) {
        const int64_t r1 = std::min(n, (bi + 1) * bs), c1 = std::min(k, (bj + 1) * bs);
        float amax = 0.0f;
        for (int64_t r = bi * bs; r < r1; ++r) amax = absmax_update(amax, block_absmax(w + r * k, bj * bs, c1));
        const float s = fp8_block_scale(amax, false);
        scale[bi * sk + bj] = s;
        for (int64_t r = bi * bs; r < r1; ++r) {
          for (int64_t c = bj * bs; c < c1; ++c) q[r * k + c] = fp8_block_encode(to_f32(w[r * k + c]), s);
        }
      }
    }
  });
}

void weight_dequant_ref(const WeightDequantArgs& a, void*, Stream) {
  const int64_t n = a.input.shape[0], k = a.input.shape[1], bs = a.block;
  const int64_t sk = ceil_div(k, bs);
  const uint8_t* q = a.input.ptr<const uint8_t>();
  const float* scale = a.scale.ptr<const float>();
  with_float_type(a.out.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    T* out = a.out.ptr<T>();
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        out[r * k + c] = from_f32<T>(e4m3_to_f32(q[r * k + c]) * scale[(r / bs) * sk + c / bs]);
      }
    }
  });
}

void int8_vectorwise_quant_ref(const Int8VectorwiseQuantArgs& a, void*, Stream) {
  const int64_t k = a.input.size(-1);
  const int64_t rows = k == 0 ? 0 : a.input.numel() / k;
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    const T* x = a.input.ptr<const T>();
    int8_t* q = a.out.ptr<int8_t>();
    float* stats = a.row_stats.ptr<float>();
    std::vector<uint8_t> outlier(static_cast<size_t>(k), 0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        if (int8_is_outlier(to_f32(x[r * k + c]), a.threshold)) outlier[static_cast<size_t>(c)] = 1;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      float m = 0.0f;
      for (int64_t c = 0; c < k; ++c) {
        const float v = to_f32(x[r * k + c]);
        if (!int8_is_outlier(v, a.threshold)) m = absmax_update(m, v);
      }
      stats[r] = m;
      const float f = int8_row_factor(m);
      for (int64_t c = 0; c < k; ++c) {
        q[r * k + c] = outlier[static_cast<size_t>(c)] ? int8_t{0} : int8_encode(to_f32(x[r * k + c]), f);
      }
    }
    if (a.threshold > 0.0f) std::copy(outlier.begin(), outlier.end(), a.outlier_mask.ptr<uint8_t>());
  });
}

void int8_vectorwise_dequant_ref(const Int8VectorwiseDequantArgs& a, void*, Stream) {
  const int64_t k = a.input.size(-1);
  const int8_t* q = a.input.ptr<const int8_t>();
  const float* stats = a.row_stats.ptr<const float>();
  with_float_type(a.out.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    T* out = a.out.ptr<T>();
    const int64_t n = a.input.numel();
    for (int64_t i = 0; i < n; ++i) out[i] = from_f32<T>(int8_decode(q[i], stats[i / k]));
  });
}

void estimate_quantiles_ref(const EstimateQuantilesArgs& a, void*, Stream) {
  const int64_t n = a.input.numel();
  std::vector<float> v(static_cast<size_t>(n));
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    const T* x = a.input.ptr<const T>();
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = to_f32(x[i]);
  });
  std::sort(v.begin(), v.end(), [](float p, float q) { return float_order_key(p) < float_order_key(q); });
  float* out = a.out.ptr<float>();
  for (int j = 0; j < kNumQuantiles; ++j) out[j] = quantile_interpolate(v.data(), n, quantile_probability(j, a.offset));
}

}  // namespace

void register_quant_reference() {
  constexpr const char* kName = "cpu-reference";
  constexpr DeviceType kCpu = DeviceType::cpu;
  OpRegistry<QuantizeBlockwiseArgs>::add({kName, kCpu, 0, quantize_blockwise_ref});
  OpRegistry<DequantizeBlockwiseArgs>::add({kName, kCpu, 0, dequantize_blockwise_ref});
  OpRegistry<Quantize4bitArgs>::add({kName, kCpu, 0, quantize_4bit_ref});
  OpRegistry<Dequantize4bitArgs>::add({kName, kCpu, 0, dequantize_4bit_ref});
  OpRegistry<AbsmaxCenterArgs>::add({kName, kCpu, 0, absmax_center_ref});
  OpRegistry<ActQuantArgs>::add({kName, kCpu, 0, act_quant_ref});
  OpRegistry<WeightQuantArgs>::add({kName, kCpu, 0, weight_quant_ref});
  OpRegistry<WeightDequantArgs>::add({kName, kCpu, 0, weight_dequant_ref});
  OpRegistry<Int8VectorwiseQuantArgs>::add({kName, kCpu, 0, int8_vectorwise_quant_ref});
  OpRegistry<Int8VectorwiseDequantArgs>::add({kName, kCpu, 0, int8_vectorwise_dequant_ref});
  OpRegistry<EstimateQuantilesArgs>::add({kName, kCpu, 0, estimate_quantiles_ref});
}

}  // namespace lowbit::core::cpu
