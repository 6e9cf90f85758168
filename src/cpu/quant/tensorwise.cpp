// Tensor-wise 8-bit quantization on the CPU: the scalar reference
// ("cpu-reference": the oracle, midpoints counted one by one) and the fast
// path ("cpu": OpenMP over chunks of the tensor, the span kernels and code
// encoder of the blockwise fast path).
#include <algorithm>
#include <memory>

#include "core/quant_math.h"
#include "core/registry.h"
#include "core/tables.h"
#include "cpu/quant/code_encoder.h"
#include "cpu/quant/elementwise.h"
#include "cpu/quant/impls.h"
#include "cpu/quant/parallel.h"
#include "cpu/quant/spans.h"

namespace lowbit::core::cpu {
namespace {

constexpr int64_t kChunk = 4096;  // elements converted to fp32 at a time, on the stack

// max |x| over the tensor, NaN ignored; the maximum is order-free, so the
// threads' split does not change it.
template <class T>
float tensor_absmax(const T* x, int64_t n) {
  float m = 0.0f;
  const int64_t chunks = ceil_div(n, kChunk);
#pragma omp parallel for reduction(max : m) if (n >= kParallelMinElements)
  for (int64_t c = 0; c < chunks; ++c) {
    alignas(64) float xf[kChunk];
    const int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
    to_f32_span(x + begin, count, xf);
    m = std::max(m, absmax_span(xf, count));
  }
  return m;
}

// out[i] = the code nearest to x[i] (divided by *absmax when given).
void encode(const TensorRef& input, const TensorRef& code_map, const TensorRef& out, const float* absmax,
            const char* op) {
  const int64_t n = input.numel();
  const float* code = code_map.ptr<const float>();
  const std::shared_ptr<const CodeEncoder> encoder = code_encoder_for(code, n);
  float mid[255];
  table_midpoints(code, 256, mid);
  with_float_type(input.dtype, op, [&](auto t) {
    using T = decltype(t);
    const T* x = input.ptr<const T>();
    uint8_t* q = out.ptr<uint8_t>();
    const float m = absmax ? *absmax : 0.0f;
    parallel_for(ceil_div(n, kChunk), n, [&](int64_t c) {
      alignas(64) float xf[kChunk];
      const int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
      to_f32_span(x + begin, count, xf);
      if (absmax) {
        for (int64_t i = 0; i < count; ++i) xf[i] = tensorwise_normalize(xf[i], m);
      }
      if (encoder) {  // y * 1 is y: the encoder's multiply changes nothing
        encode_code8_span(xf, 1.0f, count, encoder->base(), encoder->midpoints(), encoder->steps(), q + begin);
      } else {
        for (int64_t i = 0; i < count; ++i) q[begin + i] = static_cast<uint8_t>(encode_by_midpoints<8>(xf[i], mid));
      }
    });
  });
}

// out[i] = code[q[i]] * scale (code[q[i]] * 1 is exact for no absmax).
void decode(const TensorRef& input, const TensorRef& code_map, const TensorRef& out, float scale, const char* op) {
  const int64_t n = input.numel();
  const float* code = code_map.ptr<const float>();
  const uint8_t* q = input.ptr<const uint8_t>();
  with_float_type(out.dtype, op, [&](auto t) {
    using T = decltype(t);
    T* o = out.ptr<T>();
    parallel_for(ceil_div(n, kChunk), n, [&](int64_t c) {
      alignas(64) float buf[kChunk];
      const int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
      decode8_span(q + begin, count, code, scale, buf);
      from_f32_span(buf, count, o + begin);
    });
  });
}

void quantize_no_absmax(const QuantizeNoAbsmaxArgs& a, void*, Stream) {
  encode(a.input, a.code, a.out, nullptr, a.kName);
}

void dequantize_no_absmax(const DequantizeNoAbsmaxArgs& a, void*, Stream) {
  decode(a.input, a.code, a.out, 1.0f, a.kName);
}

void quantize_tensorwise(const QuantizeTensorwiseArgs& a, void*, Stream) {
  float* absmax = a.absmax.ptr<float>();
  *absmax = with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    return tensor_absmax(a.input.ptr<const T>(), a.input.numel());
  });
  encode(a.input, a.code, a.out, absmax, a.kName);
}

