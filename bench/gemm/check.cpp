#include "gemm/check.h"

#include <algorithm>
#include <cmath>

#include "internals.h"

namespace lowbit::bench {
namespace {

constexpr int64_t kCheckRows = 8;    // rows of A checked against the CPU backend
constexpr int64_t kCheckCols = 256;  // columns of each checked slice (first and last)

// Rows [r0, r0 + rows) of a contiguous 2-D host tensor.
TensorRef row_slice(const Tensor& t, int64_t r0, int64_t rows) {
  if (!t.defined()) return {};
  const int64_t cols = t.size(1);
  auto* base = static_cast<uint8_t*>(t.data()) + dtype_storage_bytes(t.dtype(), r0 * cols);
  return TensorRef::contiguous(base, t.dtype(), {rows, cols}, t.device());
}

}  // namespace

Reference make_reference(const MatmulConfig& config, const Tensor& A_host, const Tensor& weight, const Tensor& scale,
                         const Tensor& zeros) {
  Reference ref;
  ref.rows = std::min<int64_t>(kCheckRows, A_host.size(0));
  const int64_t N = config.N, n = std::min<int64_t>(N, kCheckCols);
  std::vector<int64_t> starts = {0};
  if (N > n) starts.push_back(N - n);
  const TensorRef a = row_slice(A_host, 0, ref.rows);
  for (int64_t n0 : starts) {
    MatmulConfig c = config;
    c.N = n;
    c.M = {ref.rows};
    c.out_dtype = DType::f32;
    const Matmul cpu(c, Device::cpu());
    const PackedWeight w =
        cpu.transform_weight(row_slice(weight, n0, n), row_slice(scale, n0, n), row_slice(zeros, n0, n));
    ref.slices.push_back({n0, n, cpu.forward(a, w)});
  }
  return ref;
}

double check_error(const Reference& ref, const TensorRef& out, int64_t M, int64_t N) {
  const int64_t rows = std::min(M, ref.rows);
  const Tensor host = Tensor::copy_of(TensorRef::contiguous(out.data, out.dtype, {rows, N}, out.device), Device::cpu());
  const auto* got = host.ptr<const uint16_t>();
  double err = 0.0, norm = 0.0;
  for (const Reference::Slice& s : ref.slices) {
    const float* want = s.out.ptr<const float>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < s.n; ++j) {
        const double g = f16_to_f32(got[r * N + s.n0 + j]);
        const double w = want[r * s.n + j];
        if (!std::isfinite(g)) return std::nan("");
        err += (g - w) * (g - w);
        norm += w * w;
      }
    }
  }
  return std::sqrt(err / std::max(norm, 1e-300));
}

}  // namespace lowbit::bench
