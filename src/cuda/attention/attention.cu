// The attention ops on CUDA (lowbit/ops/attention.h, docs/attention.md): the
// three forms described by one FlashParams (params.h), the kernel chosen
// from the shapes alone (the lengths, offsets and pages stay on the device),
// and for dense and KV-cache calls that leave the GPU idle, the keys split
// into ranges whose partial results a second kernel merges. No host
// synchronization and no allocation: every launch goes on the op's stream,
// so a call is captured in a CUDA graph as it is.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <set>
#include <utility>

#include "core/check.h"
#include "cuda/attention/kernels.h"
#include "cuda/attention/ops.h"
#include "cuda/common/check.h"
#include "cuda/common/launch.h"

namespace lowbit::cuda {
namespace {

using attention::FlashKernel;
using attention::FlashParams;
using attention::Form;
using attention::Variant;

constexpr int kThreads = 128;      // the tensor-core kernel's CTA
constexpr int kKeyTile = 64;       // its keys a tile
constexpr int kMaxSplits = 128;    // key ranges a row's keys are cut into at most
constexpr int kMinSplitTiles = 2;  // key tiles a range takes at least: each range pays Q's load and its epilogue
constexpr int kNoSplit = INT_MAX / 2;

// Raises the kernel's dynamic shared memory limit on the current device once; false when the device cannot
// give that much to a CTA (the SIMT kernel then runs).
bool allow_smem(const FlashKernel& k, const char* op) {
  if (k.smem <= 48 * 1024) return true;
  if (static_cast<size_t>(device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, op)) < k.smem) return false;
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> done;
  int device = 0;
  check(cudaGetDevice(&device), op, "cudaGetDevice");
  const std::lock_guard<std::mutex> lock(mutex);
  if (done.insert({k.fn, device}).second) {
    check(cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(k.smem)), op,
          "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  }
  return true;
}

// How a call runs: the tensor-core kernel (kernel.fn set) over `grid`, its keys in `splits` ranges; or the
// SIMT kernel.
struct Plan {
  FlashKernel kernel{};
  dim3 grid;
  int splits = 1;
};

// The tensor-core kernel takes fp16 and bf16 with D and Dv multiples of 8 up to 256 (the next instance of 64,
// 128, 256 runs the rest as zeros), 16-byte aligned arrays, bdhs keys in whole chunks of 8, and B within a
// grid dimension.
FlashKernel pick_kernel(const FlashParams& p, DType dtype, bool aligned) {
  if ((dtype != DType::f16 && dtype != DType::bf16) || !aligned) return {};
  if (p.D % 8 != 0 || p.Dv % 8 != 0 || std::max(p.D, p.Dv) > 256 || p.B > 65535 || p.Hkv > 65535) return {};
  if (p.bdhs && p.Skv % 8 != 0) return {};
  Variant variant = Variant::rows64;
  if (p.bdhs) {
    variant = Variant::rows64_kt;
  } else if (p.form != Form::varlen && int64_t{p.Sq} * p.group <= 16) {
    variant = Variant::rows16;  // a kv head's rows fill one warp: the warps split the keys instead
  }
  const int d = std::max(p.D, p.Dv);
  return d <= 64    ? attention::flash_kernel_d64(dtype, variant)
         : d <= 128 ? attention::flash_kernel_d128(dtype, variant)
                    : attention::flash_kernel_d256(dtype, variant);
}

// The plan of a call; key_bound: the most keys a sequence can have (dense: Skv; kvcache: the cache's
// capacity), from which the splits are chosen. Sets p's grid fields.
Plan plan(FlashParams& p, DType dtype, bool aligned, int64_t key_bound, const char* op) {
  Plan plan;
  p.splits = 1;
  p.split_tiles = kNoSplit;
  p.m_tiles = 0;
  FlashKernel k = pick_kernel(p, dtype, aligned);
  if (k.fn == nullptr || !allow_smem(k, op)) return plan;
  if (p.form == Form::varlen) {
    // Sequence b's tiles are columns floor(cu_q[b] * group / rows) + b onwards (flash_mma.cuh's cta_work).
    const int64_t cols = p.total_q * p.group / k.rows + p.B;
    if (cols > INT32_MAX) return plan;
    plan.kernel = k;
    plan.grid = dim3(static_cast<unsigned>(cols), static_cast<unsigned>(p.Hkv), 1);
    return plan;
  }
  const int64_t m_tiles = ceil_div(int64_t{p.Sq} * p.group, int64_t{k.rows});
  const int64_t ctas = m_tiles * p.Hkv * p.B;
  // Split the keys when the CTAs fill less than one wave of the GPU: into as many ranges as fill it, each of
  // at least kMinSplitTiles tiles, at most kMaxSplits.
  const int64_t wave = wave_ctas(k.fn, kThreads, k.smem, op);
  const int64_t key_tiles = ceil_div(key_bound, int64_t{kKeyTile});
  int64_t splits = 1;
  if (ctas < wave && key_tiles >= 2 * kMinSplitTiles) {
    splits = std::min({ceil_div(wave, ctas), key_tiles / kMinSplitTiles, int64_t{kMaxSplits}});
  }
  if (splits > 1) {
    const int64_t tiles = ceil_div(key_tiles, splits);
    splits = ceil_div(key_tiles, tiles);  // no range left empty by the rounding
    p.split_tiles = static_cast<int>(tiles);
  }
  if (m_tiles * splits > INT32_MAX) return plan;
  p.m_tiles = static_cast<int>(m_tiles);
  p.splits = static_cast<int>(splits);
  plan.kernel = k;
  plan.splits = p.splits;
  plan.grid = dim3(static_cast<unsigned>(m_tiles * splits), static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.B));
  if (splits == 1) p.split_tiles = kNoSplit;
  return plan;
}

// Bytes of the split ranges' partials: [splits, total_q * H] rows of Dv fp32 values, then their log-sum-exps.
size_t partial_bytes(const FlashParams& p, int splits) {
  if (splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(splits) * static_cast<size_t>(p.total_q) * static_cast<size_t>(p.H);
  return rows * static_cast<size_t>(p.Dv) * sizeof(float) + rows * sizeof(float);
}

void launch(FlashParams& p, const Plan& plan, DType dtype, void* workspace, Stream stream, const char* op) {
  if (plan.kernel.fn == nullptr) {
    attention::launch_simt(p, dtype, stream, op);
    return;
  }
  if (plan.splits > 1) {
    LOWBIT_REQUIRE(workspace != nullptr, ErrorCode::invalid_argument, op, ": workspace of ",
                   partial_bytes(p, plan.splits), " bytes is required (got none; see workspace_size)");
    p.part_o = static_cast<float*>(workspace);
    p.part_lse = p.part_o + static_cast<size_t>(plan.splits) * static_cast<size_t>(p.total_q) *
                                static_cast<size_t>(p.H) * static_cast<size_t>(p.Dv);
  }
  void* args[] = {&p};
  check(cudaLaunchKernel(plan.kernel.fn, plan.grid, dim3(kThreads), args, plan.kernel.smem, to_cuda(stream)), op,
        "launch of flash_mma");
  check_launch(op, "flash_mma");
  if (plan.splits > 1) attention::launch_combine(p, dtype, stream, op);
}

int32_t narrow(int64_t v, const char* op, const char* what) {
  LOWBIT_REQUIRE(v >= 0 && v <= INT32_MAX / 2, ErrorCode::invalid_argument, op, ": ", what,
                 " must be below 2^30 on cuda (got ", v, ")");
  return static_cast<int32_t>(v);
}

float scale_log2(double scale, int64_t D) {
  const double s = scale != 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(D));
  return static_cast<float>(s * 1.4426950408889634);
}

FlashParams dense_params(const FlashAttentionArgs& a) {
  const char* op = FlashAttentionArgs::kName;
  const bool t = a.k_layout == KLayout::bdhs;
  FlashParams p{};
  p.q = a.q.data, p.k = a.k.data, p.v = a.v.data, p.out = a.out.data;
  p.lse = a.lse.present() ? a.lse.ptr<float>() : nullptr;
  p.form = Form::dense;
  p.bdhs = t ? 1 : 0;
  p.causal = a.causal ? 1 : 0;
  p.B = narrow(a.q.size(0), op, "B");
  p.Sq = narrow(a.q.size(1), op, "Sq");
  p.H = narrow(a.q.size(2), op, "H");
  p.D = narrow(a.q.size(3), op, "D");
  p.Skv = narrow(t ? a.k.size(3) : a.k.size(1), op, "Skv");
  p.Hkv = narrow(a.k.size(2), op, "Hkv");
  p.Dv = narrow(a.v.size(3), op, "Dv");
  p.group = p.H / p.Hkv;
  p.total_q = int64_t{p.B} * p.Sq;
  p.scale_log2 = scale_log2(a.scale, p.D);
  return p;
}

Plan dense_plan(FlashParams& p, const FlashAttentionArgs& a) {
  const bool aligned = aligned16(a.q.data) && aligned16(a.k.data) && aligned16(a.v.data) && aligned16(a.out.data);
  return plan(p, a.q.dtype, aligned, p.Skv, FlashAttentionArgs::kName);
}

FlashParams kvcache_params(const FlashAttentionKvcacheArgs& a) {
  const char* op = FlashAttentionKvcacheArgs::kName;
  const bool paged = a.block_table.present();
  FlashParams p{};
  p.q = a.q.data, p.k = a.k_cache.data, p.v = a.v_cache.data, p.out = a.out.data;
  p.lse = a.lse.present() ? a.lse.ptr<float>() : nullptr;
  p.seqlens = a.cache_seqlens.ptr<const int32_t>();
  p.table = paged ? a.block_table.ptr<const int32_t>() : nullptr;
  p.form = Form::kvcache;
  p.causal = a.causal ? 1 : 0;
  p.B = narrow(a.q.size(0), op, "B");
  p.Sq = narrow(a.q.size(1), op, "Sq");
  p.H = narrow(a.q.size(2), op, "H");
  p.D = narrow(a.q.size(3), op, "D");
  p.Skv = narrow(a.k_cache.size(1), op, paged ? "the page size" : "S_max");
  p.Hkv = narrow(a.k_cache.size(2), op, "Hkv");
  p.Dv = narrow(a.v_cache.size(3), op, "Dv");
  p.group = p.H / p.Hkv;
  p.pages = narrow(a.k_cache.size(0), op, "pages");
  p.max_pages = paged ? narrow(a.block_table.size(1), op, "max_pages") : 0;
  p.capacity = narrow(paged ? int64_t{p.max_pages} * p.Skv : p.Skv, op, "the cache's capacity");
  p.total_q = int64_t{p.B} * p.Sq;
  p.scale_log2 = scale_log2(a.scale, p.D);
  return p;
}

Plan kvcache_plan(FlashParams& p, const FlashAttentionKvcacheArgs& a) {
  const bool aligned =
      aligned16(a.q.data) && aligned16(a.k_cache.data) && aligned16(a.v_cache.data) && aligned16(a.out.data);
  return plan(p, a.q.dtype, aligned, p.capacity, FlashAttentionKvcacheArgs::kName);
}

}  // namespace

