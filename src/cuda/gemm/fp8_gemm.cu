// fp8_gemm, fp8_grouped_gemm_contiguous and fp8_grouped_gemm_masked on CUDA:
// the three layouts fill fp8g::Params for the sm_90a TMA + wgmma kernel
// (fp8_gemm_wgmma.cuh) where the device is sm_90 and a and b start 16-byte
// aligned, else for the tile kernel of every GPU (fp8_gemm.cuh).
// No call reads device data on the host, synchronizes or allocates, so every
// call can be captured in a CUDA graph.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/hd.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/tma.h"
#include "cuda/gemm/fp8_gemm.cuh"
#include "cuda/gemm/fp8_gemm_wgmma.cuh"
#include "cuda/gemm/ops.h"

namespace lowbit::cuda {
namespace {

using fp8g::kBM;
using fp8g::kBN;

// The kernel's two inner products by name: e4m3 tensor cores (sm_89+ code)
// and e4m3 decoded to f16. An empty config: e4m3 where the loaded code has it.
KernelConfig config_named(const char* family) { return KernelConfig{family, kBM, kBN, fp8g::kBK, fp8g::kStages}; }
const KernelConfig& e4m3_config() {
  static const KernelConfig c = config_named("mma_e4m3");
  return c;
}
const KernelConfig& f16_config() {
  static const KernelConfig c = config_named("mma_f16");
  return c;
}

// The sm_90a kernel's tiles: consumer warpgroups along M and N, each one's
// columns, the CTAs of a cluster (2: a's tile multicast to both), each
// warpgroup's waves of 64 rows.
struct WgmmaShape {
  int wm, wn, wgn, c, wv;
  int bm() const { return 64 * wm * wv; }
  int bn() const { return wgn * wn; }
};
// The heuristic's ties that the row rule leaves go to the earlier shape: larger tiles first.
constexpr WgmmaShape kWgmmaShapes[] = {{2, 1, 128, 2, 2}, {2, 1, 128, 1, 2}, {2, 1, 128, 2, 1},
                                       {2, 1, 128, 1, 1}, {1, 2, 64, 1, 1},  {2, 1, 64, 1, 1},
                                       {1, 1, 64, 1, 1},  {1, 1, 32, 1, 1},  {1, 1, 16, 1, 1}};

// Calls fn with the shape's template arguments (WM, WN, WGN, C, WV as integral constants).
template <int WM, int WN, int WGN, int C, int WV, class Fn>
void shape_case(const WgmmaShape& s, Fn& fn) {
  if (s.wm == WM && s.wn == WN && s.wgn == WGN && s.c == C && s.wv == WV) {
    fn(std::integral_constant<int, WM>{}, std::integral_constant<int, WN>{}, std::integral_constant<int, WGN>{},
       std::integral_constant<int, C>{}, std::integral_constant<int, WV>{});
  }
}
template <class Fn>
void with_wgmma_shape(const WgmmaShape& s, Fn&& fn) {
  shape_case<2, 1, 128, 2, 2>(s, fn);
  shape_case<2, 1, 128, 1, 2>(s, fn);
  shape_case<2, 1, 128, 2, 1>(s, fn);
  shape_case<2, 1, 128, 1, 1>(s, fn);
  shape_case<1, 2, 64, 1, 1>(s, fn);
  shape_case<2, 1, 64, 1, 1>(s, fn);
  shape_case<1, 1, 64, 1, 1>(s, fn);
  shape_case<1, 1, 32, 1, 1>(s, fn);
  shape_case<1, 1, 16, 1, 1>(s, fn);
}
KernelConfig wgmma_config(const WgmmaShape& s) {
  int stages = 0;
  with_wgmma_shape(s, [&](auto wm, auto wn, auto wgn, auto c, auto wv) {
    stages = fp8g::WgmmaTile<wm(), wn(), wgn(), c(), wv()>::kStages;
  });
  return KernelConfig{s.c == 1 ? "wgmma_e4m3" : "wgmma_e4m3_x2", s.bm(), s.bn(), fp8g::kBK, stages};
}
const WgmmaShape* wgmma_shape_named(const KernelConfig& config) {
  for (const WgmmaShape& s : kWgmmaShapes) {
    if (config == wgmma_config(s)) return &s;
  }
  return nullptr;
}

void require_cuda_config(const char* op, const KernelConfig& config) {
  if (config.empty() || config == e4m3_config() || config == f16_config() || wgmma_shape_named(config)) return;
  std::string names = core::cat("'", e4m3_config().name(), "', '", f16_config().name(), "'");
  for (const WgmmaShape& s : kWgmmaShapes) names += core::cat(", '", wgmma_config(s).name(), "'");
  core::fail(ErrorCode::invalid_argument,
             core::cat(op, ": config '", config.name(), "' is not a cuda kernel config (expected one of ", names, ")"));
}

// The sm_90a kernel's shape for a call on `sms` SMs writing `out_bytes`
// elements: the least of the larger of two times, in cycles of an SM.
//   - Compute: waves of tiles times a tile's time, its K blocks and its
//     output. A K block takes the longest of its MMA (BM x BN / 32 cycles at
//     the FP8 rate; two consumer warpgroups in turns keep the tensor cores
//     about 68% busy at long K, one about 50%), its loads from L2
//     ((BM / C + BN) x 128 bytes at about 30 bytes a cycle an SM while all
//     SMs load) and a floor of about 450 cycles (a stage's round trip, which
//     bounds the narrow tiles). The output leaves at about 9 bytes a cycle
//     an SM, not hidden behind the MMA: it favours larger tiles at short K.
//   - Memory: a and b from DRAM (about 1650 bytes a cycle), a once when it
//     fits beside b in L2 (32 MiB), else once per column group of tiles
//     (the tiles run M fastest, so a large a leaves L2 between groups).
// Among shapes bound by memory the one of least compute wins; ties go to
// the tile of fewest rows that still covers all of them (then each row of
// b is read by one CTA), then to the earlier shape. The rates are fitted to
// the per-config times of bench_fp8.py on an H100 (docs/fp8_gemm.md).
const WgmmaShape& pick_wgmma_shape(const fp8g::Params& p, int64_t slices, int64_t b_experts, int out_bytes,
                                   int sms) {
  const WgmmaShape* best = nullptr;
  double best_cost = 0.0;
  const int64_t rows = p.rows, N = p.N;
  const double a_bytes = static_cast<double>(slices) * rows * p.K;
  const double b_bytes = static_cast<double>(b_experts) * N * p.K;
  const auto waste = [&](const WgmmaShape& s) { return s.bm() >= rows ? s.bm() : INT_MAX; };
  for (const WgmmaShape& s : kWgmmaShapes) {
    const int64_t groups_n = ceil_div(N, s.bn() * s.c);
    const int64_t tiles = slices * ceil_div(rows, s.bm()) * groups_n * s.c;
    const double waves = static_cast<double>(ceil_div(tiles, static_cast<int64_t>(sms / s.c * s.c)));
    const double area = static_cast<double>(s.bm()) * s.bn();
    const double mma = area / 32.0 / (s.wm * s.wn >= 2 ? 0.68 : 0.5);
    const double loads = (static_cast<double>(s.bm()) / s.c + s.bn()) * 128.0 / 30.0;
    const double tile = std::max({mma, loads, 450.0}) * p.kb + area * out_bytes / 9.0;
    const double compute = waves * tile;
    const double a_passes = a_bytes / slices > 32.0 * (1 << 20) ? static_cast<double>(groups_n) : 1.0;
    const double memory = (a_bytes * a_passes + b_bytes) / 1650.0;
    const double cost = std::max(compute, memory) + 0.01 * compute;  // bound by memory: the least compute
    const bool tie = best != nullptr && std::abs(cost - best_cost) <= 1e-9 * best_cost;
    if (best == nullptr || (cost < best_cost && !tie) || (tie && waste(s) < waste(*best))) best = &s, best_cost = cost;
  }
  return *best;
}

// p's operands with rows, N and K; every layout field left empty.
fp8g::Params base_params(const TensorRef& a, const TensorRef& a_s, const TensorRef& b, const TensorRef& b_s,
                         const TensorRef& out, int64_t rows, int64_t N, int64_t K) {
  fp8g::Params p{};
  p.a = a.ptr<const uint8_t>();
  p.a_s = a_s.ptr<const float>();
  p.b = b.ptr<const uint8_t>();
  p.b_s = b_s.ptr<const float>();
  p.out = out.data;
  p.rows = rows;
  p.N = N;
  p.K = K;
  p.kb = static_cast<int>(ceil_div(K, kFp8ScaleBlock));
  p.experts = 1;
  return p;
}

// The clusters of C CTAs of `kernel` the device holds at once (a host query, kept per device).
template <class Kernel>
int max_clusters(Kernel kernel, int threads, size_t smem, int C, const char* op) {
  static std::mutex mutex;
  static std::vector<int> known;
  int device = 0;
  check(cudaGetDevice(&device), op, "cudaGetDevice");
  const std::lock_guard<std::mutex> lock(mutex);
  if (known.size() <= static_cast<size_t>(device)) known.resize(static_cast<size_t>(device) + 1, 0);
  int& n = known[static_cast<size_t>(device)];
  if (n == 0) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(C));
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(C);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    config.attrs = &attr;
    config.numAttrs = 1;
    check(cudaOccupancyMaxActiveClusters(&n, kernel, &config), op, "cudaOccupancyMaxActiveClusters");
    LOWBIT_REQUIRE(n > 0, ErrorCode::device_error, op, ": the device runs no cluster of ", C, " CTAs of ", smem,
                   " bytes of shared memory");
  }
  return n;
}

