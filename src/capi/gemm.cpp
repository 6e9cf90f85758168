// C entry points of the mixed-precision matmul: config translation, the
// lowbit_matmul and lowbit_packed_weight handles, transform and forward.
#include "lowbit/ops/gemm.h"

#include <memory>
#include <string>

#include "capi/capi.h"
#include "capi/handles.h"
#include "core/check.h"
#include "lowbit/device.h"

namespace lowbit::capi {
namespace {

// The C enums mirror WeightType and ZerosMode value for value.
#define LOWBIT_SAME_WEIGHT(c, e) static_assert(static_cast<int>(c) == static_cast<int>(WeightType::e))
LOWBIT_SAME_WEIGHT(LOWBIT_WEIGHT_INT8, int8);
LOWBIT_SAME_WEIGHT(LOWBIT_WEIGHT_INT4, int4);
LOWBIT_SAME_WEIGHT(LOWBIT_WEIGHT_INT2, int2);
LOWBIT_SAME_WEIGHT(LOWBIT_WEIGHT_INT1, int1);
LOWBIT_SAME_WEIGHT(LOWBIT_WEIGHT_UINT8, uint8);
LOWBIT_SAME_WEIGHT(LOWBIT_WEIGHT_UINT4, uint4);
LOWBIT_SAME_WEIGHT(LOWBIT_WEIGHT_UINT2, uint2);
LOWBIT_SAME_WEIGHT(LOWBIT_WEIGHT_UINT1, uint1);
LOWBIT_SAME_WEIGHT(LOWBIT_WEIGHT_NF4, nf4);
LOWBIT_SAME_WEIGHT(LOWBIT_WEIGHT_FP4, fp4);
LOWBIT_SAME_WEIGHT(LOWBIT_WEIGHT_FP4_E2M1, fp4_e2m1);
LOWBIT_SAME_WEIGHT(LOWBIT_WEIGHT_FP8_E4M3, fp8_e4m3);
LOWBIT_SAME_WEIGHT(LOWBIT_WEIGHT_FLOAT16, f16);
LOWBIT_SAME_WEIGHT(LOWBIT_WEIGHT_BFLOAT16, bf16);
static_assert(LOWBIT_WEIGHT_BFLOAT16 + 1 == kNumWeightTypes);
#undef LOWBIT_SAME_WEIGHT
static_assert(static_cast<int>(LOWBIT_ZEROS_ORIGINAL) == static_cast<int>(ZerosMode::original));
static_assert(static_cast<int>(LOWBIT_ZEROS_RESCALE) == static_cast<int>(ZerosMode::rescale));
static_assert(static_cast<int>(LOWBIT_ZEROS_QUANTIZED) == static_cast<int>(ZerosMode::quantized));

// A CUDA device must exist before anything is prepared for it.
void require_available(const char* op, Device d) {
  if (!d.is_cuda()) return;
  const int count = cuda_device_count();
  LOWBIT_REQUIRE(count > 0, ErrorCode::no_backend, op, ": device ", d.str(),
                 " is not available (no CUDA device: the library was built without CUDA or none is visible)");
  LOWBIT_REQUIRE(d.index < count, ErrorCode::invalid_argument, op, ": device_id must be below the CUDA device count ",
                 count, " (got ", d.index, ")");
}

// An argument tensor (when given) on the matmul's device.
void require_on(const char* op, const char* arg, const TensorRef& t, Device device) {
  LOWBIT_REQUIRE(!t.present() || t.device == device, ErrorCode::device_mismatch, op, ": ", arg, " must be on ",
                 device.str(), ", the matmul's device (got ", t.device.str(), ")");
}

}  // namespace

ZerosMode to_zeros_mode(const char* op, const char* arg, const lowbit_zeros_mode& m) {
  const int v = c_enum_value(m);
  LOWBIT_REQUIRE(v >= LOWBIT_ZEROS_ORIGINAL && v <= LOWBIT_ZEROS_QUANTIZED, ErrorCode::invalid_argument, op, ": ", arg,
                 " must be LOWBIT_ZEROS_ORIGINAL (0), LOWBIT_ZEROS_RESCALE (1) or LOWBIT_ZEROS_QUANTIZED (2) (got ", v,
                 ")");
  return static_cast<ZerosMode>(v);
}

MatmulConfig to_config(const char* op, const lowbit_matmul_config& c) {
  MatmulConfig m;
  if (c.M != nullptr) {
    m.M.assign(c.M, c.M + c.num_M);
  } else {
    LOWBIT_REQUIRE(c.num_M == 0, ErrorCode::invalid_argument, op, ": config->M must not be NULL for num_M ", c.num_M,
                   " (NULL with num_M 0 selects the default list)");
  }
  m.N = c.N;
  m.K = c.K;
  m.A_dtype = to_dtype(op, "config->A_dtype", c.A_dtype);
  const int w = c_enum_value(c.W_dtype);
  LOWBIT_REQUIRE(w >= 0 && w < kNumWeightTypes, ErrorCode::unsupported_dtype, op,
                 ": config->W_dtype must be a lowbit_weight_type (0 to ", kNumWeightTypes - 1, ") (got ", w, ")");
  m.W_dtype = static_cast<WeightType>(w);
  m.accum_dtype = to_dtype(op, "config->accum_dtype", c.accum_dtype);
  m.out_dtype = to_dtype(op, "config->out_dtype", c.out_dtype);
  m.layout = c.layout != nullptr ? c.layout : "nt";
  m.with_bias = c.with_bias != 0;
  m.group_size = c.group_size;
  m.with_scaling = c.with_scaling != 0;
  m.with_zeros = c.with_zeros != 0;
  m.zeros_mode = to_zeros_mode(op, "config->zeros_mode", c.zeros_mode);
  return m;
}

lowbit_matmul_config to_c_config(const MatmulConfig& c) {
  lowbit_matmul_config r;
  lowbit_matmul_config_init(&r);
  r.N = c.N;
  r.K = c.K;
  r.A_dtype = to_dl(c.A_dtype);
  r.W_dtype = static_cast<lowbit_weight_type>(c.W_dtype);
  r.accum_dtype = to_dl(c.accum_dtype);
  r.out_dtype = to_dl(c.out_dtype);
  r.with_bias = c.with_bias ? 1 : 0;
  r.group_size = c.group_size;
  r.with_scaling = c.with_scaling ? 1 : 0;
  r.with_zeros = c.with_zeros ? 1 : 0;
  r.zeros_mode = static_cast<lowbit_zeros_mode>(c.zeros_mode);
  return r;
}

}  // namespace lowbit::capi

