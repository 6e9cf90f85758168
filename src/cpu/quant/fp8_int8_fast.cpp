// The CPU fast path ("cpu") of FP8 block scaling, int8 vector-wise
// quantization, absmax centering and quantile estimation.
#include <algorithm>
#include <vector>

#include "core/quant_math.h"
#include "core/reduce.h"
#include "core/registry.h"
#include "cpu/quant/elementwise.h"
#include "cpu/quant/impls.h"
#include "cpu/quant/parallel.h"

namespace lowbit::core::cpu {
namespace {

template <class T>
float span_absmax(const T* x, int64_t count) {
  float m = 0.0f;
  for (int64_t i = 0; i < count; ++i) m = absmax_update(m, to_f32(x[i]));
  return m;
}

void act_quant_fast(const ActQuantArgs& a, void*, Stream) {
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    const T* x = a.input.ptr<const T>();
    uint8_t* y = a.out.ptr<uint8_t>();
    float* scale = a.scale.ptr<float>();
    const int64_t bs = a.block;
    parallel_for(a.input.numel() / bs, a.input.numel(), [&](int64_t b) {
      const T* xb = x + b * bs;
      const float s = fp8_block_scale(span_absmax(xb, bs), a.ue8m0);
      scale[b] = s;
      uint8_t* yb = y + b * bs;
      for (int64_t i = 0; i < bs; ++i) yb[i] = fp8_block_encode(to_f32(xb[i]), s);
    });
  });
}

void weight_quant_fast(const WeightQuantArgs& a, void*, Stream) {
  const int64_t n = a.input.shape[0], k = a.input.shape[1], bs = a.block;
  const int64_t sk = ceil_div(k, bs);
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    const T* w = a.input.ptr<const T>();
    uint8_t* q = a.out.ptr<uint8_t>();
    float* scale = a.scale.ptr<float>();
    parallel_for(ceil_div(n, bs), n * k, [&](int64_t bi) {
      const int64_t r0 = bi * bs, r1 = std::min(n, r0 + bs);
      std::vector<float> amax(static_cast<size_t>(sk), 0.0f);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t bj = 0; bj < sk; ++bj) {
          const int64_t c0 = bj * bs, cnt = std::min(bs, k - c0);
          amax[static_cast<size_t>(bj)] = absmax_update(amax[static_cast<size_t>(bj)], span_absmax(w + r * k + c0, cnt));
        }
      }
      for (int64_t bj = 0; bj < sk; ++bj) {
        const float s = fp8_block_scale(amax[static_cast<size_t>(bj)], false);
        scale[bi * sk + bj] = s;
        const int64_t c0 = bj * bs, c1 = std::min(k, c0 + bs);
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t c = c0; c < c1; ++c) q[r * k + c] = fp8_block_encode(to_f32(w[r * k + c]), s);
        }
      }
    });
  });
}

void weight_dequant_fast(const WeightDequantArgs& a, void*, Stream) {
  const int64_t n = a.input.shape[0], k = a.input.shape[1], bs = a.block;
  const int64_t sk = ceil_div(k, bs);
  const uint8_t* q = a.input.ptr<const uint8_t>();
  const float* scale = a.scale.ptr<const float>();
  float lut[256];
  for (int i = 0; i < 256; ++i) lut[i] = e4m3_to_f32(static_cast<uint8_t>(i));
  with_float_type(a.out.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    T* out = a.out.ptr<T>();
    parallel_for(n, n * k, [&](int64_t r) {
      const float* srow = scale + (r / bs) * sk;
      for (int64_t c0 = 0; c0 < k; c0 += bs) {
        const float s = srow[c0 / bs];
        const int64_t c1 = std::min(k, c0 + bs);
        for (int64_t c = c0; c < c1; ++c) out[r * k + c] = from_f32<T>(lut[q[r * k + c]] * s);
      }
    });
  });
}

}  // namespace

void int8_vectorwise_quant_fast(const Int8VectorwiseQuantArgs& a, void*, Stream) {
  const int64_t k = a.input.size(-1);
  const int64_t rows = k == 0 ? 0 : a.input.numel() / k;
  const float thr = a.threshold;
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    const T* x = a.input.ptr<const T>();
    int8_t* q = a.out.ptr<int8_t>();
    float* stats = a.row_stats.ptr<float>();
    std::vector<uint8_t> outlier(static_cast<size_t>(k), 0);
    if (thr > 0.0f) {
      // Columns in parallel: each thread owns its columns' flags.
      parallel_for(ceil_div(k, 64), rows * k, [&](int64_t cb) {
        const int64_t c0 = cb * 64, c1 = std::min(k, c0 + 64);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = c0; c < c1; ++c) outlier[static_cast<size_t>(c)] |= int8_is_outlier(to_f32(x[r * k + c]), thr);
        }
      });
    }
    parallel_for(rows, rows * k, [&](int64_t r) {
      const T* xr = x + r * k;
      float m = 0.0f;
      if (thr > 0.0f) {
        for (int64_t c = 0; c < k; ++c) {
          const float v = to_f32(xr[c]);
          m = int8_is_outlier(v, thr) ? m : absmax_update(m, v);
        }
      } else {
        m = span_absmax(xr, k);
      }
      stats[r] = m;
      const float f = int8_row_factor(m);
      int8_t* qr = q + r * k;
      for (int64_t c = 0; c < k; ++c) qr[c] = int8_encode(to_f32(xr[c]), f);
      if (thr > 0.0f) {
        for (int64_t c = 0; c < k; ++c) qr[c] = outlier[static_cast<size_t>(c)] ? int8_t{0} : qr[c];
      }
    });
    if (thr > 0.0f) std::copy(outlier.begin(), outlier.end(), a.outlier_mask.ptr<uint8_t>());
  });
}

