// matmul_4bit's dequantize + GEMM path: the weight dequantized into the
// workspace in A's dtype by dequantize_4bit's kernel (near copy speed), then
// one cuBLASLt GEMM with the bias in its epilogue — what bitsandbytes does for
// M > 1 (dequantize_4bit, .to(A.dtype), torch linear), without its extra
// passes. No allocation and no synchronization: the weight, the bias in the
// output's dtype (when it comes in another) and cuBLASLt's scratch all live in
// the op's workspace, so the op can be captured in a CUDA graph.
//
// Workspace: [W in A's dtype, N·K][bias in out's dtype, N][cuBLASLt scratch],
// each part 256-byte aligned.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "core/check.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/gemm/matmul_4bit.cuh"
#include "cuda/quant/ops.h"

namespace lowbit::cuda::bnb4 {
namespace {

const char* const op = Matmul4bitArgs::kName;

constexpr size_t kAlign = 256;
// cuBLAS's own default on Hopper; its split-K and stream-K kernels need scratch.
constexpr size_t kLtScratch = size_t{32} << 20;
// Plans kept per host thread before the cache starts over (one per distinct M, N, K, dtypes, alignment).
constexpr size_t kMaxPlans = 512;

size_t round_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

void lt_check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  core::fail(ErrorCode::device_error, core::cat(op, ": ", what, " failed: ", cublasLtGetStatusString(s)));
}

cudaDataType_t cuda_type(DType d) {
  return d == DType::f16 ? CUDA_R_16F : d == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

// The largest power of two dividing the address, up to 256 (what cuBLASLt's
// alignment preferences ask).
uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return a == 0 ? 256u : static_cast<uint32_t>(std::min<uintptr_t>(a & (~a + 1), 256));
}

struct Parts {
  size_t bias = 0;     // offset of the converted bias
  size_t scratch = 0;  // offset of cuBLASLt's scratch
  size_t total = 0;
};

Parts parts_of(const Matmul4bitArgs& a) {
  Parts p;
  p.bias = round_up(dtype_storage_bytes(a.A.dtype, a.N * a.A.size(-1)));
  p.scratch = p.bias + (a.bias.present() ? round_up(dtype_storage_bytes(a.out.dtype, a.N)) : 0);
  p.total = p.scratch + kLtScratch;
  return p;
}

__global__ void convert_bias(const void* in, FloatKind in_kind, void* out, FloatKind out_kind, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) store_float(out, i, out_kind, load_float(in, i, in_kind));
}

// cuBLASLt's handle for a device, one per host thread (a handle is not to
// be used by two threads at once). Never destroyed: thread-locals die at
// exit, possibly after the CUDA runtime.
cublasLtHandle_t lt_handle(int device) {
  thread_local std::vector<cublasLtHandle_t> handles;
  if (handles.size() <= static_cast<size_t>(device)) handles.resize(static_cast<size_t>(device) + 1, nullptr);
  cublasLtHandle_t& h = handles[static_cast<size_t>(device)];
  if (h == nullptr) lt_check(cublasLtCreate(&h), "cublasLtCreate");
  return h;
}

// A GEMM's descriptors and the algorithm cuBLASLt's heuristic picked for it.
//   D [N, M] (column-major, = out [M, N] row-major) = op_T(W) · A
// with W the dequantized [N, K] row-major (cuBLASLt's K×N column-major,
// transposed) and A [M, K] row-major (K×M column-major).
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w = nullptr, a = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

using PlanKey = std::tuple<int, int64_t, int64_t, int64_t, DType, DType, bool, uint32_t, uint32_t, uint32_t>;

void destroy(Plan& p) {
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  if (p.w) cublasLtMatrixLayoutDestroy(p.w);
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.d) cublasLtMatrixLayoutDestroy(p.d);
}