using namespace lowbit;  // NOLINT(google-build-using-namespace): this file only forwards
using capi::guarded;
using capi::require_not_null;
using capi::to_ref;

extern "C" {

void lowbit_matmul_config_init(lowbit_matmul_config* config) {
  if (config == nullptr) return;
  // MatmulConfig's defaults (include/lowbit/ops/gemm.h), spelled as
  // constants: this function cannot report a failure.
  constexpr DLDataType kF16{kDLFloat, 16, 1}, kF32{kDLFloat, 32, 1};
  config->M = nullptr;
  config->num_M = 0;
  config->N = 0;
  config->K = 0;
  config->A_dtype = kF16;
  config->W_dtype = LOWBIT_WEIGHT_FLOAT16;
  config->accum_dtype = kF32;
  config->out_dtype = kF16;
  config->layout = "nt";
  config->with_bias = 0;
  config->group_size = -1;
  config->with_scaling = 0;
  config->with_zeros = 0;
  config->zeros_mode = LOWBIT_ZEROS_ORIGINAL;
}

const char* lowbit_weight_type_name(lowbit_weight_type type) {
  const int v = capi::c_enum_value(type);
  if (v < 0 || v >= kNumWeightTypes) return "unknown";
  // The names are string literals: data() is NUL-terminated.
  return weight_type_name(static_cast<WeightType>(v)).data();
}

lowbit_status lowbit_matmul_create(const lowbit_matmul_config* config, DLDevice device, lowbit_matmul** out) {
  constexpr const char* op = "matmul_create";
  return guarded(op, [&] {
    require_not_null(op, "config", config);
    require_not_null(op, "out", out);
    const Device d = capi::to_device(op, "device", device);
    capi::require_available(op, d);
    auto handle = std::make_unique<lowbit_matmul>(lowbit_matmul{Matmul(capi::to_config(op, *config), d)});
    *out = handle.release();
  });
}

void lowbit_matmul_destroy(lowbit_matmul* matmul) { delete matmul; }

lowbit_status lowbit_matmul_transform_weight(const lowbit_matmul* matmul, const DLTensor* weight, const DLTensor* scale,
                                             const DLTensor* zeros, const DLTensor* bias, const DLTensor* perm,
                                             lowbit_packed_weight** out) {
  constexpr const char* op = "matmul_transform_weight";
  return guarded(op, [&] {
    require_not_null(op, "matmul", matmul);
    require_not_null(op, "out", out);
    PackedWeight packed =
        matmul->op.transform_weight(to_ref(op, "weight", weight), to_ref(op, "scale", scale),
                                    to_ref(op, "zeros", zeros), to_ref(op, "bias", bias), to_ref(op, "perm", perm));
    *out = std::make_unique<lowbit_packed_weight>(lowbit_packed_weight{std::move(packed)}).release();
  });
}

lowbit_status lowbit_matmul_transform_quantized(const lowbit_matmul* matmul, const lowbit_quantized_weight* weight,
                                                lowbit_packed_weight** out) {
  constexpr const char* op = "matmul_transform_quantized";
  return guarded(op, [&] {
    require_not_null(op, "matmul", matmul);
    require_not_null(op, "weight", weight);
    require_not_null(op, "out", out);
    PackedWeight packed = matmul->op.transform_weight(weight->weight);
    *out = std::make_unique<lowbit_packed_weight>(lowbit_packed_weight{std::move(packed)}).release();
  });
}

lowbit_status lowbit_matmul_forward(const lowbit_matmul* matmul, const DLTensor* A, const lowbit_packed_weight* weight,
                                    DLTensor* out, void* stream) {
  constexpr const char* op = "matmul_forward";
  return guarded(op, [&] {
    require_not_null(op, "matmul", matmul);
    require_not_null(op, "weight", weight);
    const TensorRef a = to_ref(op, "A", A);
    const TensorRef o = to_ref(op, "out", out);
    const Device device = matmul->op.device();
    LOWBIT_REQUIRE(weight->weight.device() == device, ErrorCode::device_mismatch, op, ": weight must be on ",
                   device.str(), ", the matmul's device (got a weight packed for ", weight->weight.device().str(), ")");
    capi::require_on(op, "A", a, device);
    capi::require_on(op, "out", o, device);
    // Checked before the workspace is sized: a wrong shape is reported as such.
    check(matmul->op.args(a, weight->weight.ref(), o));
    matmul->op.forward(a, weight->weight, o, Stream{stream});
  });
}

void lowbit_packed_weight_destroy(lowbit_packed_weight* weight) { delete weight; }

lowbit_status lowbit_packed_weight_device(const lowbit_packed_weight* weight, DLDevice* device) {
  constexpr const char* op = "packed_weight_device";
  return guarded(op, [&] {
    require_not_null(op, "weight", weight);
    require_not_null(op, "device", device);
    *device = capi::to_dl(weight->weight.device());
  });
}

lowbit_status lowbit_packed_weight_nbytes(const lowbit_packed_weight* weight, size_t* nbytes) {
  constexpr const char* op = "packed_weight_nbytes";
  return guarded(op, [&] {
    require_not_null(op, "weight", weight);
    require_not_null(op, "nbytes", nbytes);
    const PackedWeight& w = weight->weight;
    size_t total = 0;
    for (const Tensor* t : {&w.qweight, &w.scale, &w.zeros, &w.bias, &w.perm}) total += t->defined() ? t->nbytes() : 0;
    *nbytes = total;
  });
}

lowbit_status lowbit_packed_weight_dequantize(const lowbit_packed_weight* weight, DLTensor* out) {
  constexpr const char* op = "packed_weight_dequantize";
  return guarded(op, [&] {
    require_not_null(op, "weight", weight);
    const TensorRef o = to_ref(op, "out", out);
    core::require_present(op, "out", o);
    core::require_dtype(op, "out", o, {DType::f32});
    const WeightFormat& f = weight->weight.format;
    core::require_shape(op, "out", o, {f.N, f.K});
    core::require_contiguous(op, "out", o);
    LOWBIT_REQUIRE(o.device.is_cpu(), ErrorCode::device_mismatch, op, ": out must be in host memory (kDLCPU; got ",
                   o.device.str(), ")");
    const Tensor w = dequantize_weight(weight->weight);
    copy(o, w);
  });
}

}  // extern "C"
