// int8_linear_matmul, int8_scaled_mm and int8_mm_dequant on CUDA. The two
// GEMMs fill i8g::Params for the sm_90a TMA + wgmma kernel
// (int8_gemm_wgmma.cuh) where the device is sm_90, a and b start 16-byte
// aligned and K % 16 == 0 (TMA's row strides), else for the mma.sync kernel
// of every GPU (int8_gemm.cuh). int8_mm_dequant is one elementwise kernel
// on the same epilogue. No call reads device data on the host, synchronizes
// or allocates, so every call can be captured in a CUDA graph.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/hd.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/launch.h"
#include "cuda/common/tma.h"
#include "cuda/gemm/int8_gemm.cuh"
#include "cuda/gemm/int8_gemm_wgmma.cuh"
#include "cuda/gemm/ops.h"

namespace lowbit::cuda {
namespace {

// The sm_90a kernel's tiles: a consumer warpgroup's waves of 64 rows and its columns.
struct WgmmaShape {
  int wv, wgn;
  int bm() const { return 64 * wv; }
  int bn() const { return wgn; }
};
// Ties of the heuristic go to the earlier shape: larger tiles first.
constexpr WgmmaShape kWgmmaShapes[] = {{2, 128}, {1, 256}, {1, 128}, {1, 64}, {1, 32}};

// Calls fn with the shape's template arguments (WV, WGN as integral constants).
template <int WV, int WGN, class Fn>
void shape_case(const WgmmaShape& s, Fn& fn) {
  if (s.wv == WV && s.wgn == WGN) fn(std::integral_constant<int, WV>{}, std::integral_constant<int, WGN>{});
}
template <class Fn>
void with_wgmma_shape(const WgmmaShape& s, Fn&& fn) {
  shape_case<2, 128>(s, fn);
  shape_case<1, 256>(s, fn);
  shape_case<1, 128>(s, fn);
  shape_case<1, 64>(s, fn);
  shape_case<1, 32>(s, fn);
}
KernelConfig wgmma_config(const WgmmaShape& s) {
  int stages = 0;
  with_wgmma_shape(s, [&](auto wv, auto wgn) { stages = i8g::WgmmaTile<wv(), wgn()>::kStages; });
  return KernelConfig{"wgmma_i8", s.bm(), s.bn(), i8g::kBK, stages};
}
const WgmmaShape* wgmma_shape_named(const KernelConfig& config) {
  for (const WgmmaShape& s : kWgmmaShapes) {
    if (config == wgmma_config(s)) return &s;
  }
  return nullptr;
}
const KernelConfig& tiles_config() {
  static const KernelConfig c{"mma_i8", i8g::tiles::kBM, i8g::tiles::kBN, i8g::kBK, i8g::tiles::kStages};
  return c;
}

void require_cuda_config(const char* op, const KernelConfig& config) {
  if (config.empty() || config == tiles_config() || wgmma_shape_named(config)) return;
  std::string names = core::cat("'", tiles_config().name(), "'");
  for (const WgmmaShape& s : kWgmmaShapes) names += core::cat(", '", wgmma_config(s).name(), "'");
  core::fail(ErrorCode::invalid_argument,
             core::cat(op, ": config '", config.name(), "' is not a cuda kernel config (expected one of ", names, ")"));
}

// The sm_90a kernel's shape for a call on `sms` SMs writing `out_bytes`
// elements: the least of the larger of two times, in cycles of an SM.
//   - Compute: a CTA's tiles in turn, each K block the longest of its MMA
//     (BM x BN / 32 cycles at the int8 rate, about 85% busy), its loads
//     from L2 ((BM + BN) x 128 bytes at about 30 bytes a cycle an SM) and a
//     floor of about 400 cycles (a stage's round trip, which bounds narrow
//     tiles at small M); the output hides under the other warpgroup's MMA.
//   - Memory: a, b and out through DRAM (about 1650 bytes a cycle), a once
//     when it fits in L2 (32 MiB), else once per column of tiles.
const WgmmaShape& pick_wgmma_shape(int64_t rows, int64_t N, int64_t K, int out_bytes, int sms) {
  const WgmmaShape* best = nullptr;
  double best_cost = 0.0;
  const int64_t kb = ceil_div(K, i8g::kBK);
  const double a_bytes = static_cast<double>(rows) * K, b_bytes = static_cast<double>(N) * K;
  const double out_total = static_cast<double>(rows) * N * out_bytes;
  for (const WgmmaShape& s : kWgmmaShapes) {
    const int64_t tiles_n = ceil_div(N, s.bn());
    const int64_t tiles = ceil_div(rows, s.bm()) * tiles_n;
    const double per_cta = static_cast<double>(ceil_div(tiles, static_cast<int64_t>(sms)));
    const double mma = static_cast<double>(s.bm()) * s.bn() / 32.0 / 0.85;
    const double loads = (static_cast<double>(s.bm()) + s.bn()) * 128.0 / 30.0;
    const double compute = per_cta * static_cast<double>(kb) * std::max({mma, loads, 400.0});
    const double a_passes = a_bytes > 32.0 * (1 << 20) ? static_cast<double>(tiles_n) : 1.0;
    const double memory = (a_bytes * a_passes + b_bytes + out_total) / 1650.0;
    const double cost = std::max(compute, memory) + 0.01 * compute;  // bound by memory: the least compute
    if (best == nullptr || cost < best_cost * (1.0 - 1e-9)) best = &s, best_cost = cost;
  }
  return *best;
}

// One call of the GEMM kernels: the operands, out's dtype (i32: the sums),
// the config asked for and the device.
struct Call {
  const char* op;
  i8g::Params p;
  DType out_dtype;
  KernelConfig config;
  int device;
};

// Whether the sm_90a kernel can take the call (the current device is the call's).
bool wgmma_fits(const Call& c) {
  return device_is_sm90(c.op) && aligned16(c.p.a) && aligned16(c.p.b) && c.p.K % 16 == 0 && c.p.rows <= INT32_MAX &&
         c.p.N <= INT32_MAX;
}

int out_bytes(DType d) { return dtype_bits(d) / 8; }

// The configs the call can run, best first: on sm_90 the wgmma shapes (the heuristic's first), then mma.sync.
std::vector<KernelConfig> configs_of(const Call& c) {
  DeviceGuard guard(c.device, c.op);
  std::vector<KernelConfig> out;
  if (wgmma_fits(c)) {
    const WgmmaShape& best = pick_wgmma_shape(c.p.rows, c.p.N, c.p.K, out_bytes(c.out_dtype), sm_count(c.op));
    out.push_back(wgmma_config(best));
    for (const WgmmaShape& s : kWgmmaShapes) {
      if (&s != &best) out.push_back(wgmma_config(s));
    }
  }
  out.push_back(tiles_config());
  return out;
}

// out's rows hold whole aligned pairs of Out.
template <class Out>
bool pairs_aligned(const i8g::Params& p) {
  return p.N % 2 == 0 && reinterpret_cast<uintptr_t>(p.out) % (2 * sizeof(Out)) == 0;
}

template <class Out, int WV, int WGN>
void launch_wgmma(const char* op, i8g::Params p, int sms, cudaStream_t stream) {
  using S = i8g::WgmmaTile<WV, WGN>;
  const auto u64 = [](int64_t v) { return static_cast<uint64_t>(v); };
  p.a_box_rows = static_cast<int>(std::min<int64_t>(S::kBM, (p.rows + 7) / 8 * 8));
  const auto box_rows = static_cast<uint32_t>(p.a_box_rows);
  const CUtensorMap map_a = tensor_map_3d(p.a, 1, 1, u64(p.rows), u64(p.K), u64(p.K), u64(p.rows * p.K), box_rows, op);
  const CUtensorMap map_b = tensor_map_3d(p.b, 1, 1, u64(p.N), u64(p.K), u64(p.K), u64(p.N * p.K), S::kBN, op);
  auto* kernel = &i8g::int8_gemm_wgmma<Out, WV, WGN>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(S::kSmem)), op,
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  const int64_t tiles = ceil_div(p.rows, S::kBM) * ceil_div(p.N, S::kBN);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, sms));
  kernel<<<grid, S::kThreads, S::kSmem, stream>>>(map_a, map_b, p, tiles, pairs_aligned<Out>(p));
  check_launch(op, "int8_gemm_wgmma");
}

