// The C ABI's own argument conversions: NULL checks, the nested-absmax
// struct and the 4-bit type enum (DLPack itself is read by core/dlpack.h).
#include <utility>

#include "capi/capi.h"
#include "core/check.h"

namespace lowbit::capi {

void require_not_null(const char* op, const char* arg, const void* p) {
  LOWBIT_REQUIRE(p != nullptr, ErrorCode::invalid_argument, op, ": ", arg, " must not be NULL");
}

NestedAbsmax to_nested(const char* op, const lowbit_nested_absmax* n) {
  NestedAbsmax r;
  if (n == nullptr) return r;
  const std::pair<const char*, const DLTensor*> parts[] = {
      {"nested->code", n->code}, {"nested->absmax", n->absmax}, {"nested->offset", n->offset}};
  for (const auto& [name, tensor] : parts) {
    LOWBIT_REQUIRE(tensor != nullptr, ErrorCode::invalid_argument, op, ": ", name,
                   " is required when nested is given (got NULL)");
  }
  r.code = to_ref(op, "nested->code", n->code);
  r.absmax = to_ref(op, "nested->absmax", n->absmax);
  r.offset = to_ref(op, "nested->offset", n->offset);
  r.blocksize = n->blocksize;
  return r;
}

Quant4Type quant4_type(const char* op, const lowbit_quant4_type& t) {
  const int v = c_enum_value(t);
  if (v == LOWBIT_QUANT4_NF4) return Quant4Type::nf4;
  if (v == LOWBIT_QUANT4_FP4) return Quant4Type::fp4;
  core::fail(ErrorCode::invalid_argument,
             core::cat(op, ": type must be LOWBIT_QUANT4_NF4 (0) or LOWBIT_QUANT4_FP4 (1) (got ", v, ")"));
}

}  // namespace lowbit::capi