void flash_attention(const FlashAttentionArgs& a, void* workspace, Stream stream) {
  const char* op = FlashAttentionArgs::kName;
  if (a.out.numel() == 0) return;
  DeviceGuard guard(a.q.device.index, op);
  FlashParams p = dense_params(a);
  const Plan pl = dense_plan(p, a);
  launch(p, pl, a.q.dtype, workspace, stream, op);
}

size_t flash_attention_workspace(const FlashAttentionArgs& a) {
  if (a.out.numel() == 0) return 0;
  DeviceGuard guard(a.q.device.index, FlashAttentionArgs::kName);
  FlashParams p = dense_params(a);
  return partial_bytes(p, dense_plan(p, a).splits);
}

void flash_attention_kvcache(const FlashAttentionKvcacheArgs& a, void* workspace, Stream stream) {
  const char* op = FlashAttentionKvcacheArgs::kName;
  if (a.out.numel() == 0) return;
  DeviceGuard guard(a.q.device.index, op);
  FlashParams p = kvcache_params(a);
  const Plan pl = kvcache_plan(p, a);
  launch(p, pl, a.q.dtype, workspace, stream, op);
}

size_t flash_attention_kvcache_workspace(const FlashAttentionKvcacheArgs& a) {
  if (a.out.numel() == 0) return 0;
  DeviceGuard guard(a.q.device.index, FlashAttentionKvcacheArgs::kName);
  FlashParams p = kvcache_params(a);
  return partial_bytes(p, kvcache_plan(p, a).splits);
}

