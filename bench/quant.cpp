// `lowbit bench quant [--device cpu|cuda] [--elements N] [--reps R]`: the
// bandwidth of each quantization op against the machine's copy bandwidth,
// measured in the same run (docs/cli.md).
//
// For each op, input dtype (fp16, fp32) and blocksize (64, 256, 4096; the FP8
// ops use their 128 blocks) it prints the median time over --reps runs, GB/s
// counting the bytes the op must move (every input read once, every output
// written once) and that rate over the copy rate. On the GPU the copy is a
// device-to-device cudaMemcpy (bytes read + written), L2 is flushed before each
// repetition by reading a 256 MB buffer (cublasSasum, leaving L2 clean; a
// memset, leaving it dirty, without cuBLAS: timer.h; the copy is timed the
// same way), and times come from CUDA events; on the CPU the copy is a memcpy
// split over the same OpenMP threads the ops use. Inputs are random (never
// zeros), and on the GPU each op's output is checked against the CPU backend
// on a prefix before it is timed.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "benchmarks.h"
#include "internals.h"
#include "lowbit/code_maps.h"
#include "lowbit/error.h"
#include "lowbit/ops/quant.h"
#include "lowbit/tensor.h"
#include "random.h"
#include "timer.h"

#if defined(LOWBIT_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace lowbit::bench {
namespace {

constexpr int64_t kRowLen = 4096;  // K of act_quant / weight_dequant ([n / K, K])
constexpr int64_t kFp8Block = 128;
constexpr int64_t kCheckElems = 1 << 20;  // prefix checked against the CPU backend (whole blocks and rows)

// --------------------------------------------------------------- input data
// Roughly normal values (sum of four uniforms), a few large ones.
std::vector<float> random_values(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = random_bits(seed, static_cast<uint64_t>(i));
    float x = normal_from_bits(r);     // unit variance
    if ((r & 0x3ffu) == 0) x *= 8.0f;  // one in 1024: an outlier stretching its block
    v[static_cast<size_t>(i)] = x;
  }
  return v;
}

// A host tensor of `dtype` holding `values`.
Tensor host_tensor(const std::vector<float>& values, DType dtype) {
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor t = Tensor::empty({n}, dtype, Device::cpu());
  if (dtype == DType::f32) {
    std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  } else {
    auto* p = t.ptr<uint16_t>();
    const bool half = dtype == DType::f16;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float x = values[static_cast<size_t>(i)];
      p[i] = half ? f32_to_f16(x) : f32_to_bf16(x);
    }
  }
  return t;
}

// The first `n` elements of a contiguous tensor, as a flat view.
TensorRef prefix(const TensorRef& t, int64_t n) { return TensorRef::contiguous(t.data, t.dtype, {n}, t.device); }
TensorRef rows_view(const TensorRef& t, int64_t rows, int64_t cols) {
  return TensorRef::contiguous(t.data, t.dtype, {rows, cols}, t.device);
}

// ------------------------------------------------------------------- cases
struct Row {
  std::string op;
  std::string dtype;
  int64_t block;
  double ms;
  double gbps;
  double of_copy;
  std::string check;
};

// Bytes equal, element for element; NaN equals NaN (bit patterns of NaN are
// not part of the contract).
int64_t count_mismatches(const Tensor& a, const Tensor& b) {
  if (a.nbytes() != b.nbytes()) return -1;
  int64_t bad = 0;
  if (a.dtype() == DType::f32) {
    const float* x = a.ptr<const float>();
    const float* y = b.ptr<const float>();
    for (int64_t i = 0; i < a.numel(); ++i) {
      if (std::memcmp(x + i, y + i, 4) != 0 && !(std::isnan(x[i]) && std::isnan(y[i]))) ++bad;
    }
    return bad;
  }
  const auto* x = static_cast<const uint8_t*>(a.data());
  const auto* y = static_cast<const uint8_t*>(b.data());
  for (size_t i = 0; i < a.nbytes(); ++i) bad += x[i] != y[i];
  return bad;
}

std::string check_text(std::initializer_list<std::pair<const Tensor*, const Tensor*>> pairs) {
  int64_t bad = 0;
  for (const auto& p : pairs) {
    const int64_t m = count_mismatches(*p.first, *p.second);
    if (m < 0) return "size?";
    bad += m;
  }
  return bad == 0 ? "ok" : cat(bad, " differ");
}