// Whether TMA can store out's 16-bit rows: out and its rows 16-byte aligned.
bool out_rows_aligned16(const fp8g::Params& p) { return aligned16(p.out) && p.N * 2 % 16 == 0; }

template <class Out, int WM, int WN, int WGN, int C, int WV, bool kStagedOut>
void launch_wgmma(const char* op, const fp8g::Params& p, int64_t slices, int64_t b_experts, int sms,
                  cudaStream_t stream) {
  using S = fp8g::WgmmaTile<WM, WN, WGN, C, WV>;
  const auto u64 = [](int64_t v) { return static_cast<uint64_t>(v); };
  const CUtensorMap map_a = tensor_map_3d(p.a, 1, u64(slices), u64(p.rows), u64(p.K), u64(p.K), u64(p.rows * p.K),
                                          S::kBM / C, op);
  const CUtensorMap map_b =
      tensor_map_3d(p.b, 1, u64(b_experts), u64(p.N), u64(p.K), u64(p.K), u64(p.N * p.K), S::kBN, op);
  // a_s by TMA, [BM, 4] boxes, where its rows are 16-byte multiples (K blocks a multiple of 4)
  // and the tile has two waves: each 16-byte box row is a request of its own to the TMA unit,
  // hidden behind the MMA of a 256-row tile but not behind the shorter K blocks of smaller ones.
  const bool scale_tma = WV == 2 && aligned16(p.a_s) && p.kb % 4 == 0;
  CUtensorMap map_as{};
  if (scale_tma) {
    map_as = tensor_map_3d_f32(p.a_s, u64(slices), u64(p.rows), u64(p.kb), u64(p.kb) * 4, u64(p.rows * p.kb) * 4,
                               S::kBM, 4, op);
  }
  CUtensorMap map_out{};
  if constexpr (kStagedOut) {
    map_out = tensor_map_3d(p.out, 2, u64(slices), u64(p.rows), u64(p.N), u64(p.N * 2), u64(p.rows * p.N * 2), 64, op);
  }
  auto* kernel = &fp8g::fp8_gemm_wgmma<Out, WM, WN, WGN, C, WV, kStagedOut>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(S::kSmem)), op,
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  // The clusters' tiles: C neighbouring N tiles each.
  const int64_t tiles = slices * ceil_div(p.rows, S::kBM) * ceil_div(p.N, S::kBN * C);
  const int64_t resident = C == 1 ? sms : max_clusters(kernel, S::kThreads, S::kSmem, C, op);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, resident) * C);
  const size_t out_align = sizeof(Out) == 4 ? 8 : 4;
  const bool pair_ok = p.N % 2 == 0 && reinterpret_cast<uintptr_t>(p.out) % out_align == 0;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(S::kThreads);
  config.dynamicSmemBytes = S::kSmem;
  config.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = C;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  check(cudaLaunchKernelEx(&config, kernel, map_a, map_b, map_out, map_as, p, tiles, pair_ok, scale_tma), op,
        "cudaLaunchKernelEx(fp8_gemm_wgmma)");
}

