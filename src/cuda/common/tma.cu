#include <cudaTypedefs.h>

#include <mutex>

#include "cuda/common/check.h"
#include "cuda/common/tma.h"

namespace lowbit::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder(const char* op) {
  static std::once_flag once;
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static cudaError_t status = cudaSuccess;
  static cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSuccess;
  std::call_once(once, [] {
    void* p = nullptr;
    status = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
    fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  });
  check(status, op, "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    core::fail(ErrorCode::device_error, core::cat(op, ": the driver has no cuTensorMapEncodeTiled"));
  }
  return fn;
}

}  // namespace

CUtensorMap tensor_map_2d_u16(const void* base, uint64_t rows, uint64_t cols, uint64_t row_bytes, uint32_t box_rows,
                              uint32_t box_cols, const char* op) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encoder(op)(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(base), dims, strides, box,
                                 element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    core::fail(ErrorCode::device_error,
               core::cat(op, ": cuTensorMapEncodeTiled failed (CUresult ", static_cast<int>(r), ") for a [", rows, ", ",
                         cols, "] tensor, box [", box_rows, ", ", box_cols, "]"));
  }
  return map;
}

CUtensorMap tensor_map_3d(const void* base, int elem_bytes, uint64_t depth, uint64_t rows, uint64_t cols,
                          uint64_t row_bytes, uint64_t slice_bytes, uint32_t box_rows, const char* op) {
  const CUtensorMapDataType type = elem_bytes == 1   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                                     : CU_TENSOR_MAP_DATA_TYPE_UINT32;
  CUtensorMap map{};
  const cuuint64_t dims[3] = {cols, rows, depth};
  const cuuint64_t strides[2] = {row_bytes, slice_bytes};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(128 / elem_bytes), box_rows, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encoder(op)(&map, type, 3, const_cast<void*>(base), dims, strides, box, element_strides,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    core::fail(ErrorCode::device_error,
               core::cat(op, ": cuTensorMapEncodeTiled failed (CUresult ", static_cast<int>(r), ") for a [", depth, ", ",
                         rows, ", ", cols, "] tensor of ", elem_bytes, "-byte elements, box [1, ", box_rows, ", ",
                         128 / elem_bytes, "]"));
  }
  return map;
}

CUtensorMap tensor_map_3d_f32(const void* base, uint64_t depth, uint64_t rows, uint64_t cols, uint64_t row_bytes,
                              uint64_t slice_bytes, uint32_t box_rows, uint32_t box_cols, const char* op) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {cols, rows, depth};
  const cuuint64_t strides[2] = {row_bytes, slice_bytes};
  const cuuint32_t box[3] = {box_cols, box_rows, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encoder(op)(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, const_cast<void*>(base), dims, strides, box,
                                 element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    core::fail(ErrorCode::device_error,
               core::cat(op, ": cuTensorMapEncodeTiled failed (CUresult ", static_cast<int>(r), ") for a [", depth, ", ",
                         rows, ", ", cols, "] float tensor, box [1, ", box_rows, ", ", box_cols, "]"));
  }
  return map;
}

}  // namespace lowbit::cuda
