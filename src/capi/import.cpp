// C entry points of the checkpoint importers: DLTensors in, a
// lowbit_quantized_weight handle out.
#include <memory>
#include <string>

#include "capi/capi.h"
#include "capi/handles.h"
#include "core/check.h"
#include "lowbit/ops/gemm.h"
#include "lowbit/quant_state.h"

namespace lowbit::capi {
namespace {

// An owning host copy for the QuantState the C++ importer takes (the
// importer reads its tensors on the host anyway).
Tensor host_tensor(const char* op, const char* arg, const DLTensor* t) {
  const TensorRef r = to_ref(op, arg, t);
  core::require_present(op, arg, r);
  core::require_contiguous(op, arg, r);
  return Tensor::copy_of(r, Device::cpu());
}

void emit(QuantizedWeight w, lowbit_quantized_weight** out) {
  *out = std::make_unique<lowbit_quantized_weight>(lowbit_quantized_weight{std::move(w)}).release();
}

}  // namespace
}  // namespace lowbit::capi

using namespace lowbit;  // NOLINT(google-build-using-namespace): this file only forwards
using capi::guarded;
using capi::require_not_null;
using capi::to_ref;

extern "C" {

lowbit_status lowbit_import_gptq(const DLTensor* qweight, const DLTensor* qzeros, const DLTensor* scales,
                                 const DLTensor* g_idx, const DLTensor* bias, int bits, int64_t group_size,
                                 int zero_plus_one, lowbit_zeros_mode zeros_mode, lowbit_quantized_weight** out) {
  constexpr const char* op = "import_gptq";
  return guarded(op, [&] {
    require_not_null(op, "out", out);
    GptqTensors t;
    t.qweight = to_ref(op, "qweight", qweight);
    t.qzeros = to_ref(op, "qzeros", qzeros);
    t.scales = to_ref(op, "scales", scales);
    t.g_idx = to_ref(op, "g_idx", g_idx);
    t.bias = to_ref(op, "bias", bias);
    GptqOptions o;
    o.bits = bits;
    o.group_size = group_size;
    o.zero_plus_one = zero_plus_one != 0;
    o.zeros_mode = capi::to_zeros_mode(op, "zeros_mode", zeros_mode);
    capi::emit(import_gptq(t, o), out);
  });
}

lowbit_status lowbit_import_awq(const DLTensor* qweight, const DLTensor* qzeros, const DLTensor* scales,
                                const DLTensor* bias, int64_t group_size, lowbit_quantized_weight** out) {
  constexpr const char* op = "import_awq";
  return guarded(op, [&] {
    require_not_null(op, "out", out);
    AwqTensors t;
    t.qweight = to_ref(op, "qweight", qweight);
    t.qzeros = to_ref(op, "qzeros", qzeros);
    t.scales = to_ref(op, "scales", scales);
    t.bias = to_ref(op, "bias", bias);
    capi::emit(import_awq(t, group_size), out);
  });
}

lowbit_status lowbit_import_bnb_4bit(const DLTensor* packed, const DLTensor* absmax, const lowbit_nested_absmax* nested,
                                     const DLTensor* bias, int64_t N, int64_t K, int64_t blocksize,
                                     lowbit_quant4_type type, DLDataType dtype, lowbit_quantized_weight** out) {
  constexpr const char* op = "import_bnb_4bit";
  return guarded(op, [&] {
    require_not_null(op, "out", out);
    const Quant4Type qtype = capi::quant4_type(op, type);
    LOWBIT_REQUIRE(N >= 1 && K >= 1, ErrorCode::invalid_argument, op, ": N and K must be positive (got N = ", N,
                   ", K = ", K, ")");
    QuantState s;
    s.quant_type = qtype == Quant4Type::nf4 ? "nf4" : "fp4";
    s.shape = {N, K};
    s.blocksize = blocksize;
    s.dtype = capi::to_dtype(op, "dtype", dtype);
    LOWBIT_REQUIRE(s.dtype == DType::f32 || s.dtype == DType::f16 || s.dtype == DType::bf16,
                   ErrorCode::unsupported_dtype, op, ": dtype must be float32, float16 or bfloat16 (got ",
                   dtype_name(s.dtype), ")");
    s.absmax = capi::host_tensor(op, "absmax", absmax);
    if (nested != nullptr) {
      const NestedAbsmax n = capi::to_nested(op, nested);  // checks that all three are given
      auto s2 = std::make_shared<QuantState>();
      s2->absmax = capi::host_tensor(op, "nested->absmax", nested->absmax);
      s2->code = capi::host_tensor(op, "nested->code", nested->code);
      s2->blocksize = n.blocksize;
      s2->dtype = DType::f32;
      s.offset = capi::host_tensor(op, "nested->offset", nested->offset);
      s.state2 = std::move(s2);
    }
    capi::emit(import_bnb_4bit(to_ref(op, "packed", packed), s, to_ref(op, "bias", bias)), out);
  });
}

lowbit_status lowbit_quantized_weight_config(const lowbit_quantized_weight* weight, lowbit_matmul_config* config) {
  constexpr const char* op = "quantized_weight_config";
  return guarded(op, [&] {
    require_not_null(op, "weight", weight);
    require_not_null(op, "config", config);
    *config = capi::to_c_config(weight->weight.config);
  });
}

void lowbit_quantized_weight_destroy(lowbit_quantized_weight* weight) { delete weight; }

}  // extern "C"