void dequantize_tensorwise(const DequantizeTensorwiseArgs& a, void*, Stream) {
  decode(a.input, a.code, a.out, *a.absmax.ptr<const float>(), a.kName);
}

// ---------------------------------------------------------------- reference

uint32_t count_below(float y, const float* mid) {
  if (!(y == y)) y = 0.0f;
  uint32_t c = 0;
  for (int i = 0; i < 255; ++i) c += (y > mid[i]) ? 1u : 0u;
  return c;
}

void encode_ref(const TensorRef& input, const TensorRef& code, const TensorRef& out, float* absmax, const char* op) {
  float mid[255];
  table_midpoints(code.ptr<const float>(), 256, mid);
  with_float_type(input.dtype, op, [&](auto t) {
    using T = decltype(t);
    const T* x = input.ptr<const T>();
    const int64_t n = input.numel();
    if (absmax) {
      float m = 0.0f;
      for (int64_t i = 0; i < n; ++i) m = absmax_update(m, to_f32(x[i]));
      *absmax = m;
    }
    for (int64_t i = 0; i < n; ++i) {
      const float y = absmax ? tensorwise_normalize(to_f32(x[i]), *absmax) : to_f32(x[i]);
      out.ptr<uint8_t>()[i] = static_cast<uint8_t>(count_below(y, mid));
    }
  });
}

void decode_ref(const TensorRef& input, const TensorRef& code, const TensorRef& out, const float* absmax,
                const char* op) {
  with_float_type(out.dtype, op, [&](auto t) {
    using T = decltype(t);
    const uint8_t* q = input.ptr<const uint8_t>();
    for (int64_t i = 0; i < input.numel(); ++i) {
      const float v = code.ptr<const float>()[q[i]];
      out.ptr<T>()[i] = from_f32<T>(absmax ? v * *absmax : v);
    }
  });
}

void quantize_no_absmax_ref(const QuantizeNoAbsmaxArgs& a, void*, Stream) {
  encode_ref(a.input, a.code, a.out, nullptr, a.kName);
}
void dequantize_no_absmax_ref(const DequantizeNoAbsmaxArgs& a, void*, Stream) {
  decode_ref(a.input, a.code, a.out, nullptr, a.kName);
}
void quantize_tensorwise_ref(const QuantizeTensorwiseArgs& a, void*, Stream) {
  encode_ref(a.input, a.code, a.out, a.absmax.ptr<float>(), a.kName);
}
void dequantize_tensorwise_ref(const DequantizeTensorwiseArgs& a, void*, Stream) {
  decode_ref(a.input, a.code, a.out, a.absmax.ptr<const float>(), a.kName);
}

}  // namespace

void register_tensorwise() {
  constexpr const char* kReference = "cpu-reference";
  constexpr const char* kName = "cpu";
  constexpr DeviceType kCpu = DeviceType::cpu;
  OpRegistry<QuantizeNoAbsmaxArgs>::add({kReference, kCpu, 0, quantize_no_absmax_ref});
  OpRegistry<DequantizeNoAbsmaxArgs>::add({kReference, kCpu, 0, dequantize_no_absmax_ref});
  OpRegistry<QuantizeTensorwiseArgs>::add({kReference, kCpu, 0, quantize_tensorwise_ref});
  OpRegistry<DequantizeTensorwiseArgs>::add({kReference, kCpu, 0, dequantize_tensorwise_ref});
  OpRegistry<QuantizeNoAbsmaxArgs>::add({kName, kCpu, 10, quantize_no_absmax});
  OpRegistry<DequantizeNoAbsmaxArgs>::add({kName, kCpu, 10, dequantize_no_absmax});
  OpRegistry<QuantizeTensorwiseArgs>::add({kName, kCpu, 10, quantize_tensorwise});
  OpRegistry<DequantizeTensorwiseArgs>::add({kName, kCpu, 10, dequantize_tensorwise});
}

}  // namespace lowbit::core::cpu
