// int8_linear on CUDA (lowbit/ops/int8_gemm.h, docs/int8.md): its three
// steps with nothing read on the host. Where a's rows are whole aligned
// 16-byte vectors:
//   - up to kInt8LinearRowsMax rows (the decode batches), two launches:
//     int8_linear_quant_bits (codes, statistics, each row's outlier bits),
//     then int8_linear_rows, launched while it runs (int8_linear_rows.cu);
//   - more rows, four launches:
//     1. one memset: the outlier mask and the quantization's CTA count;
//     2. int8_linear_quant: a's rows to int8 with the outlier columns marked
//        as they are seen; the last CTA lists the marked columns and zeroes
//        their codes (no separate marking pass over a, no compaction launch);
//     3. int8_scaled_mm (the dequantization and bias in its epilogue);
//     4. the outlier columns' fp32 terms added into out (their list from 2).
// Elsewhere the three ops int8_linear names, each as its own op runs.
// Every way the CPU's bits.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/gemm/int8_linear_rows.h"
#include "cuda/gemm/ops.h"
#include "cuda/quant/int8.h"
#include "cuda/quant/ops.h"

namespace lowbit::cuda {
namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The workspace: q [rows, K] i8, row_stats [rows] f32, outliers [1 + K] i32
// ({count, columns}), then the quantization's CTA count (u32) and the mask
// [K] u8, zeroed by one memset; for few rows, their outlier bits
// [rows, ceil(K / 32)] u32.
struct Layout {
  size_t row_stats, outliers, done, bits, bytes;
};

int64_t rows_of(const Int8LinearArgs& a) {
  const int64_t K = a.a.size(-1);
  return K == 0 ? 0 : a.a.numel() / K;
}

Layout layout_of(const Int8LinearArgs& a) {
  const auto K = static_cast<size_t>(a.a.size(-1));
  const auto rows = static_cast<size_t>(rows_of(a));
  Layout l{};
  l.row_stats = align_up(rows * K);
  l.outliers = l.row_stats + align_up(rows * sizeof(float));
  l.done = l.outliers + align_up((K + 1) * sizeof(int32_t));
  l.bits = l.done + align_up(sizeof(unsigned) + K);
  const size_t bits = rows <= kInt8LinearRowsMax ? rows * ((K + 31) / 32) * sizeof(uint32_t) : 0;
  l.bytes = l.bits + align_up(bits);
  return l;
}

// Whether the call takes the few-rows kernel: config names it, or none is
// given and the rows are few enough; a's rows aligned vectors either way.
bool takes_rows_kernel(const Int8LinearArgs& a, const int8_t* q) {
  const int64_t rows = rows_of(a);
  const bool asked = is_int8_linear_rows_config(a.config);
  LOWBIT_REQUIRE(!asked || (rows <= kInt8LinearRowsMax && int8_linear_quant_fits(a.a, q)), ErrorCode::invalid_argument,
                 Int8LinearArgs::kName, ": config '", a.config.name(), "' takes at most ", kInt8LinearRowsMax,
                 " rows of activations whose rows are whole aligned 16-byte vectors (got ", rows, " rows of ",
                 a.a.size(-1), " ", dtype_name(a.a.dtype), ")");
  return asked || (a.config.empty() && rows >= 1 && rows <= kInt8LinearRowsMax && int8_linear_quant_fits(a.a, q));
}

Int8ScaledMmArgs gemm_args(const Int8LinearArgs& a, const TensorRef& q, const TensorRef& row_stats) {
  return Int8ScaledMmArgs{q, a.b, row_stats, a.b_stats, a.bias, a.out, a.config};
}

}  // namespace

size_t int8_linear_workspace(const Int8LinearArgs& a) { return layout_of(a).bytes; }

std::vector<KernelConfig> int8_linear_configs(const Int8LinearArgs& a) {
  const int64_t rows = rows_of(a);
  // The GEMM's configs for codes in the workspace (aligned like its start).
  void* aligned = reinterpret_cast<void*>(uintptr_t{kAlign});
  const TensorRef q = TensorRef::contiguous(aligned, DType::i8, a.a.sizes(), a.a.device);
  const TensorRef stats = TensorRef::contiguous(aligned, DType::f32, {rows}, a.a.device);
  Int8ScaledMmArgs g = gemm_args(a, q, stats);
  g.config = {};
  std::vector<KernelConfig> out;
  Int8LinearArgs plain = a;
  plain.config = {};
  if (takes_rows_kernel(plain, static_cast<const int8_t*>(aligned))) out.push_back(int8_linear_rows_config(rows));
  for (const KernelConfig& c : int8_scaled_mm_configs(g)) out.push_back(c);
  return out;
}

void int8_linear(const Int8LinearArgs& a, void* workspace, Stream stream) {
  const char* op = Int8LinearArgs::kName;
  const int64_t K = a.a.size(-1), rows = rows_of(a), N = a.b.shape[0];
  if (rows == 0 || N == 0) return;
  const Layout l = layout_of(a);
  auto* ws = static_cast<uint8_t*>(workspace);
  auto* q = reinterpret_cast<int8_t*>(ws);
  auto* row_stats = reinterpret_cast<float*>(ws + l.row_stats);
  auto* outliers = reinterpret_cast<int32_t*>(ws + l.outliers);
  auto* done = reinterpret_cast<unsigned*>(ws + l.done);
  uint8_t* mask = ws + l.done + sizeof(unsigned);
  const bool marks = a.threshold > 0.0f;
  const TensorRef q_ref = TensorRef::contiguous(q, DType::i8, a.a.sizes(), a.a.device);
  const TensorRef stats_ref = TensorRef::contiguous(row_stats, DType::f32, {rows}, a.a.device);
  const TensorRef mask_ref = marks ? TensorRef::contiguous(mask, DType::u8, {K}, a.a.device) : TensorRef{};
  const Int8LinearOutliersArgs terms{a.a, mask_ref, a.b, a.b_stats, a.out};
  DeviceGuard guard(a.a.device.index, op);
  if (takes_rows_kernel(a, q)) {
    uint32_t* bits = marks ? reinterpret_cast<uint32_t*>(ws + l.bits) : nullptr;
    int8_linear_quant_bits(a.a, a.threshold, q, row_stats, bits, to_cuda(stream));
    int8_linear_rows(a, q, row_stats, bits, to_cuda(stream));
    return;
  }
  if (int8_linear_quant_fits(a.a, q)) {
    if (marks) {
      check(cudaMemsetAsync(done, 0, sizeof(unsigned) + static_cast<size_t>(K), to_cuda(stream)), op,
            "cudaMemsetAsync(outlier mask)");
    }
    int8_linear_quant(a.a, a.threshold, q, row_stats, marks ? mask : nullptr, outliers, done, to_cuda(stream));
    int8_scaled_mm(gemm_args(a, q_ref, stats_ref), nullptr, stream);
    if (marks) int8_linear_outlier_terms(terms, outliers, stream);
    return;
  }
  int8_vectorwise_quant(Int8VectorwiseQuantArgs{a.a, q_ref, stats_ref, mask_ref, a.threshold}, nullptr, stream);
  int8_scaled_mm(gemm_args(a, q_ref, stats_ref), nullptr, stream);
  if (marks) int8_linear_outliers(terms, outliers, stream);
}

}  // namespace lowbit::cuda