template <class Out, bool kAsync, bool kFp8Mma>
void launch_tiles(const char* op, const fp8g::Params& p, int64_t slices, cudaStream_t stream) {
  auto* kernel = &fp8g::fp8_gemm_tiles<Out, kAsync, kFp8Mma>;
  // Over 48 KB of dynamic shared memory needs the opt-in (a host-side attribute, capture-safe).
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(fp8g::kSmem)), op,
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  const dim3 grid(static_cast<unsigned>(ceil_div(p.rows, kBM)), static_cast<unsigned>(ceil_div(p.N, kBN)),
                  static_cast<unsigned>(slices));
  kernel<<<grid, fp8g::kThreads, fp8g::kSmem, stream>>>(p);
  check_launch(op, "fp8_gemm_tiles");
}

// Whether the code the device loads for the kernel is sm_89+ (a build
// without sm_89 code runs its sm_80 code on an sm_89 GPU).
bool has_fp8_mma(const char* op) {
  cudaFuncAttributes attr{};
  check(cudaFuncGetAttributes(&attr, &fp8g::fp8_gemm_tiles<float, true, true>), op, "cudaFuncGetAttributes");
  return attr.binaryVersion >= 89;
}

// One call of the kernels: the operands, `slices` (experts of the masked
// layout, else 1), b's experts, out's dtype, the config asked for.
struct Call {
  const char* op;
  fp8g::Params p;
  int64_t slices, b_experts;
  DType out_dtype;
  KernelConfig config;
  int device;
};