Tensor to_host(const TensorRef& t) { return Tensor::copy_of(t, Device::cpu()); }

class QuantBench {
 public:
  QuantBench(Device device, int64_t n, int reps, Timer& timer, Stream stream)
      : dev_(device), n_(n), reps_(reps), timer_(timer), stream_(stream) {}

  void run_all() {
    const std::vector<float> values = random_values(n_, 1);
    const Tensor code = Tensor::copy_of(code_host_ref(), dev_, stream_);
    for (DType dt : {DType::f16, DType::f32}) {
      const Tensor host_in = host_tensor(values, dt);
      const Tensor in = dev_.is_cpu() ? host_in : Tensor::copy_of(host_in, dev_, stream_);
      const std::string dname = dt == DType::f16 ? "f16" : "f32";
      const double esize = dt == DType::f16 ? 2.0 : 4.0;
      for (int64_t bs : {64, 256, 4096}) {
        const int64_t nb = ceil_div(n_, bs);
        Tensor q = Tensor::empty({n_}, DType::u8, dev_), absmax = Tensor::empty({nb}, DType::f32, dev_);
        Tensor out = Tensor::empty({n_}, dt, dev_);
        QuantizeBlockwiseArgs qa{in, code, q, absmax, bs};
        DequantizeBlockwiseArgs da{q, code, absmax, {}, out, bs};
        const double qbytes = n_ * esize + n_ + nb * 4.0;
        add(
            "quantize_blockwise", dname, bs, qbytes, [&] { lowbit::run(qa, nullptr, stream_); },
            [&] {
              const Tensor hin = to_host(prefix(in, kCheckElems));
              Tensor hq = Tensor::empty({kCheckElems}, DType::u8), ha = Tensor::empty({kCheckElems / bs}, DType::f32);
              lowbit::run(QuantizeBlockwiseArgs{hin, code_host_ref(), hq, ha, bs});
              const Tensor gq = to_host(prefix(q, kCheckElems)), ga = to_host(prefix(absmax, kCheckElems / bs));
              return check_text({{&hq, &gq}, {&ha, &ga}});
            });
        add(
            "dequantize_blockwise", dname, bs, qbytes, [&] { lowbit::run(da, nullptr, stream_); },
            [&] {
              const Tensor hq = to_host(prefix(q, kCheckElems)), ha = to_host(prefix(absmax, kCheckElems / bs));
              Tensor ho = Tensor::empty({kCheckElems}, dt);
              lowbit::run(DequantizeBlockwiseArgs{hq, code_host_ref(), ha, {}, ho, bs});
              const Tensor go = to_host(prefix(out, kCheckElems));
              return check_text({{&ho, &go}});
            });
        Tensor q4 = Tensor::empty({(n_ + 1) / 2}, DType::u8, dev_);
        Quantize4bitArgs q4a{in, q4, absmax, bs, Quant4Type::nf4};
        Dequantize4bitArgs d4a{q4, absmax, {}, out, bs, Quant4Type::nf4};
        const double q4bytes = n_ * esize + (n_ + 1) / 2 + nb * 4.0;
        add(
            "quantize_4bit nf4", dname, bs, q4bytes, [&] { lowbit::run(q4a, nullptr, stream_); },
            [&] {
              const Tensor hin = to_host(prefix(in, kCheckElems));
              Tensor hq = Tensor::empty({kCheckElems / 2}, DType::u8),
                     ha = Tensor::empty({kCheckElems / bs}, DType::f32);
              lowbit::run(Quantize4bitArgs{hin, hq, ha, bs, Quant4Type::nf4});
              const Tensor gq = to_host(prefix(q4, kCheckElems / 2)), ga = to_host(prefix(absmax, kCheckElems / bs));
              return check_text({{&hq, &gq}, {&ha, &ga}});
            });
        add(
            "dequantize_4bit nf4", dname, bs, q4bytes, [&] { lowbit::run(d4a, nullptr, stream_); },
            [&] {
              const Tensor hq = to_host(prefix(q4, kCheckElems / 2)), ha = to_host(prefix(absmax, kCheckElems / bs));
              Tensor ho = Tensor::empty({kCheckElems}, dt);
              lowbit::run(Dequantize4bitArgs{hq, ha, {}, ho, bs, Quant4Type::nf4});
              const Tensor go = to_host(prefix(out, kCheckElems));
              return check_text({{&ho, &go}});
            });
      }
      // FP8, [rows, K] with 128 blocks.
      const int64_t rows = n_ / kRowLen, m = rows * kRowLen;
      const TensorRef in2 = rows_view(in, rows, kRowLen);
      Tensor f8 = Tensor::empty({rows, kRowLen}, DType::f8_e4m3, dev_);
      Tensor as = Tensor::empty({rows, kRowLen / kFp8Block}, DType::f32, dev_);
      ActQuantArgs aa{in2, f8, as, kFp8Block, false};
      add(
          "act_quant", dname, kFp8Block, m * esize + m + m / kFp8Block * 4.0,
          [&] { lowbit::run(aa, nullptr, stream_); },
          [&] {
            const int64_t r = kCheckElems / kRowLen;
            const Tensor hin = to_host(rows_view(in, r, kRowLen));
            Tensor hq = Tensor::empty({r, kRowLen}, DType::f8_e4m3),
                   hs = Tensor::empty({r, kRowLen / kFp8Block}, DType::f32);
            lowbit::run(ActQuantArgs{hin, hq, hs, kFp8Block, false});
            const Tensor gq = to_host(prefix(f8, kCheckElems)), gs = to_host(prefix(as, kCheckElems / kFp8Block));
            return check_text({{&hq, &gq}, {&hs, &gs}});
          });
      const int64_t srows = (rows + kFp8Block - 1) / kFp8Block, scols = kRowLen / kFp8Block;
      Tensor ws = Tensor::empty({srows, scols}, DType::f32, dev_);
      lowbit::run(WeightQuantArgs{in2, f8, ws, kFp8Block}, nullptr, stream_);
      Tensor wout = Tensor::empty({rows, kRowLen}, dt, dev_);
      WeightDequantArgs wa{f8, ws, wout, kFp8Block};
      add(
          "weight_dequant", dname, kFp8Block, m + srows * scols * 4.0 + m * esize,
          [&] { lowbit::run(wa, nullptr, stream_); },
          [&] {
            const int64_t r = kCheckElems / kRowLen;  // 256 rows = 2 whole tile rows
            const Tensor hq = to_host(rows_view(f8, r, kRowLen));
            const Tensor hs = to_host(rows_view(ws, r / kFp8Block, scols));
            Tensor ho = Tensor::empty({r, kRowLen}, dt);
            lowbit::run(WeightDequantArgs{hq, hs, ho, kFp8Block});
            const Tensor go = to_host(prefix(wout, kCheckElems));
            return check_text({{&ho, &go}});
          });
    }
  }

