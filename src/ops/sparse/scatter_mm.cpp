// Front end of scatter_mm (lowbit/ops/sparse.h): the format's operands,
// their dtypes, shapes and devices. The index arrays' contents (in range,
// row pointers that do not decrease) are each backend's to check where the
// data lives.
#include <string>
#include <vector>

#include "core/check.h"
#include "lowbit/ops/sparse.h"
#include "ops/common.h"
#include "ops/dispatch.h"

namespace lowbit {
namespace {

// A present, contiguous array of `dtype` with `ndim` dims.
void require_array(const char* op, const char* name, const TensorRef& t, DType dtype, int ndim) {
  core::require_present(op, name, t);
  core::require_dtype(op, name, t, {dtype});
  core::require_contiguous(op, name, t);
  LOWBIT_REQUIRE(t.ndim == ndim, ErrorCode::invalid_argument, op, ": ", name, " must be ", ndim, "-D (got ",
                 core::shape_str(t), ")");
}

// An argument the format does not take: absent, so a caller mixing formats hears of it.
void require_absent(const char* op, const char* name, const TensorRef& t, ScatterMmFormat f) {
  LOWBIT_REQUIRE(!t.present(), ErrorCode::invalid_argument, op, ": the ", scatter_mm_format_name(f),
                 " format takes no ", name);
}

}  // namespace

const char* scatter_mm_format_name(ScatterMmFormat f) {
  switch (f) {
    case ScatterMmFormat::scatter_mm: return "scatter_mm";
    case ScatterMmFormat::bsr_strided_mm: return "bsr_strided_mm";
    case ScatterMmFormat::bsr_strided_mm_compressed: return "bsr_strided_mm_compressed";
  }
  return "?";
}

void check(const ScatterMmArgs& a) {
  const char* op = ScatterMmArgs::kName;
  const int f = static_cast<int>(a.format);
  LOWBIT_REQUIRE(f >= 0 && f <= 2, ErrorCode::invalid_argument, op,
                 ": format must be scatter_mm, bsr_strided_mm or bsr_strided_mm_compressed (got ", f, ")");
  core::require_present(op, "blocks", a.blocks);
  core::require_dtype(op, "blocks", a.blocks, core::kFloatDTypes);
  require_array(op, "blocks", a.blocks, a.blocks.dtype, 3);
  const DType dtype = a.blocks.dtype;
  const int64_t Ms = a.blocks.size(1), Ks = a.blocks.size(2);
  require_array(op, "others", a.others, dtype, 3);
  require_array(op, "accumulators", a.accumulators, dtype, 3);
  core::require_present(op, "c_indices", a.c_indices);
  core::require_dtype(op, "c_indices", a.c_indices, {DType::i32, DType::i64});
  const DType index = a.c_indices.dtype;
  require_array(op, "c_indices", a.c_indices, index, 1);
  LOWBIT_REQUIRE(a.c_indices.size(0) >= 1, ErrorCode::invalid_argument, op,
                 ": c_indices must hold at least one entry (got none)");
  if (a.format == ScatterMmFormat::scatter_mm) {
    require_array(op, "pq", a.pq, index, 2);
    LOWBIT_REQUIRE(a.pq.size(1) == 2, ErrorCode::invalid_argument, op, ": pq must be [G, 2] (got ",
                   core::shape_str(a.pq), ")");
    for (const auto& [name, t] :
         {std::pair{"r_offsets", &a.r_offsets}, {"p_offsets", &a.p_offsets}, {"q_offsets", &a.q_offsets}}) {
      require_absent(op, name, *t, a.format);
    }
    LOWBIT_REQUIRE(a.others.size(1) == Ks, ErrorCode::invalid_argument, op, ": others must be [Q, Ks, Ns] with Ks ", Ks,
                   " as blocks (got ", core::shape_str(a.others), ")");
    const int64_t R = a.c_indices.size(0) - 1, Ns = a.others.size(2);
    ops::require_shaped(op, "accumulators", a.accumulators, {dtype}, {R, Ms, Ns});
  } else {
    require_absent(op, "pq", a.pq, a.format);
    require_array(op, "r_offsets", a.r_offsets, index, 1);
    require_array(op, "q_offsets", a.q_offsets, index, 1);
    if (a.format == ScatterMmFormat::bsr_strided_mm) {
      require_array(op, "p_offsets", a.p_offsets, index, 1);
      LOWBIT_REQUIRE(a.c_indices.size(0) == a.r_offsets.size(0) + 1, ErrorCode::invalid_argument, op,
                     ": c_indices must hold len(r_offsets) + 1 = ", a.r_offsets.size(0) + 1, " entries (got ",
                     a.c_indices.size(0), ")");
      LOWBIT_REQUIRE(a.p_offsets.size(0) == a.q_offsets.size(0), ErrorCode::invalid_argument, op,
                     ": p_offsets and q_offsets must be as long (got ", a.p_offsets.size(0), " and ",
                     a.q_offsets.size(0), ")");
    } else {
      require_absent(op, "p_offsets", a.p_offsets, a.format);
    }
    const int64_t B = a.others.size(0), K = a.others.size(1), N = a.others.size(2), M = a.accumulators.size(1);
    LOWBIT_REQUIRE(a.split_n >= 1 && N % a.split_n == 0, ErrorCode::invalid_argument, op,
                   ": split_n must be >= 1 and divide N ", N, " (got ", a.split_n, ")");
    LOWBIT_REQUIRE(Ks <= K && Ms <= M && K % Ks == 0 && M % Ms == 0, ErrorCode::invalid_argument, op,
                   ": others' K and accumulators' M must be multiples of the block shape ", Ms, " x ", Ks, " (got K ",
                   K, ", M ", M, ")");
    LOWBIT_REQUIRE(a.accumulators.size(0) == B && a.accumulators.size(2) == N, ErrorCode::invalid_argument, op,
                   ": accumulators must be [B, M, N] with others' B ", B, " and N ", N, " (got ",
                   core::shape_str(a.accumulators), ")");
  }
  core::require_same_device(op, {{"blocks", &a.blocks},
                                 {"others", &a.others},
                                 {"c_indices", &a.c_indices},
                                 {"pq", &a.pq},
                                 {"r_offsets", &a.r_offsets},
                                 {"p_offsets", &a.p_offsets},
                                 {"q_offsets", &a.q_offsets},
                                 {"accumulators", &a.accumulators}});
}
size_t workspace_size(const ScatterMmArgs& a) { return ops::backend_workspace(a, a.blocks.device); }
void run(const ScatterMmArgs& a, void* ws, Stream s) { ops::dispatch(a, a.blocks.device, ws, s); }

}  // namespace lowbit