// Whether the sm_90a kernel can take the call (the current device is the call's).
bool wgmma_fits(const Call& c) {
  return device_is_sm90(c.op) && aligned16(c.p.a) && aligned16(c.p.b) && c.p.rows <= INT32_MAX && c.p.N <= INT32_MAX &&
         c.slices <= INT32_MAX;
}

// The configs the call can run, best first: on sm_90 the wgmma shapes (the
// heuristic's first), then the tile kernel's e4m3 (sm_89+ code) and f16.
std::vector<KernelConfig> configs_of(const Call& c) {
  DeviceGuard guard(c.device, c.op);
  std::vector<KernelConfig> out;
  if (wgmma_fits(c)) {
    const WgmmaShape& best = pick_wgmma_shape(c.p, c.slices, c.b_experts, dtype_bits(c.out_dtype) / 8, sm_count(c.op));
    out.push_back(wgmma_config(best));
    for (const WgmmaShape& s : kWgmmaShapes) {
      if (&s != &best) out.push_back(wgmma_config(s));
    }
  }
  if (has_fp8_mma(c.op)) out.push_back(e4m3_config());
  out.push_back(f16_config());
  return out;
}

// The sm_90a kernel where it fits and the config allows, else the tile kernel
// (cp.async when a and b start 16-byte aligned: their rows then do too, K % 16 == 0).
void launch(const Call& c, Stream stream) {
  const char* op = c.op;
  const fp8g::Params& p = c.p;
  require_cuda_config(op, c.config);
  if (p.rows == 0 || p.N == 0 || c.slices == 0) return;
  DeviceGuard guard(c.device, op);
  const WgmmaShape* forced = wgmma_shape_named(c.config);
  const bool wgmma = (c.config.empty() || forced != nullptr) && wgmma_fits(c);
  LOWBIT_REQUIRE(wgmma || forced == nullptr, ErrorCode::invalid_argument, op, ": config '", c.config.name(),
                 "' needs an sm_90 device and a and b starting 16-byte aligned");
  if (wgmma) {
    const int sms = sm_count(op);
    const WgmmaShape& shape =
        forced ? *forced : pick_wgmma_shape(p, c.slices, c.b_experts, dtype_bits(c.out_dtype) / 8, sms);
    with_float_type(c.out_dtype, op, "out", [&](auto t) {
      using Out = decltype(t);
      with_wgmma_shape(shape, [&](auto wm, auto wn, auto wgn, auto cl, auto wv) {
        // The staged epilogue: 16-bit results, tiles whose warpgroups' columns are whole 128-byte chunks.
        if constexpr (sizeof(Out) == 2 && fp8g::WgmmaTile<wm(), wn(), wgn(), cl(), wv()>::kStagedOut) {
          if (out_rows_aligned16(p)) {
            launch_wgmma<Out, wm(), wn(), wgn(), cl(), wv(), true>(op, p, c.slices, c.b_experts, sms, to_cuda(stream));
            return;
          }
        }
        launch_wgmma<Out, wm(), wn(), wgn(), cl(), wv(), false>(op, p, c.slices, c.b_experts, sms, to_cuda(stream));
      });
    });
    return;
  }
  LOWBIT_REQUIRE(ceil_div(p.rows, kBM) <= INT32_MAX && ceil_div(p.N, kBN) <= 65535 && c.slices <= 65535,
                 ErrorCode::invalid_argument, op, ": shape too large for the cuda kernel's grid (rows ", p.rows, ", N ",
                 p.N, ", experts ", c.slices, ")");
  const bool fp8_mma = c.config != f16_config() && has_fp8_mma(op);
  LOWBIT_REQUIRE(fp8_mma || c.config != e4m3_config(), ErrorCode::invalid_argument, op, ": config '", c.config.name(),
                 "' needs sm_89+ code for this device (this build runs its sm_80 code here)");
  const bool async = aligned16(p.a) && aligned16(p.b);
  with_float_type(c.out_dtype, op, "out", [&](auto t) {
    using Out = decltype(t);
    if (async && fp8_mma) launch_tiles<Out, true, true>(op, p, c.slices, to_cuda(stream));
    if (async && !fp8_mma) launch_tiles<Out, true, false>(op, p, c.slices, to_cuda(stream));
    if (!async && fp8_mma) launch_tiles<Out, false, true>(op, p, c.slices, to_cuda(stream));
    if (!async && !fp8_mma) launch_tiles<Out, false, false>(op, p, c.slices, to_cuda(stream));
  });
}