Plan make_plan(cublasLtHandle_t handle, int64_t M, int64_t N, int64_t K, DType ab, DType out, const void* bias,
               uint32_t align_a, uint32_t align_d) {
  Plan p;
  lt_check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t trans = CUBLAS_OP_T, none = CUBLAS_OP_N;
  lt_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)), "set TRANSA");
  lt_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)), "set TRANSB");
  if (bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    lt_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
             "set EPILOGUE");
    // The heuristic reads the pointer's alignment.
    lt_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
             "set BIAS_POINTER");
  }
  const auto k = static_cast<uint64_t>(K), n = static_cast<uint64_t>(N), m = static_cast<uint64_t>(M);
  lt_check(cublasLtMatrixLayoutCreate(&p.w, cuda_type(ab), k, n, K), "cublasLtMatrixLayoutCreate(W)");
  lt_check(cublasLtMatrixLayoutCreate(&p.a, cuda_type(ab), k, m, K), "cublasLtMatrixLayoutCreate(A)");
  lt_check(cublasLtMatrixLayoutCreate(&p.d, cuda_type(out), n, m, N), "cublasLtMatrixLayoutCreate(out)");

  cublasLtMatmulPreference_t pref = nullptr;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const size_t scratch = kLtScratch;
  const uint32_t align_w = kAlign;
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &scratch,
                                                sizeof(scratch)),
           "set MAX_WORKSPACE_BYTES");
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_w,
                                                sizeof(align_w)),
           "set MIN_ALIGNMENT_A_BYTES");
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_a,
                                                sizeof(align_a)),
           "set MIN_ALIGNMENT_B_BYTES");
  for (const auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align_d, sizeof(align_d)), "set MIN_ALIGNMENT_D_BYTES");
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.w, p.a, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
    destroy(p);
    lt_check(s, "cublasLtMatmulAlgoGetHeuristic");
    core::fail(ErrorCode::device_error, core::cat(op, ": cuBLASLt has no algorithm for M = ", M, ", N = ", N,
                                                  ", K = ", K, " (", dtype_name(ab), " -> ", dtype_name(out), ")"));
  }
  p.algo = result.algo;
  return p;
}

// The plan for this GEMM, made once per host thread and kept.
const Plan& plan_for(cublasLtHandle_t handle, int device, int64_t M, int64_t N, int64_t K, DType ab, DType out,
                     const void* bias, uint32_t align_a, uint32_t align_d) {
  thread_local std::map<PlanKey, Plan> plans;
  const PlanKey key{device, M, N, K, ab, out, bias != nullptr, align_a, align_d, bias ? alignment(bias) : 0u};
  const auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  if (plans.size() >= kMaxPlans) {
    for (auto& [k, p] : plans) destroy(p);
    plans.clear();
  }
  return plans.emplace(key, make_plan(handle, M, N, K, ab, out, bias, align_a, align_d)).first->second;
}

}  // namespace

bool dequant_gemm_fits(const Matmul4bitArgs& a) { return a.out.dtype == a.A.dtype || a.out.dtype == DType::f32; }

size_t dequant_gemm_workspace(const Matmul4bitArgs& a) { return parts_of(a).total; }

void run_dequant_gemm(const Matmul4bitArgs& a, void* workspace, cudaStream_t stream) {
  const int64_t K = a.A.size(-1), M = rows_of(a), N = a.N;
  LOWBIT_REQUIRE(workspace != nullptr, ErrorCode::invalid_argument, op, ": the workspace is required (",
                 dequant_gemm_workspace(a), " bytes, workspace_size)");
  const Parts parts = parts_of(a);
  char* ws = static_cast<char*>(workspace);

  Dequantize4bitArgs d;
  d.input = a.packed;
  d.absmax = a.absmax;
  d.nested = a.nested;
  d.out = TensorRef::contiguous(ws, a.A.dtype, {N * K}, a.A.device);
  d.blocksize = a.blocksize;
  d.type = a.type;
  dequantize_4bit(d, nullptr, Stream{stream});

  const void* bias = nullptr;
  if (a.bias.present()) {
    bias = a.bias.data;
    if (a.bias.dtype != a.out.dtype) {  // the epilogue takes the bias in the output's dtype
      void* converted = ws + parts.bias;
      convert_bias<<<static_cast<unsigned>(ceil_div(N, int64_t{256})), 256, 0, stream>>>(
          a.bias.data, kind_of(a.bias.dtype), converted, kind_of(a.out.dtype), N);
      check_launch(op, "convert_bias");
      bias = converted;
    }
  }

  const cublasLtHandle_t handle = lt_handle(a.A.device.index);
  const Plan& plan = plan_for(handle, a.A.device.index, M, N, K, a.A.dtype, a.out.dtype, bias, alignment(a.A.data),
                              alignment(a.out.data));
  if (bias) {
    lt_check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
             "set BIAS_POINTER");
  }
  const float one = 1.0f, zero = 0.0f;
  lt_check(cublasLtMatmul(handle, plan.desc, &one, ws, plan.w, a.A.data, plan.a, &zero, a.out.data, plan.d, a.out.data,
                          plan.d, &plan.algo, ws + parts.scratch, kLtScratch, stream),
           "cublasLtMatmul");
}

}  // namespace lowbit::cuda::bnb4
