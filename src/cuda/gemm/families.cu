// The four kernel families' host adapters (families.h): config names, the
// filters that say why a shape cannot run, and each family's K splits and grid.
#include <algorithm>

#include "core/check.h"
#include "core/weight_format.h"
#include "cuda/common/launch.h"
#include "cuda/gemm/families.h"

namespace lowbit::cuda::gemm {
namespace {

const char* const op = MatmulArgs::kName;

size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

// K cut into about `splits` ranges of whole passes: the split length, the
// split count and the bytes of the partial sums.
void set_splits(Plan& plan, int64_t splits) {
  Params& p = plan.p;
  const int64_t passes = ceil_div(p.K, static_cast<int64_t>(plan.k.step));
  p.k_split = ceil_div(passes, splits) * plan.k.step;
  p.splits = static_cast<int>(ceil_div(p.K, p.k_split));
  plan.partial_bytes = p.splits > 1 ? round_up(static_cast<size_t>(p.splits * p.M * p.N) * sizeof(float), 256) : 0;
}

int64_t m_blocks(const Params& p, int m_tile) {
  const int64_t blocks_m = ceil_div(p.M, int64_t{m_tile});
  LOWBIT_REQUIRE(blocks_m <= 65535, ErrorCode::invalid_argument, op, ": M = ", p.M,
                 " needs more than 65535 M tiles on cuda (M tile ", m_tile, ")");
  return blocks_m;
}

// Split K when the output tiles give less than one wave of blocks, keeping
// >= min_passes passes a split for the pipeline (one wave, not more: fewer
// partial sums to reduce; bench/notes/matmul-streaming-small-m.md).
void split_k(Plan& plan, int64_t blocks_n, int m_tile, int threads, int64_t min_passes) {
  Params& p = plan.p;
  const int64_t blocks_m = m_blocks(p, m_tile);
  const int64_t wave = int64_t{sm_count(op)} * std::max(1, blocks_per_sm(plan.k.kernel, threads, plan.k.smem, op));
  const int64_t passes = ceil_div(p.K, static_cast<int64_t>(plan.k.step));
  int64_t splits = 1;
  if (blocks_n * blocks_m < wave) {
    splits = std::min<int64_t>({ceil_div(wave, blocks_n * blocks_m), std::max<int64_t>(1, passes / min_passes), 64});
  }
  set_splits(plan, splits);
  plan.grid = dim3(static_cast<unsigned>(blocks_n), static_cast<unsigned>(blocks_m), static_cast<unsigned>(p.splits));
}

// Null when the instance exists and its shared memory fits, else why not.
const char* instance_fault(const KernelInfo& k) {
  if (k.kernel == nullptr) return "no instance for the format's codes";
  const size_t most = static_cast<size_t>(device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, op));
  return k.smem > most ? "its shared memory exceeds the device's per block" : nullptr;
}

// ------------------------------------------------------------------ rows

// The rows decoder for a format: the integer or table decoders where their
// post-scaling applies (a rule of value or scale, or integer zeros) and a
// chunk of 4 spans fits the group; the generic decoder otherwise.
KernelInfo rows_kernel(const WeightFormat& f, bool bf16, int mt) {
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

KernelConfig rows_config(int s) { return {"rows", 8 * kRowsShapes[s].mt, 16 * kRowsShapes[s].warps, 0, 0}; }

const char* rows_cannot(const Problem& pr, int s) {
  return instance_fault(rows_kernel(pr.args->weight.format, pr.bf16, kRowsShapes[s].mt));
}

Plan rows_plan(const Problem& pr, int s) {
  const RowsShape c = kRowsShapes[s];
  Plan plan;
  plan.p = pr.p;
  Params& p = plan.p;
  plan.k = rows_kernel(pr.args->weight.format, pr.bf16, c.mt);
  prepare(plan.k, op);
  plan.k.threads = 32 * c.warps;
  split_k(plan, ceil_div(p.N, int64_t{16} * c.warps), 8 * c.mt, plan.k.threads, 2);
  // Direct-A kernels read whole chunks of 16-byte-aligned rows of A.
  if (plan.k.direct_a && (p.perm || !aligned16(pr.args->A.data) || p.K % plan.k.chunk != 0)) {
    plan.a_lda = ceil_div(p.K, int64_t{plan.k.chunk}) * plan.k.chunk;
  }
  return plan;
}

// ------------------------------------------------------------------ tiles

// A tiles-layout family's instance for the problem's codes and dtype.
KernelInfo tiles_kernel(const TilesFamily& f, const Problem& pr, int s) {
  return tiles_kernel_for(f, pr.p.bits, pr.table, pr.bf16, s);
}

// The tiles kernels copy A in 16-byte chunks of 16-byte-aligned rows.
void gather_unaligned_a(Plan& plan) {
  if (!plan.p.a_vec) plan.a_lda = ceil_div(plan.p.K, int64_t{8}) * 8;
}

KernelConfig mma_config(int s) {
  const TilesShape& t = kTilesShapes[s];
  return {"mma", 8 * t.m_tiles, t.warps * t.row_tiles * core::kTileRows, 0, t.stages};
}

const char* mma_cannot(const Problem& pr, int s) { return instance_fault(tiles_kernel(kTilesMma, pr, s)); }

Plan mma_plan(const Problem& pr, int s) {
  Plan plan;
  plan.p = pr.p;
  plan.k = tiles_kernel(kTilesMma, pr, s);
  prepare(plan.k, op);
  // 2 stages a split at least.
  split_k(plan, ceil_div(plan.p.N, int64_t{plan.k.n_tile}), plan.k.m_tile, plan.k.threads, 2);
  gather_unaligned_a(plan);
  return plan;
}

KernelConfig wgmma_config(int s) {
  const WgmmaShapeConfig& w = kWgmmaShapes[s];
  return {"wgmma", w.block_m, 64 * w.consumers, w.stage_k, 0};
}

const char* wgmma_cannot(const Problem& pr, int s) {
  if (!device_is_sm90(op)) return "wgmma needs an sm_90 device (Hopper)";
  if (pr.p.bits != 4 && pr.p.bits != 8) return "wgmma takes 4- and 8-bit codes only";
  return instance_fault(tiles_kernel(kTilesWgmma, pr, s));
}

Plan wgmma_plan(const Problem& pr, int s) {
  Plan plan;
  plan.p = pr.p;
  Params& p = plan.p;
  plan.k = tiles_kernel(kTilesWgmma, pr, s);
  prepare(plan.k, op);
  // One block an SM: split K only to fill one wave (partial sums of large M
  // cost more than the idle SMs they would fill).
  const int64_t blocks = ceil_div(p.N, int64_t{plan.k.n_tile}) * ceil_div(p.M, int64_t{plan.k.m_tile});
  const int64_t passes = ceil_div(p.K, static_cast<int64_t>(plan.k.step));
  set_splits(plan, std::clamp<int64_t>(int64_t{sm_count(op)} / blocks, 1, std::max<int64_t>(1, passes / 4)));
  LOWBIT_REQUIRE(blocks <= (int64_t{1} << 31) - 1, ErrorCode::invalid_argument, op, ": M = ", p.M, " and N = ", p.N,
                 " need too many blocks on cuda");
  plan.grid = dim3(static_cast<unsigned>(blocks), 1, static_cast<unsigned>(p.splits));
  gather_unaligned_a(plan);
  return plan;
}

KernelConfig stream_config(int s) {
  const StreamShape& t = kStreamShapes[s];
  return {"stream", 8 * t.m_tiles, t.warps * t.row_tiles * core::kTileRows, 0, 0};
}

const char* stream_cannot(const Problem& pr, int s) {
  const WeightFormat& f = pr.args->weight.format;
  if (static_cast<int64_t>(f.groups()) * pr.p.np * 4 >= (int64_t{1} << 31)) {
    return "the streaming kernel addresses a group's scales in 32 bits";
  }
  // Its shared memory grows with the split: the plan sizes the split to fit.
  return tiles_kernel(kTilesStream, pr, s).kernel == nullptr ? "no instance for the format's codes" : nullptr;
}

// K splits: ranges of whole tiles whose activations (the block's rows of M)
// fit in the shared memory aimed at, and at least as many as fill one wave of
// blocks; the plan's shared memory is then the kernel's own plus those rows.
// one_wave is false when the splits the shared memory forces make more.
Plan stream_plan(const Problem& pr, int s) {
  Plan plan;
  plan.p = pr.p;
  Params& p = plan.p;
  plan.k = tiles_kernel(kTilesStream, pr, s);
  const int64_t blocks_n = ceil_div(p.N, int64_t{plan.k.n_tile});
  const int64_t blocks_m = m_blocks(p, plan.k.m_tile);
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
  plan.one_wave = blocks_n * blocks_m * p.splits <= wave;
  gather_unaligned_a(plan);
  return plan;
}

template <const auto& kShapes>
bool built_at(int s) {
  return built(kShapes[s]);
}

}  // namespace

const Family kRowsFamily{"rows",      WeightLayout::rows, kNumRowsShapes, [](int) { return true; },
                         rows_config, rows_cannot,        rows_plan};
const Family kMmaFamily{"mma",      WeightLayout::tiles, kNumTilesShapes, built_at<kTilesShapes>,
                        mma_config, mma_cannot,          mma_plan};
const Family kWgmmaFamily{"wgmma",      WeightLayout::tiles, kNumWgmmaShapes, built_at<kWgmmaShapes>,
                          wgmma_config, wgmma_cannot,        wgmma_plan};
const Family kStreamFamily{"stream",      WeightLayout::tiles, kNumStreamShapes, built_at<kStreamShapes>,
                           stream_config, stream_cannot,       stream_plan};

}  // namespace lowbit::cuda::gemm