namespace {

void int8_colwise_quant_cpu(const Int8ColwiseQuantArgs& a, void*, Stream) {
  const int64_t k = a.input.size(-1);
  const int64_t rows = k == 0 ? 0 : a.input.numel() / k;
  const float thr = a.threshold;
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    const T* x = a.input.ptr<const T>();
    int8_t* q = a.out.ptr<int8_t>();
    float* stats = a.col_stats.ptr<float>();
    // Blocks of 64 columns in parallel, walking the rows twice (absmax, then codes): rows stay contiguous.
    parallel_for(ceil_div(k, 64), 2 * rows * k, [&](int64_t cb) {
      const int64_t c0 = cb * 64, n = std::min(k, c0 + 64) - c0;
      float m[64] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * k + c0;
        for (int64_t c = 0; c < n; ++c) {
          const float v = to_f32(xr[c]);
          m[c] = int8_is_outlier(v, thr) ? m[c] : absmax_update(m[c], v);
        }
      }
      float f[64];
      for (int64_t c = 0; c < n; ++c) {
        stats[c0 + c] = m[c];
        f[c] = int8_row_factor(m[c]);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * k + c0;
        int8_t* qr = q + r * k + c0;
        for (int64_t c = 0; c < n; ++c) {
          const float v = to_f32(xr[c]);
          qr[c] = int8_is_outlier(v, thr) ? int8_t{0} : int8_encode(v, f[c]);
        }
      }
    });
  });
}

void int8_vectorwise_dequant_fast(const Int8VectorwiseDequantArgs& a, void*, Stream) {
  const int64_t k = a.input.size(-1);
  const int64_t rows = k == 0 ? 0 : a.input.numel() / k;
  const int8_t* q = a.input.ptr<const int8_t>();
  const float* stats = a.row_stats.ptr<const float>();
  with_float_type(a.out.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    T* out = a.out.ptr<T>();
    parallel_for(rows, rows * k, [&](int64_t r) {
      const float s = stats[r];
      for (int64_t c = 0; c < k; ++c) out[r * k + c] = from_f32<T>(int8_decode(q[r * k + c], s));
    });
  });
}

void absmax_center_fast(const AbsmaxCenterArgs& a, void*, Stream) {
  float* v = a.values.ptr<float>();
  const int64_t n = a.values.numel();
  // Level 0 of the deterministic tree in parallel; the upper levels are tiny.
  std::vector<double> level(static_cast<size_t>(ceil_div(n, kTreeChunk)));
  parallel_for(static_cast<int64_t>(level.size()), n, [&](int64_t c) {
    const int64_t begin = c * kTreeChunk;
    level[static_cast<size_t>(c)] = tree_sum_chunk(v + begin, static_cast<int>(std::min<int64_t>(kTreeChunk, n - begin)));
  });
  const double sum = deterministic_sum(level.data(), static_cast<int64_t>(level.size()));
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  parallel_for(n, n, [&](int64_t i) { v[i] -= mean; });
  a.mean.ptr<float>()[0] = mean;
}

void estimate_quantiles_fast(const EstimateQuantilesArgs& a, void*, Stream) {
  const int64_t n = a.input.numel();
  std::vector<uint32_t> keys(static_cast<size_t>(n));
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    const T* x = a.input.ptr<const T>();
    parallel_for(n, n, [&](int64_t i) { keys[static_cast<size_t>(i)] = float_order_key(to_f32(x[i])); });
  });
  std::sort(keys.begin(), keys.end());
  std::vector<float> sorted(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    sorted[i] = float_from_order_key(keys[i]);
  }
  float* out = a.out.ptr<float>();
  for (int j = 0; j < kNumQuantiles; ++j) {
    out[j] = quantile_interpolate(sorted.data(), n, quantile_probability(j, a.offset));
  }
}

}  // namespace

void register_quant_fast_other() {
  constexpr const char* kName = "cpu";
  constexpr DeviceType kCpu = DeviceType::cpu;
  OpRegistry<ActQuantArgs>::add({kName, kCpu, 10, act_quant_fast});
  OpRegistry<WeightQuantArgs>::add({kName, kCpu, 10, weight_quant_fast});
  OpRegistry<WeightDequantArgs>::add({kName, kCpu, 10, weight_dequant_fast});
  OpRegistry<Int8VectorwiseQuantArgs>::add({kName, kCpu, 10, int8_vectorwise_quant_fast});
  OpRegistry<Int8VectorwiseDequantArgs>::add({kName, kCpu, 10, int8_vectorwise_dequant_fast});
  OpRegistry<Int8ColwiseQuantArgs>::add({kName, kCpu, 10, int8_colwise_quant_cpu});
  OpRegistry<AbsmaxCenterArgs>::add({kName, kCpu, 10, absmax_center_fast});
  OpRegistry<EstimateQuantilesArgs>::add({kName, kCpu, 10, estimate_quantiles_fast});
}

}  // namespace lowbit::core::cpu