template <class Out, bool kAsync>
void launch_tiles(const char* op, const i8g::Params& p, cudaStream_t stream) {
  namespace t = i8g::tiles;
  auto* kernel = &t::int8_gemm_tiles<Out, kAsync>;
  // Over 48 KB of dynamic shared memory needs the opt-in (a host-side attribute, capture-safe).
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(t::kSmem)), op,
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  const dim3 grid(static_cast<unsigned>(ceil_div(p.rows, t::kBM)), static_cast<unsigned>(ceil_div(p.N, t::kBN)));
  kernel<<<grid, t::kThreads, t::kSmem, stream>>>(p, pairs_aligned<Out>(p));
  check_launch(op, "int8_gemm_tiles");
}

// Calls fn(T{}) with out's storage type: int32_t for the sums, else the float type.
template <class Fn>
void with_out_type(DType dtype, const char* op, Fn&& fn) {
  if (dtype == DType::i32) {
    fn(int32_t{});
    return;
  }
  with_float_type(dtype, op, "out", fn);
}

// The sm_90a kernel where it fits and the config allows, else the mma.sync kernel.
void launch(const Call& c, Stream stream) {
  const char* op = c.op;
  const i8g::Params& p = c.p;
  require_cuda_config(op, c.config);
  if (p.rows == 0 || p.N == 0) return;
  DeviceGuard guard(c.device, op);
  const WgmmaShape* forced = wgmma_shape_named(c.config);
  const bool wgmma = (c.config.empty() || forced != nullptr) && wgmma_fits(c);
  LOWBIT_REQUIRE(wgmma || forced == nullptr, ErrorCode::invalid_argument, op, ": config '", c.config.name(),
                 "' needs an sm_90 device, a and b starting 16-byte aligned and K a multiple of 16 (K ", p.K, ")");
  if (wgmma) {
    const int sms = sm_count(op);
    const WgmmaShape& shape = forced ? *forced : pick_wgmma_shape(p.rows, p.N, p.K, out_bytes(c.out_dtype), sms);
    with_out_type(c.out_dtype, op, [&](auto t) {
      using Out = decltype(t);
      with_wgmma_shape(shape, [&](auto wv, auto wgn) { launch_wgmma<Out, wv(), wgn()>(op, p, sms, to_cuda(stream)); });
    });
    return;
  }
  LOWBIT_REQUIRE(ceil_div(p.rows, i8g::tiles::kBM) <= INT32_MAX && ceil_div(p.N, i8g::tiles::kBN) <= 65535,
                 ErrorCode::invalid_argument, op, ": shape too large for the cuda kernel's grid (rows ", p.rows, ", N ",
                 p.N, ")");
  // cp.async where every 16-byte chunk of a and b is aligned: their starts, and rows of whole chunks.
  const bool async = aligned16(p.a) && aligned16(p.b) && p.K % 16 == 0;
  with_out_type(c.out_dtype, op, [&](auto t) {
    using Out = decltype(t);
    if (async) {
      launch_tiles<Out, true>(op, p, to_cuda(stream));
    } else {
      launch_tiles<Out, false>(op, p, to_cuda(stream));
    }
  });
}

