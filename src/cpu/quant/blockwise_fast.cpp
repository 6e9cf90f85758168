// The CPU fast path ("cpu") of blockwise 8-bit and 4-bit quantization:
// OpenMP over blocks, loops written so the compiler vectorizes the absmax
// and 4-bit encoders, and the bucketed code encoder for 8-bit.
#include <algorithm>
#include <memory>

#include "core/quant_math.h"
#include "core/registry.h"
#include "core/tables.h"
#include "cpu/quant/code_encoder.h"
#include "cpu/quant/elementwise.h"
#include "cpu/quant/impls.h"
#include "cpu/quant/parallel.h"

namespace lowbit::core::cpu {
namespace {

// Below this many elements, building the encoder's bucket table (~1 ms)
// costs more than the binary search it saves.
constexpr int64_t kEncoderTableMin = int64_t{1} << 18;

template <class T>
float block_absmax(const T* x, int64_t count) {
  float m = 0.0f;
  for (int64_t i = 0; i < count; ++i) m = absmax_update(m, to_f32(x[i]));
  return m;
}

void quantize_blockwise_fast(const QuantizeBlockwiseArgs& a, void*, Stream) {
  const float* code = a.code.ptr<const float>();
  const int64_t n = a.input.numel();
  std::unique_ptr<CodeEncoder> table;
  float mid[255];
  table_midpoints(code, 256, mid);
  if (n >= kEncoderTableMin) table = std::make_unique<CodeEncoder>(code);
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    const T* x = a.input.ptr<const T>();
    uint8_t* q = a.out.ptr<uint8_t>();
    float* absmax = a.absmax.ptr<float>();
    const int64_t nblocks = ceil_div(n, a.blocksize);
    parallel_for(nblocks, n, [&](int64_t b) {
      const int64_t begin = b * a.blocksize, count = std::min(a.blocksize, n - begin);
      const float m = block_absmax(x + begin, count);
      absmax[b] = m;
      const float r = absmax_reciprocal(m);
      if (table) {
        for (int64_t i = begin; i < begin + count; ++i) q[i] = static_cast<uint8_t>((*table)(to_f32(x[i]) * r));
      } else {
        for (int64_t i = begin; i < begin + count; ++i) {
          q[i] = static_cast<uint8_t>(encode_by_midpoints<8>(to_f32(x[i]) * r, mid));
        }
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
      for (int64_t i = begin; i < end; ++i) out[i] = from_f32<T>(code[q[i]] * m);
    });
  });
}

template <Quant4Type kType>
uint32_t encode4(float y, const float* mid) {
  if constexpr (kType == Quant4Type::nf4) {
    return encode_by_midpoints<4>(y, mid);
  } else {
    return encode_fp4(y);
  }
}

template <Quant4Type kType, class T>
void quantize_4bit_typed(const Quantize4bitArgs& a) {
  float mid[15];
  table_midpoints(kNf4Table, 16, mid);
  const T* x = a.input.ptr<const T>();
  uint8_t* out = a.out.ptr<uint8_t>();
  float* absmax = a.absmax.ptr<float>();
  const int64_t n = a.input.numel();
  const int64_t bs = a.blocksize;  // even (>= 32), so a block starts on a byte
  parallel_for(ceil_div(n, bs), n, [&](int64_t b) {
    const int64_t begin = b * bs, count = std::min(bs, n - begin);
    const float m = block_absmax(x + begin, count);
    absmax[b] = m;
    const float r = absmax_reciprocal(m);
    const int64_t pairs = count / 2;
    uint8_t* o = out + begin / 2;
    const T* xb = x + begin;
    for (int64_t j = 0; j < pairs; ++j) {
      const uint32_t hi = encode4<kType>(to_f32(xb[2 * j]) * r, mid);
      const uint32_t lo = encode4<kType>(to_f32(xb[2 * j + 1]) * r, mid);
      o[j] = static_cast<uint8_t>(hi << 4 | lo);
    }
    if (count % 2) o[pairs] = static_cast<uint8_t>(encode4<kType>(to_f32(xb[count - 1]) * r, mid) << 4);
  });
}

void quantize_4bit_fast(const Quantize4bitArgs& a, void*, Stream) {
  with_float_type(a.input.dtype, a.kName, [&](auto t) {
    using T = decltype(t);
    if (a.type == Quant4Type::nf4) {
      quantize_4bit_typed<Quant4Type::nf4, T>(a);
    } else {
      quantize_4bit_typed<Quant4Type::fp4, T>(a);
    }
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
    parallel_for(ceil_div(n, bs), n, [&](int64_t b) {
      const float m = absmax_of(b);
      const int64_t begin = b * bs, count = std::min(bs, n - begin);
      const uint8_t* p = packed + begin / 2;
      T* o = out + begin;
      for (int64_t j = 0; j < count / 2; ++j) {
        o[2 * j] = from_f32<T>(table[p[j] >> 4] * m);
        o[2 * j + 1] = from_f32<T>(table[p[j] & 0xfu] * m);
      }
      if (count % 2) o[count - 1] = from_f32<T>(table[p[count / 2] >> 4] * m);
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
