// The CUDA matmul (MatmulArgs): Params from the call's tensors, a plan from
// the selection (select.h; made once per host thread and call shape), and its
// launch plus, when K is split, reduce_splits.
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/weight_format.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/tma.h"
#include "cuda/gemm/ops.h"
#include "cuda/gemm/select.h"

namespace lowbit::cuda {
namespace gemm {
namespace {

const char* const op = MatmulArgs::kName;

// The fields of Params every layout shares: A, out, bias, the packed codes,
// the format's rule and its integer-code constants.
void fill_common(Params& p, const MatmulArgs& a) {
  const PackedWeightRef& w = a.weight;
  const WeightFormat& f = w.format;
  p.M = a.A.numel() / a.A.size(-1);
  p.N = f.N;
  p.K = f.K;
  p.A = static_cast<const uint16_t*>(a.A.data);
  p.lda = p.K;
  p.perm = w.perm.present() ? w.perm.ptr<const int32_t>() : nullptr;
  p.qweight = w.qweight.ptr<const uint8_t>();
  p.a_vec = !p.perm && p.K % 8 == 0 && aligned16(a.A.data);
  p.bits = core::weight_bits(f.type);
  p.bias = f.with_bias ? w.bias.ptr<const float>() : nullptr;
  p.gs = f.group_length();
  p.gs_shift = (p.gs & (p.gs - 1)) == 0 ? log2_exact(p.gs) : -1;
  p.G = f.groups();
  p.out = a.out.data;
  p.out_kind = a.out.dtype == DType::f32 ? OutKind::f32 : a.out.dtype == DType::f16 ? OutKind::f16 : OutKind::bf16;
  p.wtype = static_cast<uint8_t>(f.type);
  p.rule = static_cast<uint8_t>(core::dequant_rule(f));
  const core::WeightTypeInfo info = core::weight_type_info(f.type);
  p.xor_word = 0;
  p.code_mul = 1.0f;
  p.code_bias = 0.0f;
  if (info.kind == core::WeightKind::sint) {
    const uint32_t sign = 1u << (info.bits - 1);
    for (int b = 0; b < 32; b += info.bits) p.xor_word |= sign << b;
    p.code_bias = static_cast<float>(sign);
  } else if (info.kind == core::WeightKind::pm1) {
    p.code_mul = 2.0f;
    p.code_bias = 1.0f;
  }
  if (const float* t = core::weight_table16(f.type)) std::copy(t, t + 16, p.table);
}

// The rows layout's fields of Params: its scales and zeros.
void fill_rows(Params& p, const MatmulArgs& a) {
  const PackedWeightRef& w = a.weight;
  const WeightFormat& f = w.format;
  p.row_bytes = w.qweight.size(1);
  p.scale = f.with_scaling ? w.scale.ptr<const float>() : nullptr;
  const bool qzeros = f.with_zeros && f.zeros_mode == ZerosMode::quantized;
  p.zeros = f.with_zeros && !qzeros ? w.zeros.ptr<const float>() : nullptr;
  p.qzeros = qzeros ? w.zeros.ptr<const uint8_t>() : nullptr;
  p.qzeros_bytes = core::packed_zeros_words(f.N, p.bits) * 4;
}

// The tiles layout's fields of Params: its tile geometry, scales and zero codes.
void fill_tiles(Params& p, const MatmulArgs& a) {
  const PackedWeightRef& w = a.weight;
  const WeightFormat& f = w.format;
  p.xor_word = 0;  // intN codes are stored in offset binary (core::tile_code)
  p.k_tiles = core::tiles_k_tiles(f.K, p.bits);
  p.np = core::tiles_padded_rows(f.N);
  if (f.with_scaling) {
    p.tscale = w.scale.data;
    p.scale_kind = w.scale.dtype == DType::f32   ? ScaleKind::f32
                   : w.scale.dtype == DType::f16 ? ScaleKind::f16
                                                 : ScaleKind::bf16;
  }
  if (f.with_zeros) p.zcodes = w.zeros.ptr<const uint8_t>();
}

// Every field of Params that the call's tensors give (all but the plan's
// choices, k_split and splits).
void fill_params(Params& p, const MatmulArgs& a) {
  fill_common(p, a);
  if (a.weight.format.layout == WeightLayout::rows) {
    fill_rows(p, a);
  } else {
    fill_tiles(p, a);
  }
}

Problem problem_of(const MatmulArgs& a) {
  LOWBIT_REQUIRE(a.weight.format.K < (int64_t{1} << 31) - 4096, ErrorCode::invalid_argument, op,
                 ": K must be below 2^31 - 4096 on cuda (got ", a.weight.format.K, ")");
  Problem pr;
  pr.args = &a;
  fill_params(pr.p, a);
  pr.m = a.prepared_m > 0 ? a.prepared_m : pr.p.M;
  pr.bf16 = a.A.dtype == DType::bf16;
  pr.table = core::weight_type_info(a.weight.format.type).kind == core::WeightKind::table;
  return pr;
}

// What a plan's choices (kernel, grid, splits, workspace) depend on: the
// device, the format, the dtypes, M, the config, and of the addresses only
// whether A can be read in place (16-byte aligned, no permutation).
struct PlanKey {
  int device = 0;
  WeightFormat format;
  DType a_dtype{}, scale_dtype{};
  int64_t M = 0, prepared_m = 0;
  KernelConfig config;
  bool perm = false, a_aligned = false;
  bool operator==(const PlanKey&) const = default;
};

PlanKey key_of(const MatmulArgs& a, int device) {
  PlanKey k;
  k.device = device;
  k.format = a.weight.format;
  k.a_dtype = a.A.dtype;
  k.scale_dtype = a.weight.format.with_scaling ? a.weight.scale.dtype : DType::f32;
  k.M = a.A.numel() / a.A.size(-1);
  k.prepared_m = a.prepared_m;
  k.config = a.config;
  k.perm = a.weight.perm.present();
  k.a_aligned = aligned16(a.A.data);
  return k;
}

// A plan's choices (kernel, grid, splits) with Params filled from the tensors
// of `a`, a call of the shape the plan was made for.
Plan with_tensors(const Plan& made, const MatmulArgs& a) {
  Plan plan = made;
  Params& p = plan.p;
  p = Params{};
  fill_params(p, a);
  p.k_split = made.p.k_split;
  p.splits = made.p.splits;
  return plan;
}

// Plans kept per host thread before the cache starts over.
constexpr size_t kMaxPlans = 256;

// The plan for `a`: its choices made once per host thread and key (a call
// sizes its workspace, checks it and runs, each asking), the addresses and
// geometry of Params filled from `a` on every call.
Plan plan_for(const MatmulArgs& a) {
  thread_local std::vector<std::pair<PlanKey, Plan>> plans;
  int device = 0;
  check(cudaGetDevice(&device), op, "cudaGetDevice");
  const PlanKey key = key_of(a, device);
  for (const auto& [k, cached] : plans) {
    if (k == key) return with_tensors(cached, a);
  }
  Plan plan = select_plan(problem_of(a));
  if (plans.size() >= kMaxPlans) plans.clear();
  plans.emplace_back(key, plan);
  return plan;
}

std::mutex prepared_mutex;
std::set<std::pair<const void*, int>> prepared;

}  // namespace

void prepare(const KernelInfo& k, const char* name) {
  if (k.smem <= 48 * 1024) return;
  int device = 0;
  check(cudaGetDevice(&device), name, "cudaGetDevice");
  const std::lock_guard<std::mutex> lock(prepared_mutex);
  if (!prepared.insert({k.kernel, device}).second) return;
  check(cudaFuncSetAttribute(k.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(k.smem)), name,
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
}

}  // namespace gemm

std::vector<KernelConfig> matmul_configs(const MatmulArgs& a) {
  if (a.A.numel() == 0) return {};  // no rows: nothing runs
  DeviceGuard guard(a.A.device.index, gemm::op);
  return gemm::ranked_configs(gemm::problem_of(a));
}

size_t matmul_workspace(const MatmulArgs& a) {
  if (a.A.numel() == 0) return 0;
  DeviceGuard guard(a.A.device.index, gemm::op);
  return gemm::plan_for(a).bytes();
}

namespace gemm {
namespace {

// Runs a plan whose Params hold the call's tensors: A gathered first when the
// kernel cannot read it in place, the kernel, then the sum of the K splits.
void launch(Plan& plan, void* workspace, cudaStream_t s) {
  Params& p = plan.p;
  LOWBIT_REQUIRE(plan.bytes() == 0 || workspace != nullptr, ErrorCode::invalid_argument, op, ": a workspace of ",
                 plan.bytes(), " bytes is required (workspace_size); got none");
  auto blocks_for = [](int64_t total) {
    return static_cast<int>(
        std::max<int64_t>(1, std::min<int64_t>(ceil_div(total, int64_t{256}), int64_t{8} * sm_count(op))));
  };
  if (plan.partial_bytes > 0) p.partial = static_cast<float*>(workspace);
  if (plan.a_lda) {
    auto* a_copy = reinterpret_cast<uint16_t*>(static_cast<char*>(workspace) + plan.partial_bytes);
    gather_a_launch(p, a_copy, plan.a_lda, blocks_for(p.M * plan.a_lda), s);
    p.A = a_copy;
    p.lda = plan.a_lda;
    p.perm = nullptr;
  }
  CUtensorMap tmap{};
  void* args_plain[] = {&p};
  void* args_tma[] = {&tmap, &p};
  if (plan.k.tma) {
    // A [M, K] in boxes of [rows of M a block, 64] (the kernel's stage).
    tmap = tensor_map_2d_u16(p.A, static_cast<uint64_t>(p.M), static_cast<uint64_t>(p.K),
                             static_cast<uint64_t>(p.lda) * 2, static_cast<uint32_t>(plan.k.m_tile), 64, op);
  }
  check(cudaLaunchKernel(plan.k.kernel, plan.grid, dim3(plan.k.threads), plan.k.tma ? args_tma : args_plain,
                         plan.k.smem, s),
        op, "launch of the matmul kernel");
  if (p.splits > 1) reduce_splits_launch(p, blocks_for(p.M * p.N), s, device_is_sm90(op));
}

// A plan made once for a caller that keys it by the call's shape (Matmul).
class PreparedMatmul final : public core::PreparedOp<MatmulArgs> {
 public:
  PreparedMatmul(Plan plan, int device) : plan_(std::move(plan)), device_(device) {}
  size_t workspace() const override { return plan_.bytes(); }
  void run(const MatmulArgs& a, void* workspace, Stream stream) const override {
    DeviceGuard guard(device_, op);
    Plan plan = with_tensors(plan_, a);
    launch(plan, workspace, to_cuda(stream));
  }

 private:
  Plan plan_;
  int device_;
};

}  // namespace
}  // namespace gemm

void matmul(const MatmulArgs& a, void* workspace, Stream stream) {
  if (a.A.numel() == 0) return;  // no rows: nothing to write
  DeviceGuard guard(a.A.device.index, gemm::op);
  gemm::Plan plan = gemm::plan_for(a);
  gemm::launch(plan, workspace, to_cuda(stream));
}

std::shared_ptr<const core::PreparedOp<MatmulArgs>> matmul_prepare(const MatmulArgs& a) {
  LOWBIT_REQUIRE(a.A.numel() > 0, ErrorCode::internal, gemm::op, ": a plan needs rows of A");
  DeviceGuard guard(a.A.device.index, gemm::op);
  return std::make_shared<gemm::PreparedMatmul>(gemm::select_plan(gemm::problem_of(a)), a.A.device.index);
}

}  // namespace lowbit::cuda