// The dequantization's part of p: statistics, bias and out.
void set_dequant(i8g::Params& p, const TensorRef& row_stats, const TensorRef& col_stats, const TensorRef& bias) {
  p.row_stats = row_stats.ptr<const float>();
  p.col_stats = col_stats.ptr<const float>();
  p.bias = bias.present() ? bias.data : nullptr;
  p.bias_type = i8g::bias_type_of(bias);
  const uintptr_t bias_pair = bias.present() ? 2 * static_cast<uintptr_t>(dtype_bits(bias.dtype) / 8) : 1;
  p.stat_pairs = aligned8(p.col_stats) && reinterpret_cast<uintptr_t>(p.bias) % bias_pair == 0;
}

i8g::Params gemm_params(const TensorRef& a, const TensorRef& b, const TensorRef& out) {
  i8g::Params p{};
  p.a = a.ptr<const int8_t>();
  p.b = b.ptr<const int8_t>();
  p.out = out.data;
  p.K = a.size(-1);
  p.rows = a.numel() / p.K;
  p.N = b.shape[0];
  p.kb = static_cast<int>(ceil_div(p.K, i8g::kBK));
  return p;
}

Call call_of(const Int8LinearMatmulArgs& a) {
  return Call{Int8LinearMatmulArgs::kName, gemm_params(a.a, a.b, a.out), DType::i32, a.config, a.a.device.index};
}

