// The FP8 forward pass of `lowbit demo`: the DeepSeek fp8-block checkpoint
// that `lowbit quantize` wrote, read back as a serving stack reads it (each
// projection's `weight` and `weight_scale_inv`), applied to activations
// through act_quant + fp8_gemm, against the bf16 layer's x . W^T in double.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/float_convert.h"
#include "core/registry.h"
#include "demo_checkpoint.h"
#include "lowbit/error.h"
#include "lowbit/io.h"
#include "lowbit/ops/fp8_gemm.h"
#include "lowbit/ops/quant.h"

namespace lowbit::cli {
namespace {

// Tokens of the demo's activations: a decode batch.
constexpr int64_t kTokens = 8;

// Activations bf16 [kTokens, K], deterministic, RMS about 1.
Tensor activations(int64_t K) {
  Tensor x = Tensor::empty({kTokens, K}, DType::bf16);
  auto* p = x.ptr<uint16_t>();
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < kTokens * K; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    const double u = static_cast<double>(s >> 11) / 9007199254740992.0;  // [0, 1)
    p[i] = core::f32_to_bf16(static_cast<float>(std::sqrt(3.0) * (2.0 * u - 1.0)));
  }
  return x;
}

// x . W^T in double, and the relative L2 error of got (f32 [kTokens, N]).
double relative_error(const Tensor& x, const Tensor& w, const Tensor& got) {
  const int64_t K = x.size(1), N = w.size(0);
  const auto* xp = x.ptr<uint16_t>();
  const auto* wp = w.ptr<uint16_t>();
  const float* gp = got.ptr<float>();
  std::vector<double> xd(static_cast<size_t>(kTokens * K));
  for (size_t i = 0; i < xd.size(); ++i) xd[i] = core::bf16_to_f32(xp[i]);
  double err = 0.0, ref = 0.0;
#pragma omp parallel for reduction(+ : err, ref) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> row(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) row[static_cast<size_t>(k)] = core::bf16_to_f32(wp[n * K + k]);
    for (int64_t m = 0; m < kTokens; ++m) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc += xd[static_cast<size_t>(m * K + k)] * row[static_cast<size_t>(k)];
      const double d = gp[m * N + n] - acc;
      err += d * d;
      ref += acc * acc;
    }
  }
  return ref > 0 ? std::sqrt(err / ref) : std::sqrt(err);
}

// Whether fp8_gemm has a kernel for `device`.
bool runs_on(Device device) {
  try {
    core::OpRegistry<Fp8GemmArgs>::select(device);
    return true;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::no_backend) return false;
    throw;
  }
}

}  // namespace

void run_fp8_forward(const std::filesystem::path& checkpoint, const std::vector<DemoWeight>& weights, Device device) {
  const io::Checkpoint ckpt = io::Checkpoint::open(checkpoint);
  std::printf(
      "\nfp8 forward pass: the fp8-block checkpoint read back (weight + weight_scale_inv), activations x [%lld, K]\n"
      "through act_quant + fp8_gemm (fp32 out), against x . W^T of the bf16 layer in double\n\n",
      static_cast<long long>(kTokens));
  std::printf("%-12s %-7s %12s %10s %10s\n", "projection", "device", "rel. error", "time ms", "GFLOP/s");
  bool fell_back = false;
  for (const DemoWeight& w : weights) {
    const std::string key = demo_weight_key(w.name);
    const io::SafetensorsFile* file = ckpt.file_of(key);
    LOWBIT_REQUIRE(file != nullptr, ErrorCode::format_error, "demo: ", key, " missing from ", checkpoint.string());
    Device where = device;
    Tensor wq = file->load(key, Device::cpu()), ws = file->load(key + "_scale_inv", Device::cpu());
    const Tensor x = activations(wq.size(1));
    if (!runs_on(device)) {
      where = Device::cpu();
      fell_back = true;
    } else if (!device.is_cpu()) {
      wq = wq.to(device), ws = ws.to(device);
    }
    const Tensor xd = where.is_cpu() ? x : x.to(where);
    auto forward = [&] {
      const Fp8Quantized q = act_quant(xd);
      return fp8_gemm(q.values, q.scale, wq, ws, DType::f32);
    };
    Tensor out = forward();  // warm: plans, allocator, pages
    synchronize(Stream{});
    const int reps = where.is_cpu() ? 3 : 20;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) out = forward();
    synchronize(Stream{});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    const double flops = 2.0 * static_cast<double>(kTokens) * static_cast<double>(wq.numel());
    const Tensor host = out.to(Device::cpu());
    const std::string dev = where == device ? where.str() : where.str() + "*";
    std::printf("%-12s %-7s %12.3e %10.3f %10.1f\n", w.name.c_str(), dev.c_str(), relative_error(x, *w.host, host),
                1e3 * s, flops / s / 1e9);
    std::fflush(stdout);
  }
  std::printf(
      "\nrel. error: ||out - x . W^T|| / ||x . W^T|| over the batch (the bf16 weights and activations, in double);\n"
      "it holds the fp8 rounding of both operands. time: act_quant + fp8_gemm per call, wall clock.\n");
  if (fell_back) std::printf("*: no %s fp8_gemm kernel yet; ran on the CPU.\n", device.str().c_str());
}

}  // namespace lowbit::cli