Call call_of(const Fp8GemmArgs& a) {
  const int64_t K = a.a.size(-1);
  Call c{Fp8GemmArgs::kName,
         base_params(a.a, a.a_s, a.b, a.b_s, a.out, a.a.numel() / K, a.b.shape[0], K),
         1,
         1,
         a.out.dtype,
         a.config,
         a.a.device.index};
  c.p.bias = a.bias.present() ? a.bias.ptr<const float>() : nullptr;
  return c;
}

Call call_of(const Fp8GroupedGemmContiguousArgs& a) {
  const char* op = Fp8GroupedGemmContiguousArgs::kName;
  LOWBIT_REQUIRE(a.b.shape[0] <= INT32_MAX, ErrorCode::invalid_argument, op, ": too many experts (", a.b.shape[0], ")");
  Call c{op,
         base_params(a.a, a.a_s, a.b, a.b_s, a.out, a.a.shape[0], a.b.shape[1], a.b.shape[2]),
         1,
         a.b.shape[0],
         a.out.dtype,
         a.config,
         a.a.device.index};
  c.p.m_indices = a.m_indices.ptr<const int32_t>();
  c.p.experts = static_cast<int>(a.b.shape[0]);
  return c;
}

Call call_of(const Fp8GroupedGemmMaskedArgs& a) {
  const char* op = Fp8GroupedGemmMaskedArgs::kName;
  LOWBIT_REQUIRE(a.a.shape[0] <= INT32_MAX, ErrorCode::invalid_argument, op, ": too many experts (", a.a.shape[0], ")");
  Call c{op,
         base_params(a.a, a.a_s, a.b, a.b_s, a.out, a.a.shape[1], a.b.shape[1], a.b.shape[2]),
         a.a.shape[0],
         a.a.shape[0],
         a.out.dtype,
         a.config,
         a.a.device.index};
  c.p.masked_m = a.masked_m.ptr<const int32_t>();
  c.p.experts = static_cast<int>(a.a.shape[0]);
  return c;
}

}  // namespace

void fp8_gemm(const Fp8GemmArgs& a, void* /*workspace*/, Stream stream) { launch(call_of(a), stream); }
void fp8_grouped_gemm_contiguous(const Fp8GroupedGemmContiguousArgs& a, void* /*workspace*/, Stream stream) {
  launch(call_of(a), stream);
}
void fp8_grouped_gemm_masked(const Fp8GroupedGemmMaskedArgs& a, void* /*workspace*/, Stream stream) {
  launch(call_of(a), stream);
}

std::vector<KernelConfig> fp8_gemm_configs(const Fp8GemmArgs& a) { return configs_of(call_of(a)); }
std::vector<KernelConfig> fp8_grouped_gemm_contiguous_configs(const Fp8GroupedGemmContiguousArgs& a) {
  return configs_of(call_of(a));
}
std::vector<KernelConfig> fp8_grouped_gemm_masked_configs(const Fp8GroupedGemmMaskedArgs& a) {
  return configs_of(call_of(a));
}

}  // namespace lowbit::cuda