Call call_of(const Int8ScaledMmArgs& a) {
  Call c{Int8ScaledMmArgs::kName, gemm_params(a.a, a.b, a.out), a.out.dtype, a.config, a.a.device.index};
  set_dequant(c.p, a.row_stats, a.col_stats, a.bias);
  return c;
}

constexpr int kDequantThreads = 256;

// One pair of adjacent columns a thread: c's sums to out through the GEMMs' epilogue.
template <class Out>
__global__ void __launch_bounds__(kDequantThreads)
    int8_mm_dequant_kernel(const int32_t* c, const i8g::Params p, bool c_pairs, bool out_pairs) {
  const int64_t per_row = (p.N + 1) / 2, total = p.rows * per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kDequantThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kDequantThreads + threadIdx.x; i < total; i += stride) {
    const int64_t m = i / per_row, n = 2 * (i % per_row);
    const int32_t* src = c + m * p.N + n;
    int32_t c0 = 0, c1 = 0;
    if (c_pairs) {
      const int2 v = __ldg(reinterpret_cast<const int2*>(src));
      c0 = v.x;
      c1 = v.y;
    } else {
      c0 = __ldg(src);
      if (n + 1 < p.N) c1 = __ldg(src + 1);
    }
    i8g::store_pair<Out>(p, m, n, __ldg(p.row_stats + m), c0, c1, out_pairs);
  }
}

}  // namespace

void int8_linear_matmul(const Int8LinearMatmulArgs& a, void* /*workspace*/, Stream stream) {
  launch(call_of(a), stream);
}
void int8_scaled_mm(const Int8ScaledMmArgs& a, void* /*workspace*/, Stream stream) { launch(call_of(a), stream); }
std::vector<KernelConfig> int8_linear_matmul_configs(const Int8LinearMatmulArgs& a) { return configs_of(call_of(a)); }
std::vector<KernelConfig> int8_scaled_mm_configs(const Int8ScaledMmArgs& a) { return configs_of(call_of(a)); }

void int8_mm_dequant(const Int8MmDequantArgs& a, void* /*workspace*/, Stream stream) {
  const char* op = Int8MmDequantArgs::kName;
  i8g::Params p{};
  p.N = a.a.size(-1);
  p.rows = a.a.numel() / p.N;
  p.out = a.out.data;
  set_dequant(p, a.row_stats, a.col_stats, a.bias);
  if (p.rows == 0) return;
  DeviceGuard guard(a.a.device.index, op);
  const int32_t* c = a.a.ptr<const int32_t>();
  const bool c_pairs = p.N % 2 == 0 && aligned8(c);
  with_float_type(a.out.dtype, op, "out", [&](auto t) {
    using Out = decltype(t);
    auto* kernel = &int8_mm_dequant_kernel<Out>;
    const int grid =
        persistent_grid(kernel, kDequantThreads, 0, ceil_div(p.rows * ((p.N + 1) / 2), kDequantThreads), op);
    kernel<<<grid, kDequantThreads, 0, to_cuda(stream)>>>(c, p, c_pairs, pairs_aligned<Out>(p));
    check_launch(op, "int8_mm_dequant");
  });
}

}  // namespace lowbit::cuda
