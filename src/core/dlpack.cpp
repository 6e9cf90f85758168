// DLPack -> lowbit (tensors, devices, dtypes) and back (core/dlpack.h).
#include "core/dlpack.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "core/check.h"
#include "lowbit/c/lowbit.h"  // the fp8 type codes

namespace lowbit::core {
namespace {

// DLPack type codes by number: the 0.6 header lacks everything past kDLComplex.
constexpr uint8_t kDLBool = 6;
constexpr uint8_t kDLFloat8E4M3FN = LOWBIT_DL_FLOAT8_E4M3FN;
constexpr uint8_t kDLFloat8E5M2 = LOWBIT_DL_FLOAT8_E5M2;

// Every DLPack type the library reads, and the lowbit dtype it becomes.
struct DLMapping {
  uint8_t code;
  uint8_t bits;
  DType dtype;
};
constexpr DLMapping kDLTypes[] = {
    {kDLFloat, 32, DType::f32},
    {kDLFloat, 16, DType::f16},
    {kDLBfloat, 16, DType::bf16},
    {kDLInt, 8, DType::i8},
    {kDLInt, 32, DType::i32},
    {kDLInt, 64, DType::i64},
    {kDLUInt, 8, DType::u8},
    {kDLFloat8E4M3FN, 8, DType::f8_e4m3},
    {kDLFloat8E5M2, 8, DType::f8_e5m2},
};

bool dtype_from_dl(DLDataType t, DType* out) {
  const auto* m = std::find_if(std::begin(kDLTypes), std::end(kDLTypes),
                               [&](const DLMapping& e) { return e.code == t.code && e.bits == t.bits; });
  if (m == std::end(kDLTypes)) return false;
  *out = m->dtype;
  return true;
}

// "float32, ..., float8_e4m3fn (type code 10), ...": the fp8 codes are
// spelled out because frameworks on DLPack < 1.0 cannot name them.
std::string accepted_dtypes() {
  std::string s;
  for (const DLMapping& m : kDLTypes) {
    s += cat(s.empty() ? "" : ", ", dtype_name(m.dtype));
    if (m.code > kDLComplex) s += cat(" (type code ", static_cast<int>(m.code), ")");
  }
  return s;
}

// "float64", "complex64", "code 9 bits 8": what the caller passed, readably.
std::string describe_dl(DLDataType t) {
  const char* kind = nullptr;
  switch (t.code) {
    case kDLInt: kind = "int"; break;
    case kDLUInt: kind = "uint"; break;
    case kDLFloat: kind = "float"; break;
    case kDLOpaqueHandle: kind = "opaque"; break;
    case kDLBfloat: kind = "bfloat"; break;
    case kDLComplex: kind = "complex"; break;
    case kDLBool: kind = "bool"; break;
    default: break;
  }
  if (kind) return cat(kind, static_cast<int>(t.bits));
  return cat("DLPack type code ", static_cast<int>(t.code), " with ", static_cast<int>(t.bits), " bits");
}

// `what` follows the argument's name in messages (" dtype" for a tensor's).
DType checked_dtype(const char* op, const char* arg, const char* what, DLDataType t) {
  LOWBIT_REQUIRE(t.lanes == 1, ErrorCode::unsupported_dtype, op, ": ", arg, what, " lanes must be 1 (got ", t.lanes,
                 ")");
  DType dtype{};
  LOWBIT_REQUIRE(dtype_from_dl(t, &dtype), ErrorCode::unsupported_dtype, op, ": ", arg, what, " must be one of ",
                 accepted_dtypes(), " (got ", describe_dl(t), ")");
  return dtype;
}

}  // namespace

Device to_device(const char* op, const char* arg, DLDevice d) {
  if (d.device_type == kDLCPU) return Device::cpu();
  if (d.device_type == kDLCUDA) {
    LOWBIT_REQUIRE(d.device_id >= 0, ErrorCode::invalid_argument, op, ": ", arg,
                   " device_id must be >= 0 for kDLCUDA (got ", d.device_id, ")");
    return Device::cuda(d.device_id);
  }
  fail(ErrorCode::no_backend, cat(op, ": ", arg, " device must be kDLCPU (1) or kDLCUDA (2) (got device type ",
                                  static_cast<int>(d.device_type), ")"));
}

DLDevice to_dl(Device d) {
  DLDevice r;
  r.device_type = d.is_cuda() ? kDLCUDA : kDLCPU;
  r.device_id = d.is_cuda() ? d.index : 0;
  return r;
}

DType to_dtype(const char* op, const char* arg, DLDataType t) { return checked_dtype(op, arg, "", t); }

DLDataType to_dl(DType d) {
  const auto* m =
      std::find_if(std::begin(kDLTypes), std::end(kDLTypes), [&](const DLMapping& e) { return e.dtype == d; });
  LOWBIT_REQUIRE(m != std::end(kDLTypes), ErrorCode::internal, "C ABI: dtype ", dtype_name(d), " has no DLPack type");
  DLDataType r;
  r.code = m->code;
  r.bits = m->bits;
  r.lanes = 1;
  return r;
}

TensorRef to_ref(const char* op, const char* arg, const DLTensor* t, const DType* uint8_as) {
  if (t == nullptr) return {};
  DType dtype = checked_dtype(op, arg, " dtype", t->dtype);
  if (dtype == DType::u8 && uint8_as != nullptr) dtype = *uint8_as;

  LOWBIT_REQUIRE(t->ndim >= 0 && t->ndim <= kMaxDims, ErrorCode::invalid_argument, op, ": ", arg, " ndim must be 0 to ",
                 kMaxDims, " (got ", t->ndim, ")");
  LOWBIT_REQUIRE(t->ndim == 0 || t->shape != nullptr, ErrorCode::invalid_argument, op, ": ", arg,
                 " shape must not be NULL for ndim ", t->ndim);
  const Shape shape(t->shape, static_cast<size_t>(t->ndim));
  const int64_t numel = checked_numel(op, arg, shape, dtype);
  TensorRef ref;
  ref.dtype = dtype;
  ref.ndim = t->ndim;
  ref.device = to_device(op, arg, t->device);
  int64_t stride = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    const auto u = static_cast<size_t>(i);
    ref.shape[u] = t->shape[i];
    // DLPack: NULL strides mean compact row-major.
    ref.strides[u] = t->strides ? t->strides[i] : stride;
    stride *= t->shape[i] > 0 ? t->shape[i] : 1;
  }
  LOWBIT_REQUIRE(t->data != nullptr || numel == 0, ErrorCode::invalid_argument, op, ": ", arg,
                 " data must not be NULL for ", numel, " elements");
  ref.data = t->data ? static_cast<char*>(t->data) + t->byte_offset : nullptr;
  return ref;
}

}  // namespace lowbit::core