void flash_attention_varlen(const FlashAttentionVarlenArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = FlashAttentionVarlenArgs::kName;
  if (a.out.numel() == 0) return;
  const int64_t B = a.cu_seqlens_q.size(0) - 1;
  LOWBIT_REQUIRE(B >= 1, ErrorCode::invalid_argument, op, ": ", a.q.size(0),
                 " query tokens but no sequence (cu_seqlens_q has one entry)");
  DeviceGuard guard(a.q.device.index, op);
  FlashParams p{};
  p.q = a.q.data, p.k = a.k.data, p.v = a.v.data, p.out = a.out.data;
  p.lse = a.lse.present() ? a.lse.ptr<float>() : nullptr;
  p.cu_q = a.cu_seqlens_q.ptr<const int32_t>();
  p.cu_k = a.cu_seqlens_k.ptr<const int32_t>();
  p.form = Form::varlen;
  p.causal = a.causal ? 1 : 0;
  p.B = narrow(B, op, "B");
  p.H = narrow(a.q.size(1), op, "H");
  p.D = narrow(a.q.size(2), op, "D");
  p.Hkv = narrow(a.k.size(1), op, "Hkv");
  p.Dv = narrow(a.v.size(2), op, "Dv");
  p.group = p.H / p.Hkv;
  p.total_q = narrow(a.q.size(0), op, "total_q");
  p.total_k = narrow(a.k.size(0), op, "total_k");
  p.scale_log2 = scale_log2(a.scale, p.D);
  const bool aligned = aligned16(a.q.data) && aligned16(a.k.data) && aligned16(a.v.data) && aligned16(a.out.data);
  const Plan pl = plan(p, a.q.dtype, aligned, 0, op);
  launch(p, pl, a.q.dtype, nullptr, stream, op);
}

}  // namespace lowbit::cuda
