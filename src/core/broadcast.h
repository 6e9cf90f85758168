// NumPy's broadcasting of leading (batch) dimensions, for the ops whose
// operands broadcast: the joined shape, and an operand's element strides
// over it (0 along a dimension it repeats).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "lowbit/tensor.h"

namespace lowbit::core {

// *out = the broadcast of a and b (right-aligned; a size-1 dim repeats);
// false where a pair of dims differs and neither is 1.
inline bool broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::vector<int64_t>* out) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> r(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) return false;
    r[i] = x == 1 ? y : x;
  }
  *out = std::move(r);
  return true;
}

// The strides (in elements) of a contiguous array of `dims` read as an
// array of `to` (dims broadcast to to, right-aligned): 0 where it repeats.
inline std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& dims, const std::vector<int64_t>& to) {
  std::vector<int64_t> s(to.size(), 0);
  int64_t run = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    const size_t d = dims.size() - 1 - i, t = to.size() - 1 - i;
    s[t] = dims[d] == 1 && to[t] != 1 ? 0 : run;
    run *= dims[d];
  }
  return s;
}

// The element offset of flat index `flat` of an array of `to` through `strides`.
inline int64_t broadcast_offset(int64_t flat, const std::vector<int64_t>& to, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (size_t i = to.size(); i-- > 0;) {
    off += flat % to[i] * strides[i];
    flat /= to[i];
  }
  return off;
}

// t's dims before its last `tail` dims (its batch dims, for the ops whose matrices broadcast).
inline std::vector<int64_t> lead_dims(const TensorRef& t, int tail) {
  const Shape s = t.sizes();
  return std::vector<int64_t>(s.begin(), s.end() - tail);
}

}  // namespace lowbit::core