  double copy_gbps() {
    if (copy_ == 0.0) copy_ = timer_.copy_gbps(n_ * 4, reps_);
    return copy_;
  }
  const std::vector<Row>& rows() const { return rows_; }

 private:
  TensorRef code_host_ref() {
    if (!code_host_.defined()) {
      const std::vector<float> c = create_dynamic_map();
      code_host_ =
          Tensor::copy_of(TensorRef::contiguous(const_cast<float*>(c.data()), DType::f32, {256}), Device::cpu());
    }
    return code_host_;
  }

  void add(const std::string& op, const std::string& dtype, int64_t block, double bytes,
           const std::function<void()>& fn, const std::function<std::string()>& check) {
    fn();
    if (!dev_.is_cpu()) synchronize(stream_);
    const std::string verdict = dev_.is_cpu() ? "-" : check();
    const double ms = timer_.time_ms(fn, reps_, dev_.is_cpu() ? 1 : 2);
    const double gbps = bytes / (ms * 1e6);
    rows_.push_back({op, dtype, block, ms, gbps, gbps / copy_gbps(), verdict});
    std::printf("  %-22s %-4s %5lld %9.4f %9.1f %7.3f  %s\n", op.c_str(), dtype.c_str(), static_cast<long long>(block),
                ms, gbps, gbps / copy_gbps(), verdict.c_str());
    std::fflush(stdout);
  }

