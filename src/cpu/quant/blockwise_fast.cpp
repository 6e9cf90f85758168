// The CPU fast path ("cpu") of blockwise 8-bit and 4-bit quantization:
// OpenMP over blocks, loops written so the compiler vectorizes the absmax
// and 4-bit encoders, and the bucketed code encoder for 8-bit.
#include <algorithm>
#include <memory>
#include <type_traits>

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

void quantize_blockwise_fast(const QuantizeBlockwiseArgs& a, void*, Stream) {
  const int64_t n_all = a.input.numel();
  const float* code = a.code.ptr<const float>();
  const std::shared_ptr<const CodeEncoder> encoder = code_encoder_for(code, n_all);
  float mid[255];
  table_midpoints(code, 256, mid);
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    const T* x = a.input.ptr<const T>();
    uint8_t* q = a.out.ptr<uint8_t>();
    float* absmax = a.absmax.ptr<float>();
    const int64_t n = a.input.numel();
    parallel_for(ceil_div(n, a.blocksize), n, [&](int64_t b) {
      alignas(64) float xf[4096];
      const int64_t begin = b * a.blocksize, count = std::min(a.blocksize, n - begin);
      to_f32_span(x + begin, count, xf);
      const float m = absmax_span(xf, count);
      absmax[b] = m;
      const float r = absmax_reciprocal(m);
      if (encoder) {
        encode_code8_span(xf, r, count, encoder->base(), encoder->midpoints(), encoder->steps(), q + begin);
      } else {
        for (int64_t i = 0; i < count; ++i) q[begin + i] = static_cast<uint8_t>(encode_by_midpoints<8>(xf[i] * r, mid));
      }
    });
  });
}

struct AbsmaxOf {
  const TensorRef& absmax;
  const NestedAbsmax& nested;
  float operator()(int64_t b) const {
    if (!nested.present()) return absmax.ptr<const float>()[b];
    const uint8_t q = absmax.ptr<const uint8_t>()[b];
    return nested_absmax_decode(nested.code.ptr<const float>()[q],
                                nested.absmax.ptr<const float>()[b / nested.blocksize],
                                nested.offset.ptr<const float>()[0]);
  }
};

void dequantize_blockwise_fast(const DequantizeBlockwiseArgs& a, void*, Stream) {
  const float* code = a.code.ptr<const float>();
  const uint8_t* q = a.input.ptr<const uint8_t>();
  const AbsmaxOf absmax_of{a.absmax, a.nested};
  const int64_t n = a.input.numel();
  with_float_type(a.out.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    T* out = a.out.ptr<T>();
    parallel_for(ceil_div(n, a.blocksize), n, [&](int64_t b) {
      const float m = absmax_of(b);
      const int64_t begin = b * a.blocksize, end = std::min(n, begin + a.blocksize);
      alignas(64) float buf[4096];  // one block (blocksize <= 4096)
      decode8_span(q + begin, end - begin, code, m, buf);
      from_f32_span(buf, end - begin, out + begin);
    });
  });
}

void quantize_4bit_fast(const Quantize4bitArgs& a, void*, Stream) {
  float mid[15];
  table_midpoints(kNf4Table, 16, mid);
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    const T* x = a.input.ptr<const T>();
    uint8_t* out = a.out.ptr<uint8_t>();
    float* absmax = a.absmax.ptr<float>();
    const int64_t n = a.input.numel();
    const int64_t bs = a.blocksize;  // even (>= 32), so a block starts on a byte
    parallel_for(ceil_div(n, bs), n, [&](int64_t b) {
      alignas(64) float xf[4096];
      alignas(64) uint8_t codes[4096];
      const int64_t begin = b * bs, count = std::min(bs, n - begin);
      to_f32_span(x + begin, count, xf);
      const float m = absmax_span(xf, count);
      absmax[b] = m;
      const float r = absmax_reciprocal(m);
      if (a.type == Quant4Type::nf4) {
        encode_nf4_span(xf, r, count, mid, codes);
      } else {
        encode_fp4_span(xf, r, count, codes);
      }
      if (count % 2) codes[count] = 0;  // odd tail: low nibble 0
      pack_nibbles(codes, count + count % 2, out + begin / 2);
    });
  });
}

void dequantize_4bit_fast(const Dequantize4bitArgs& a, void*, Stream) {
  const float* table = a.type == Quant4Type::nf4 ? kNf4Table : kFp4Table;
  const uint8_t* packed = a.input.ptr<const uint8_t>();
  const AbsmaxOf absmax_of{a.absmax, a.nested};
  const int64_t n = a.out.numel();
  const int64_t bs = a.blocksize;
  with_float_type(a.out.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    T* out = a.out.ptr<T>();
    // Tasks of whole blocks, about 4096 elements each: the per-block work is a broadcast, not a call.
    const int64_t blocks = ceil_div(n, bs), per_task = std::max<int64_t>(1, 4096 / bs);
    parallel_for(ceil_div(blocks, per_task), n, [&](int64_t task) {
      const int64_t b0 = task * per_task, b1 = std::min(blocks, b0 + per_task);
      float scales[128];  // per_task <= 128 (bs >= 32)
      for (int64_t b = b0; b < b1; ++b) scales[b - b0] = absmax_of(b);
      const int64_t begin = b0 * bs, count = std::min(n, b1 * bs) - begin;
      if constexpr (!std::is_same_v<T, Half>) {
        if (decode4_blocks_span(packed + begin / 2, count, bs, scales, table, out + begin)) return;
      }
      alignas(64) float buf[4096];  // one block (blocksize <= 4096)
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t start = b * bs, len = std::min(bs, n - start);
        decode4_span(packed + start / 2, len, table, scales[b - b0], buf);
        from_f32_span(buf, len, out + start);
      }
    });
  });
}

}  // namespace

void register_blockwise_fast() {
  constexpr const char* kName = "cpu";
  constexpr DeviceType kCpu = DeviceType::cpu;
  OpRegistry<QuantizeBlockwiseArgs>::add({kName, kCpu, 10, quantize_blockwise_fast});
  OpRegistry<DequantizeBlockwiseArgs>::add({kName, kCpu, 10, dequantize_blockwise_fast});
  OpRegistry<Quantize4bitArgs>::add({kName, kCpu, 10, quantize_4bit_fast});
  OpRegistry<Dequantize4bitArgs>::add({kName, kCpu, 10, dequantize_4bit_fast});
}

}  // namespace lowbit::core::cpu
