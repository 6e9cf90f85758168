// The CUDA matmul (MatmulArgs): picks a kernel for the weight's layout
// (tiles_mma_kernel for `tiles`, rows_mma_kernel for `rows`), a decoder and a
// config for the format and M, splits K when the output alone cannot fill
// the GPU, and launches it plus, when split, reduce_splits.
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
#include "cuda/gemm/kernels.h"
#include "cuda/gemm/ops.h"

namespace lowbit::cuda {
namespace gemm {
namespace {

const char* const op = MatmulArgs::kName;

// Kernel configs. MatmulArgs::config = k picks config k % (the count of the
// weight's layout), so one index sweeps every config of both layouts.
//
// rows: n8 tiles of M per block (M tile = 8·mt) and warps along N (16 rows each).
struct RowsConfig {
  int mt;
  int warps;
};
constexpr RowsConfig kRowsConfigs[] = {{1, 4}, {1, 8}, {2, 4}, {4, 4}, {4, 8}};
constexpr int kNumRowsConfigs = static_cast<int>(sizeof(kRowsConfigs) / sizeof(kRowsConfigs[0]));
// tiles: the mma.sync shapes of tiles_instances.cuh, then the wgmma shapes of
// wgmma_instances.cuh (sm_90a; on other devices, and for bit widths it does
// not take, they run the mma.sync shape 3), then the streaming shapes of
// stream_instances.cuh.
int tiles_num_configs() { return tiles_num_shapes() + wgmma_num_shapes() + stream_num_shapes(); }
int num_configs() { return std::max(kNumRowsConfigs, tiles_num_configs()); }

// The rows heuristic, from the prepared M:
// - M <= 8: one n8 tile, 8 warps (more loads in flight than 4; measured in
//   bench/notes/matmul-rows-kernel.md);
// - M <= 16: two n8 tiles (no wasted columns at 16);
// - larger: four n8 tiles and 8 warps, the most weight reuse per block.
int rows_heuristic(int64_t m) {
  if (m <= 8) return 1;
  if (m <= 16) return 2;
  return 4;
}
// tiles: indices into the mma.sync shapes (kTilesShapes), then the wgmma
// shapes (kWgmmaShapes), then the streaming shapes (kStreamShapes); each
// choice the fastest of the candidates measured over int4 and nf4 g128 at
// 4096² .. 28672x8192 (bench/notes/matmul-wgmma-epilogue.md,
// bench/notes/matmul-streaming-small-m.md):
// - M <= 8, M <= 16: the streaming kernel with M tiles of 8 and 16 (it reads
//   the weight once with A in shared memory; make_tiles_plan may take its
//   16-warp shape at M <= 16);
// - M <= 32: the streaming kernel's M tile of 32 (16 warps, one block an SM);
// - M <= 64 where wgmma does not serve: the streaming kernel's M tile of 64;
// - M <= 64: wgmma with 64 rows of M and 4 consumer warpgroups (256 rows
//   of N a block);
// - M <= 128: wgmma, 128 x 128 stages;
// - larger: wgmma, 256 x 128 stages.
// Without wgmma (not sm_90a, or 1- and 2-bit codes) the mma.sync tile of 64.
int tiles_heuristic(int64_t m, bool wgmma) {
  const int shapes = tiles_num_shapes();
  const int stream = shapes + wgmma_num_shapes();
  if (m <= 8) return stream;
  if (m <= 16) return stream + 1;
  if (m <= 32) return stream + 3;
  if (m <= 64 && !wgmma) return stream + 4;
  if (!wgmma) return 3;
  if (m <= 64) return shapes + 5;
  if (m <= 128) return shapes + 4;
  return shapes + 3;
}

struct Plan {
  KernelInfo k;
  Params p;
  dim3 grid;
  // Workspace: split-K partial sums, then (kernels that need A fit to read
  // as it is, when the caller's is not) A gathered into rows of a_lda elements.
  size_t partial_bytes = 0;
  int64_t a_lda = 0;  // 0: A is read where it is
  size_t bytes() const { return partial_bytes + (a_lda ? static_cast<size_t>(p.M * a_lda) * 2 : 0); }
};

size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

// The rows decoder for a format: the integer or table decoders where their
// post-scaling applies (a rule of value or scale, or integer zeros) and a
// chunk of 4 spans fits the group; the generic decoder otherwise.
KernelInfo pick_rows_kernel(const WeightFormat& f, bool bf16, int mt) {
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

// Split K when the output tiles give fewer than 4 waves of blocks (the
// last, partial wave then costs little), keeping >= min_passes passes per
// split for the pipeline; each split a whole number of passes.
// K cut into about `splits` ranges of whole passes: the split length, the
// split count and the bytes of the partial sums.
void set_splits(Plan& plan, int64_t splits) {
  Params& p = plan.p;
  const int64_t passes = ceil_div(p.K, static_cast<int64_t>(plan.k.step));
  p.k_split = ceil_div(passes, splits) * plan.k.step;
  p.splits = static_cast<int>(ceil_div(p.K, p.k_split));
  plan.partial_bytes = p.splits > 1 ? round_up(static_cast<size_t>(p.splits * p.M * p.N) * sizeof(float), 256) : 0;
}

void split_k(Plan& plan, int64_t blocks_n, int m_tile, int threads, int64_t min_passes) {
  Params& p = plan.p;
  const int64_t blocks_m = ceil_div(p.M, int64_t{m_tile});
  LOWBIT_REQUIRE(blocks_m <= 65535, ErrorCode::invalid_argument, op, ": M = ", p.M,
                 " needs more than 65535 M tiles on cuda (M tile ", m_tile, ")");
  const int64_t wave = int64_t{sm_count(op)} * std::max(1, blocks_per_sm(plan.k.kernel, threads, plan.k.smem, op));
  const int64_t passes = ceil_div(p.K, static_cast<int64_t>(plan.k.step));
  int64_t splits = 1;
  // One wave: fewer partial sums to reduce, and the tiles kernel measured
  // faster so than at 4 (bench/notes/matmul-streaming-small-m.md).
  const int64_t target = wave;
  if (blocks_n * blocks_m < target) {
    splits = std::min<int64_t>({ceil_div(target, blocks_n * blocks_m), std::max<int64_t>(1, passes / min_passes), 64});
  }
  set_splits(plan, splits);
  plan.grid = dim3(static_cast<unsigned>(blocks_n), static_cast<unsigned>(blocks_m), static_cast<unsigned>(p.splits));
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

Plan make_rows_plan(const MatmulArgs& a, int config) {
  const PackedWeightRef& w = a.weight;
  const WeightFormat& f = w.format;
  Plan plan;
  Params& p = plan.p;
  fill_params(p, a);

  const int index = config >= 0 ? config % kNumRowsConfigs : rows_heuristic(a.prepared_m > 0 ? a.prepared_m : p.M);
  const RowsConfig c = kRowsConfigs[index];
  plan.k = pick_rows_kernel(f, a.A.dtype == DType::bf16, c.mt);
  LOWBIT_REQUIRE(plan.k.kernel != nullptr, ErrorCode::internal, op, ": no kernel instance for ",
                 weight_type_name(f.type), " with mt ", c.mt);
  prepare(plan.k, op);
  const int threads = 32 * c.warps;
  plan.k.threads = threads;
  split_k(plan, ceil_div(p.N, int64_t{16} * c.warps), 8 * c.mt, threads, 2);
  // Direct-A kernels read whole chunks of 16-byte-aligned rows of A.
  if (plan.k.direct_a && (p.perm || !aligned16(a.A.data) || p.K % plan.k.chunk != 0)) {
    plan.a_lda = ceil_div(p.K, int64_t{plan.k.chunk}) * plan.k.chunk;
  }
  return plan;
}

// Whether the streaming kernels can address the format's scales and zero
// codes (32-bit offsets).
bool stream_fits(const Params& p, const WeightFormat& f) {
  return static_cast<int64_t>(f.groups()) * p.np * 4 < (int64_t{1} << 31);
}

// The streaming kernels' K splits: ranges of whole tiles whose activations
// (the block's rows of M) fit in the shared memory aimed at, and at least as
// many as fill one wave of blocks; the plan's shared memory is then the
// kernel's own plus those rows. False when the splits the shared memory
// forces make more than one wave.
bool stream_splits(Plan& plan, int64_t blocks_n) {
  Params& p = plan.p;
  const int64_t blocks_m = ceil_div(p.M, int64_t{plan.k.m_tile});
  LOWBIT_REQUIRE(blocks_m <= 65535, ErrorCode::invalid_argument, op, ": M = ", p.M,
                 " needs more than 65535 M tiles on cuda (M tile ", plan.k.m_tile, ")");
  const int64_t rows = std::min<int64_t>(p.M, plan.k.m_tile);
  const size_t fixed = plan.k.smem;
  KernelInfo most = plan.k;
  most.smem = static_cast<size_t>(device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, op));
  prepare(most, op);
  const int64_t tile = plan.k.step;
  const int64_t k_tiles = ceil_div(p.K, tile);
  // The shared memory a block aimed at: the SM's shared by the blocks an SM
  // the kernel is sized for (1 KB each reserved); the split's activations get
  // what the table and the weight ring leave, 64 columns at least.
  const size_t budget =
      static_cast<size_t>(device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, op)) / plan.k.blocks - 1024;
  const int64_t avail = budget > fixed ? static_cast<int64_t>(budget - fixed) : 0;
  const int64_t max_tiles = std::max<int64_t>(1, std::max<int64_t>(64, avail / (rows * 2) / 64 * 64) / tile);
  const int64_t wave = int64_t{sm_count(op)} * std::max(1, blocks_per_sm(plan.k.kernel, plan.k.threads, budget, op));
  // (Splits filling other fractions of a wave measured slower at M = 1:
  // bench/notes/matmul-streaming-small-m.md.)
  const int64_t splits = std::min(k_tiles, std::max(ceil_div(k_tiles, max_tiles), wave / (blocks_n * blocks_m)));
  set_splits(plan, std::max<int64_t>(1, splits));
  const int64_t cols = ceil_div(p.k_split, int64_t{64}) * 64;
  plan.k.smem = fixed + static_cast<size_t>(rows * cols * 2);
  plan.grid = dim3(static_cast<unsigned>(blocks_n), static_cast<unsigned>(blocks_m), static_cast<unsigned>(p.splits));
  return blocks_n * blocks_m * p.splits <= wave;
}

// Whether the wgmma kernel serves the format here: Hopper, 4- or 8-bit codes.
bool wgmma_serves(int bits) { return (bits == 4 || bits == 8) && device_is_sm90(op); }

Plan make_tiles_plan(const MatmulArgs& a, int config) {
  const PackedWeightRef& w = a.weight;
  const WeightFormat& f = w.format;
  Plan plan;
  Params& p = plan.p;
  fill_params(p, a);

  const bool table = core::weight_type_info(f.type).kind == core::WeightKind::table;
  const bool bf16 = a.A.dtype == DType::bf16;
  const int64_t m = a.prepared_m > 0 ? a.prepared_m : p.M;
  const int shapes = tiles_num_shapes();
  const int stream0 = shapes + wgmma_num_shapes();
  int index = config >= 0 ? config % tiles_num_configs() : tiles_heuristic(m, wgmma_serves(p.bits));
  if (index >= shapes && index < stream0 && !wgmma_serves(p.bits)) index = 3;
  // The streaming kernel addresses a group's scales in 32 bits.
  if (index >= stream0 && !stream_fits(p, f)) index = 4;
  const bool wgmma = index >= shapes && index < stream0;
  plan.k = index >= stream0 ? tiles_kernel_for(kTilesStream, p.bits, table, bf16, index - stream0)
           : wgmma          ? tiles_kernel_for(kTilesWgmma, p.bits, table, bf16, index - shapes)
                            : tiles_kernel_for(kTilesMma, p.bits, table, bf16, index);
  LOWBIT_REQUIRE(plan.k.kernel != nullptr, ErrorCode::internal, op, ": no tiles kernel instance for ",
                 weight_type_name(f.type), " config ", index);
  const int64_t blocks_n = ceil_div(p.N, int64_t{plan.k.n_tile});
  if (plan.k.stream) {
    // M tile 16: when the activations' shared memory, not the GPU's fill,
    // sets the splits past one wave, the shape with one block of 16 warps
    // an SM (twice the shared memory a block, so fewer splits;
    // bench/notes/matmul-streaming-small-m.md).
    if (!stream_splits(plan, blocks_n) && config < 0 && index == stream0 + 1) {
      plan.k = tiles_kernel_for(kTilesStream, p.bits, table, bf16, 2);
      stream_splits(plan, ceil_div(p.N, int64_t{plan.k.n_tile}));
    }
  } else if (wgmma) {
    prepare(plan.k, op);
    // One block an SM: split K only to fill one wave (partial sums of large
    // M cost more than the idle SMs they would fill).
    const int64_t blocks = blocks_n * ceil_div(p.M, int64_t{plan.k.m_tile});
    const int64_t passes = ceil_div(p.K, static_cast<int64_t>(plan.k.step));
    set_splits(plan, std::clamp<int64_t>(int64_t{sm_count(op)} / blocks, 1, std::max<int64_t>(1, passes / 4)));
    LOWBIT_REQUIRE(blocks <= (int64_t{1} << 31) - 1, ErrorCode::invalid_argument, op, ": M = ", p.M, " and N = ", p.N,
                   " need too many blocks on cuda");
    plan.grid = dim3(static_cast<unsigned>(blocks), 1, static_cast<unsigned>(p.splits));
  } else {
    prepare(plan.k, op);
    // 2 stages a split at least.
    split_k(plan, blocks_n, plan.k.m_tile, plan.k.threads, 2);
  }
  // The kernel copies A in 16-byte chunks of 16-byte-aligned rows.
  if (!p.a_vec) plan.a_lda = ceil_div(p.K, int64_t{8}) * 8;
  return plan;
}

Plan make_plan(const MatmulArgs& a) {
  const WeightFormat& f = a.weight.format;
  LOWBIT_REQUIRE(a.config < num_configs(), ErrorCode::invalid_argument, op, ": config must be -1 or below ",
                 num_configs(), " on cuda (got ", a.config, ")");
  LOWBIT_REQUIRE(f.K < (int64_t{1} << 31) - 4096, ErrorCode::invalid_argument, op,
                 ": K must be below 2^31 - 4096 on cuda (got ", f.K, ")");
  switch (f.layout) {
    case WeightLayout::rows: return make_rows_plan(a, a.config);
    case WeightLayout::tiles: return make_tiles_plan(a, a.config);
  }
  core::fail(ErrorCode::invalid_argument,
             core::cat(op, ": no cuda kernels for weight layout ", weight_layout_name(f.layout)));
}

// What a plan's choices (kernel, grid, splits, workspace) depend on: the
// device, the format, the dtypes, M, the config, and of the addresses only
// whether A can be read in place (16-byte aligned, no permutation).
struct PlanKey {
  int device = 0;
  WeightLayout layout{};
  WeightType type{};
  int64_t N = 0, K = 0, group_size = 0;
  bool scaling = false, zeros = false;
  ZerosMode zeros_mode{};
  DType a_dtype{}, scale_dtype{};
  int64_t M = 0, prepared_m = 0;
  int config = 0;
  bool perm = false, a_aligned = false;
  bool operator==(const PlanKey&) const = default;
};

PlanKey key_of(const MatmulArgs& a, int device) {
  const WeightFormat& f = a.weight.format;
  PlanKey k;
  k.device = device;
  k.layout = f.layout;
  k.type = f.type;
  k.N = f.N;
  k.K = f.K;
  k.group_size = f.group_size;
  k.scaling = f.with_scaling;
  k.zeros = f.with_zeros;
  k.zeros_mode = f.zeros_mode;
  k.a_dtype = a.A.dtype;
  k.scale_dtype = f.with_scaling ? a.weight.scale.dtype : DType::f32;
  k.M = a.A.numel() / a.A.size(-1);
  k.prepared_m = a.prepared_m;
  k.config = a.config;
  k.perm = a.weight.perm.present();
  k.a_aligned = aligned16(a.A.data);
  return k;
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
    if (!(k == key)) continue;
    Plan plan = cached;
    Params& p = plan.p;
    const int64_t k_split = p.k_split;
    const int splits = p.splits;
    p = Params{};
    fill_params(p, a);
    p.k_split = k_split;
    p.splits = splits;
    return plan;
  }
  Plan plan = make_plan(a);
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

int matmul_num_configs() { return gemm::num_configs(); }

size_t matmul_workspace(const MatmulArgs& a) {
  if (a.A.numel() == 0) return 0;
  DeviceGuard guard(a.A.device.index, gemm::op);
  return gemm::plan_for(a).bytes();
}

void matmul(const MatmulArgs& a, void* workspace, Stream stream) {
  if (a.A.numel() == 0) return;  // no rows: nothing to write
  DeviceGuard guard(a.A.device.index, gemm::op);
  gemm::Plan plan = gemm::plan_for(a);
  gemm::Params& p = plan.p;
  LOWBIT_REQUIRE(plan.bytes() == 0 || workspace != nullptr, ErrorCode::invalid_argument, gemm::op, ": a workspace of ",
                 plan.bytes(), " bytes is required (workspace_size); got none");
  const cudaStream_t s = to_cuda(stream);
  auto blocks_for = [](int64_t total) {
    return static_cast<int>(
        std::max<int64_t>(1, std::min<int64_t>(ceil_div(total, int64_t{256}), int64_t{8} * sm_count(gemm::op))));
  };
  if (plan.partial_bytes > 0) p.partial = static_cast<float*>(workspace);
  if (plan.a_lda) {
    auto* a_copy = reinterpret_cast<uint16_t*>(static_cast<char*>(workspace) + plan.partial_bytes);
    gemm::gather_a_launch(p, a_copy, plan.a_lda, blocks_for(p.M * plan.a_lda), s);
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
                             static_cast<uint64_t>(p.lda) * 2, static_cast<uint32_t>(plan.k.m_tile), 64, gemm::op);
  }
  check(cudaLaunchKernel(plan.k.kernel, plan.grid, dim3(plan.k.threads), plan.k.tma ? args_tma : args_plain,
                         plan.k.smem, s),
        gemm::op, "launch of the matmul kernel");
  if (p.splits > 1) gemm::reduce_splits_launch(p, blocks_for(p.M * p.N), s, device_is_sm90(gemm::op));
}

}  // namespace lowbit::cuda