  Device dev_;
  int64_t n_;
  int reps_;
  Timer& timer_;
  Stream stream_;
  double copy_ = 0.0;
  Tensor code_host_;
  std::vector<Row> rows_;
};

}  // namespace

void run_quant(const QuantOptions& o) {
  const std::string dev = !o.device.empty() ? o.device : (cuda_device_count() > 0 ? "cuda" : "cpu");
  const bool gpu = dev == "cuda";
  if (!gpu && dev != "cpu") {
    throw Error(ErrorCode::invalid_argument, cat("bench: --device must be cpu or cuda (got ", dev, ")"));
  }
  int64_t n = o.elements > 0 ? o.elements : (gpu ? int64_t{1} << 28 : int64_t{1} << 26);
  n = std::max<int64_t>(n / kRowLen * kRowLen, kCheckElems);  // whole FP8 rows, at least the checked prefix
  const int reps = o.reps > 0 ? o.reps : (gpu ? 20 : 5);

  std::string what, flush_text;
  Stream stream{};
  std::unique_ptr<Timer> timer;
  Device device = Device::cpu();
#if defined(LOWBIT_WITH_CUDA)
  cudaStream_t cs = nullptr;
#endif
  if (gpu) {
#if defined(LOWBIT_WITH_CUDA)
    if (cuda_device_count() == 0)
      throw Error(ErrorCode::no_backend, "bench: --device cuda, but no CUDA device is visible");
    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    cuda_ok(cudaStreamCreate(&cs), "cudaStreamCreate");
    stream.handle = cs;
    auto cuda_timer = std::make_unique<CudaTimer>(cs);
    flush_text = cat(", ", cuda_timer->flush_text(), " before each, CUDA events");
    timer = std::move(cuda_timer);
    device = Device::cuda(0);
    what = cat("cuda:0 ", prop.name, ", ", prop.multiProcessorCount, " SMs, L2 ", prop.l2CacheSize >> 20, " MB");
#else
    throw Error(ErrorCode::no_backend, "bench: --device cuda, but lowbit was built without CUDA");
#endif
  } else {
    timer = std::make_unique<CpuTimer>();
    what = cat("cpu, ", omp_get_max_threads(), " OpenMP threads");
  }

  std::printf("lowbit bench quant: %s, %lld elements, median of %d reps%s\n", what.c_str(), static_cast<long long>(n),
              reps, flush_text.c_str());
  QuantBench b(device, n, reps, *timer, stream);
  const double copy = b.copy_gbps();
  std::printf("  copy (%s, read + write of %lld MB): %.1f GB/s\n", gpu ? "device-to-device cudaMemcpy" : "memcpy",
              static_cast<long long>(n * 4 >> 20), copy);
  std::printf("  %-22s %-4s %5s %9s %9s %7s  %s\n", "op", "in", "block", "ms", "GB/s", "of_copy", "check vs cpu");
  b.run_all();

  // Per op: the worst and best fraction of copy bandwidth (what gpu-check summarizes).
  std::map<std::string, std::pair<double, double>> span;
  for (const Row& r : b.rows()) {
    auto it = span.find(r.op);
    if (it == span.end()) {
      span[r.op] = {r.of_copy, r.of_copy};
    } else {
      it->second.first = std::min(it->second.first, r.of_copy);
      it->second.second = std::max(it->second.second, r.of_copy);
    }
  }
  bool all_ok = true;
  for (const Row& r : b.rows()) all_ok = all_ok && (r.check == "ok" || r.check == "-");
  std::printf("summary: copy %.1f GB/s; checks %s\n", copy, all_ok ? "ok" : "FAILED");
  for (const auto& [op, mm] : span)
    std::printf("summary: %-22s of_copy min %.3f max %.3f\n", op.c_str(), mm.first, mm.second);
#if defined(LOWBIT_WITH_CUDA)
  if (cs != nullptr) {
    timer.reset();
    cudaStreamDestroy(cs);
  }
#endif
  if (!all_ok)
    throw Error(ErrorCode::internal, "bench: a GPU result differs from the CPU backend (see the check column)");
}

}  // namespace lowbit::bench
