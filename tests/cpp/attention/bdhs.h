// k [B, S, G, D] copied as [B, D, G, S] (FlashAtten's "ntn" k, KLayout::bdhs), for the attention tests.
#pragma once

#include <cstdint>
#include <cstring>

#include "lowbit/tensor.h"

namespace lowbit::test {

inline Tensor to_bdhs(const Tensor& k) {
  const int64_t B = k.size(0), S = k.size(1), G = k.size(2), D = k.size(3);
  Tensor t = Tensor::empty({B, D, G, S}, k.dtype());
  const size_t e = dtype_storage_bytes(k.dtype(), 1);
  const auto* src = static_cast<const uint8_t*>(k.data());
  auto* dst = static_cast<uint8_t*>(t.data());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t d = 0; d < D; ++d)
          std::memcpy(dst + (((b * D + d) * G + g) * S + s) * e, src + (((b * S + s) * G + g) * D + d) * e, e);
  return t;
}

}  // namespace lowbit::test
