#include "ops/gemm/import_common.h"

#include <cstring>

#include "core/check.h"
#include "ops/gemm/common.h"

namespace lowbit::ops::gemm {

Tensor transpose_host(const TensorRef& t) {
  const Tensor h = host_copy(t);
  const int64_t rows = t.size(0), cols = t.size(1);
  const size_t e = static_cast<size_t>(dtype_bits(t.dtype) / 8);
  Tensor out = Tensor::empty({cols, rows}, t.dtype);
  const auto* src = h.ptr<const uint8_t>();
  auto* dst = out.ptr<uint8_t>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) std::memcpy(dst + (c * rows + r) * e, src + (r * cols + c) * e, e);
  }
  return out;
}

MatmulConfig imported_config(WeightType type, int64_t N, int64_t K, int64_t group_size, DType scale_dtype) {
  MatmulConfig c;
  c.N = N;
  c.K = K;
  c.W_dtype = type;
  c.group_size = group_size;
  c.with_scaling = true;
  c.A_dtype = (scale_dtype == DType::f16 || scale_dtype == DType::bf16) ? scale_dtype : DType::f16;
  c.out_dtype = c.A_dtype;
  return c;
}

void require_matrix(const char* op, const char* name, const TensorRef& t, std::initializer_list<DType> dtypes) {
  core::require_present(op, name, t);
  core::require_dtype(op, name, t, dtypes);
  core::require_contiguous(op, name, t);
  LOWBIT_REQUIRE(t.ndim == 2, ErrorCode::invalid_argument, op, ": ", name, " must be 2-D (got ", core::shape_str(t),
                 ")");
}

}  // namespace lowbit::ops::gemm
