// C entry points of matmul_4bit / gemv_4bit on a bitsandbytes 4-bit state's
// tensors: DLTensors in, Matmul4bitArgs out, then check / workspace / run.
#include "capi/capi.h"
#include "core/check.h"
#include "lowbit/ops/gemm.h"
#include "ops/common.h"
#include "ops/dispatch.h"

namespace lowbit::capi {
namespace {

Matmul4bitArgs matmul_4bit_args(const char* op, const DLTensor* A, const DLTensor* packed, const DLTensor* absmax,
                                const lowbit_nested_absmax* nested, const DLTensor* bias, DLTensor* out, int64_t N,
                                int64_t blocksize, const lowbit_quant4_type& type) {
  Matmul4bitArgs a;
  a.A = to_ref(op, "A", A);
  a.packed = to_ref(op, "packed", packed);
  a.absmax = to_ref(op, "absmax", absmax);
  a.nested = to_nested(op, nested);
  a.bias = to_ref(op, "bias", bias);
  a.out = to_ref(op, "out", out);
  a.N = N;
  a.blocksize = blocksize;
  a.type = quant4_type(op, type);
  return a;
}

// Checked first, so that the workspace is sized for valid arguments only;
// the scratch is stream-ordered, so nothing here waits for the device.
void run_matmul_4bit(const Matmul4bitArgs& a, void* stream) {
  check(a);
  const Stream s{stream};
  ops::run_with_workspace(a, a.A.device, s);
}

}  // namespace
}  // namespace lowbit::capi

using namespace lowbit;  // NOLINT(google-build-using-namespace): this file only forwards
using capi::guarded;

extern "C" {

lowbit_status lowbit_matmul_4bit(const DLTensor* A, const DLTensor* packed, const DLTensor* absmax,
                                 const lowbit_nested_absmax* nested, const DLTensor* bias, DLTensor* out, int64_t N,
                                 int64_t blocksize, lowbit_quant4_type type, void* stream) {
  constexpr const char* op = Matmul4bitArgs::kName;
  return guarded(op, [&] {
    capi::run_matmul_4bit(capi::matmul_4bit_args(op, A, packed, absmax, nested, bias, out, N, blocksize, type), stream);
  });
}

lowbit_status lowbit_gemv_4bit(const DLTensor* A, const DLTensor* packed, const DLTensor* absmax,
                               const lowbit_nested_absmax* nested, const DLTensor* bias, DLTensor* out, int64_t N,
                               int64_t blocksize, lowbit_quant4_type type, void* stream) {
  constexpr const char* op = "gemv_4bit";
  return guarded(op, [&] {
    const Matmul4bitArgs a = capi::matmul_4bit_args(op, A, packed, absmax, nested, bias, out, N, blocksize, type);
    core::require_present(op, "A", a.A);
    LOWBIT_REQUIRE(a.A.ndim >= 1 && a.A.size(-1) > 0 && a.A.numel() == a.A.size(-1), ErrorCode::invalid_argument, op,
                   ": A must hold one row (got ", core::shape_str(a.A), "; lowbit_matmul_4bit takes any rows)");
    capi::run_matmul_4bit(a, stream);
  });
}

}  // extern "C"
