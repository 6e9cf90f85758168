// The CUDA matmul (MatmulArgs): picks a decoder and a kernel config for the
// weight format and M, splits K when the output alone cannot fill the GPU,
// and launches rows_mma_kernel (kernel.cuh) plus, when split, reduce_splits.
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <utility>

#include "core/check.h"
#include "core/weight_format.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/gemm/kernels.h"
#include "cuda/gemm/ops.h"

namespace lowbit::cuda {
namespace gemm {
namespace {

const char* const op = MatmulArgs::kName;

// Kernel configs: n8 tiles of M per block (M tile = 8·mt) and warps along N
// (16 rows each). MatmulArgs::config indexes this table.
struct Config {
  int mt;
  int warps;
};
constexpr Config kConfigs[] = {{1, 4}, {1, 8}, {2, 4}, {4, 4}, {4, 8}};
constexpr int kNumConfigs = static_cast<int>(sizeof(kConfigs) / sizeof(kConfigs[0]));

// The heuristic, from the prepared M:
// - M <= 8: one n8 tile, 8 warps (on an H100 nf4 at 28672x8192 runs in
//   101 us with 8 warps against 122 us with 4; uint4 is even);
// - M <= 16: two n8 tiles (no wasted columns at 16);
// - larger: four n8 tiles and 8 warps, the most weight reuse per block.
int heuristic(int64_t m) {
  if (m <= 8) return 1;
  if (m <= 16) return 2;
  return 4;
}

struct Plan {
  KernelInfo k;
  Params p;
  dim3 grid;
  int threads = 0;
  // Workspace: split-K partial sums, then (direct-A kernels whose A is not
  // fit to read as it is) A gathered into rows of a_lda elements.
  size_t partial_bytes = 0;
  int64_t a_lda = 0;  // 0: A is read where it is
  size_t bytes() const { return partial_bytes + (a_lda ? static_cast<size_t>(p.M * a_lda) * 2 : 0); }
};

size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

// The decoder for a format: the integer or table decoders where their
// post-scaling applies (a rule of value or scale, or integer zeros) and a
// chunk of 4 spans fits the group; the generic decoder otherwise.
KernelInfo pick_kernel(const WeightFormat& f, bool bf16, int mt) {
  const core::WeightTypeInfo info = core::weight_type_info(f.type);
  const core::DequantRule rule = core::dequant_rule(f);
  const bool qzeros = f.with_zeros && f.zeros_mode == ZerosMode::quantized;
  const bool plain = rule == core::DequantRule::value || rule == core::DequantRule::scale;
  const bool per_row = f.group_size <= 0;
  auto fits = [&](int chunk) { return per_row || f.group_size % chunk == 0; };
  if (core::weight_is_integer(f.type) && (plain || (rule == core::DequantRule::subtract && qzeros))) {
    for (int lb : {16, 8}) {
      if (fits(4 * lb * 8 / info.bits)) return magic_kernel(info.bits, lb, bf16, mt);
    }
  }
  if (info.kind == core::WeightKind::table && plain) {
    for (int lb : {16, 8}) {
      if (fits(4 * lb * 2)) return table_kernel(lb, bf16, mt);
    }
  }
  return generic_kernel(f.type, bf16, mt);
}

Plan make_plan(const MatmulArgs& a) {
  const PackedWeightRef& w = a.weight;
  const WeightFormat& f = w.format;
  LOWBIT_REQUIRE(f.layout == WeightLayout::rows, ErrorCode::invalid_argument, op,
                 ": the cuda kernels read the rows layout (got layout ", weight_layout_name(f.layout), ")");
  LOWBIT_REQUIRE(a.config < kNumConfigs, ErrorCode::invalid_argument, op, ": config must be -1 or below ", kNumConfigs,
                 " on cuda (got ", a.config, ")");
  LOWBIT_REQUIRE(f.K < (int64_t{1} << 31) - 4096, ErrorCode::invalid_argument, op,
                 ": K must be below 2^31 - 4096 on cuda (got ", f.K, ")");
  Plan plan;
  Params& p = plan.p;
  p.M = a.A.numel() / a.A.size(-1);
  p.N = f.N;
  p.K = f.K;
  p.A = static_cast<const uint16_t*>(a.A.data);
  p.lda = p.K;
  p.perm = w.perm.present() ? w.perm.ptr<const int32_t>() : nullptr;
  p.a_vec = !p.perm && p.K % 8 == 0 && aligned16(a.A.data);
  p.qweight = w.qweight.ptr<const uint8_t>();
  p.row_bytes = w.qweight.size(1);
  p.scale = f.with_scaling ? w.scale.ptr<const float>() : nullptr;
  const bool qzeros = f.with_zeros && f.zeros_mode == ZerosMode::quantized;
  p.zeros = f.with_zeros && !qzeros ? w.zeros.ptr<const float>() : nullptr;
  p.qzeros = qzeros ? w.zeros.ptr<const uint8_t>() : nullptr;
  p.bits = core::weight_bits(f.type);
  p.qzeros_bytes = core::packed_zeros_words(f.N, p.bits) * 4;
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

  const int index = a.config >= 0 ? a.config : heuristic(a.prepared_m > 0 ? a.prepared_m : p.M);
  const Config c = kConfigs[index];
  plan.k = pick_kernel(f, a.A.dtype == DType::bf16, c.mt);
  LOWBIT_REQUIRE(plan.k.kernel != nullptr, ErrorCode::internal, op, ": no kernel instance for ",
                 weight_type_name(f.type), " with mt ", c.mt);
  plan.threads = 32 * c.warps;

  // Split K when the output tiles give fewer than 4 waves of blocks (the
  // last, partial wave then costs little), keeping >= 2 passes per split
  // for the pipeline; each split a whole number of passes.
  prepare(plan.k, op);
  const int64_t blocks_n = ceil_div(p.N, int64_t{16} * c.warps);
  const int64_t blocks_m = ceil_div(p.M, int64_t{8} * c.mt);
  const int64_t wave = int64_t{sm_count(op)} * std::max(1, blocks_per_sm(reinterpret_cast<const void*>(plan.k.kernel),
                                                                         plan.threads, plan.k.smem, op));
  const int64_t passes = ceil_div(p.K, static_cast<int64_t>(plan.k.step));
  int64_t splits = 1;
  // 4 waves: on an H100 (M = 1) 1, 2, 8 and 16 waves were within 10 % of it
  // at 4096², 8192² and 28672x8192, none better on all three.
  constexpr int64_t waves = 4;
  if (blocks_n * blocks_m < waves * wave) {
    splits = std::min<int64_t>({ceil_div(waves * wave, blocks_n * blocks_m), std::max<int64_t>(1, passes / 2), 64});
  }
  p.k_split = ceil_div(passes, splits) * plan.k.step;
  p.splits = static_cast<int>(ceil_div(p.K, p.k_split));
  if (p.splits > 1) plan.partial_bytes = round_up(static_cast<size_t>(p.splits * p.M * p.N) * sizeof(float), 256);
  // Direct-A kernels read whole chunks of 16-byte-aligned rows of A.
  if (plan.k.direct_a && (p.perm || !aligned16(a.A.data) || p.K % plan.k.chunk != 0)) {
    plan.a_lda = ceil_div(p.K, int64_t{plan.k.chunk}) * plan.k.chunk;
  }
  plan.grid = dim3(static_cast<unsigned>(blocks_n), static_cast<unsigned>(blocks_m), static_cast<unsigned>(p.splits));
  LOWBIT_REQUIRE(blocks_m <= 65535, ErrorCode::invalid_argument, op, ": M = ", p.M,
                 " needs more than 65535 M tiles on cuda (M tile ", 8 * c.mt, ")");
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
  if (!prepared.insert({reinterpret_cast<const void*>(k.kernel), device}).second) return;
  check(cudaFuncSetAttribute(reinterpret_cast<const void*>(k.kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(k.smem)),
        name, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
}

}  // namespace gemm

int matmul_num_configs() { return gemm::kNumConfigs; }

size_t matmul_workspace(const MatmulArgs& a) {
  if (a.A.numel() == 0) return 0;
  DeviceGuard guard(a.A.device.index, gemm::op);
  return gemm::make_plan(a).bytes();
}

void matmul(const MatmulArgs& a, void* workspace, Stream stream) {
  if (a.A.numel() == 0) return;  // no rows: nothing to write
  DeviceGuard guard(a.A.device.index, gemm::op);
  gemm::Plan plan = gemm::make_plan(a);
  gemm::Params& p = plan.p;
  LOWBIT_REQUIRE(plan.bytes() == 0 || workspace != nullptr, ErrorCode::invalid_argument, gemm::op, ": a workspace of ",
                 plan.bytes(), " bytes is required (workspace_size); got none");
  const cudaStream_t s = to_cuda(stream);
  auto blocks_for = [](int64_t total) {
    return static_cast<int>(std::max<int64_t>(
        1, std::min<int64_t>(ceil_div(total, int64_t{256}), int64_t{8} * sm_count(gemm::op))));
  };
  if (p.splits > 1) p.partial = static_cast<float*>(workspace);
  if (plan.a_lda) {
    auto* a_copy = reinterpret_cast<uint16_t*>(static_cast<char*>(workspace) + plan.partial_bytes);
    gemm::gather_a_launch(p, a_copy, plan.a_lda, blocks_for(p.M * plan.a_lda), s);
    p.A = a_copy;
    p.lda = plan.a_lda;
    p.perm = nullptr;
  }
  void* args[] = {&p};
  check(cudaLaunchKernel(reinterpret_cast<const void*>(plan.k.kernel), plan.grid, dim3(plan.threads), args, plan.k.smem,
                         s),
        gemm::op, "launch of rows_mma_kernel");
  if (p.splits > 1) gemm::reduce_splits_launch(p, blocks_for(p.M * p.N), s);
}

}  // namespace lowbit::cuda
