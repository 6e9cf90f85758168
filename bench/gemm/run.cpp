// `lowbit bench gemm`: the mixed-precision matmul over the Llama projection
// shapes, against cuBLAS fp16 measured in the same process and the memory
// floor measured in the same run (docs/cli.md).
//
// For every shape N x K, weight type and batch M: random weights are packed by
// Matmul::transform_weight on the device; forward runs through the primitive
// (Matmul::args, a preallocated workspace, run on a stream). Each repetition is
// timed on its own (CUDA events around only the matmul, after an untimed L2
// flush reading a buffer of max(256 MB, 2 x L2) with cublasSasum, which
// leaves L2 clean; a memset, which leaves it dirty, when the build has no
// cuBLAS: timer.h); the median is reported.
// The dense peer: on the GPU cuBLAS, cublasGemmEx, A f16 [M, K] times a random
// f16 W [N, K] transposed, f32 compute, f16 out, same M, N, K and flush; on
// the CPU oneDNN's matmul (torch's CPU matmuls run on oneDNN too) of the same
// A and a random W in bf16 where oneDNN has bf16 kernels for the CPU, else in
// fp32, f32 out. The floor is the bytes the
// matmul must move (packed W as the device's layout stores it, with scales and
// zeros; A; out) over the device-to-device copy bandwidth measured in this run.
// Each result is first checked against the CPU backend's (fp32 output, its
// own kernel config for 8 rows) on the first rows of A and two column slices
// of W (relative L2 error); on the GPU that is the CPU against the GPU, on the
// CPU a cross-check of the CPU kernel configs and the fp16 output rounding.
//
// No CUDA matmul backend registered: each lowbit case says so and the run
// goes on (cuBLAS is still timed); exit status 0. A failed check or a device
// error makes the exit status 1 after the table.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks.h"
#include "gemm/args.h"
#include "gemm/check.h"
#include "gemm/report.h"
#include "gemm/weights.h"
#include "internals.h"
#include "lowbit/error.h"
#include "lowbit/ops/gemm.h"
#include "lowbit/tensor.h"
#include "timer.h"

#if defined(LOWBIT_WITH_CUDA)
#include <cuda_runtime.h>

#include "read_floor.h"
#endif
#if defined(LOWBIT_WITH_CUBLAS)
#include "gemm/cublas.h"
#endif

namespace lowbit::bench {
namespace {

// The copy whose bandwidth sets the floor.
constexpr int64_t kGpuCopyBytes = int64_t{1} << 30;
constexpr int64_t kCpuCopyBytes = int64_t{256} << 20;

// Errors that mean "this case cannot run here" rather than "it ran wrong".
bool is_skip(ErrorCode c) {
  return c == ErrorCode::no_backend || c == ErrorCode::unsupported_dtype || c == ErrorCode::invalid_argument;
}

// The cases of one shape at a time: every type's weight packed first, cuBLAS
// timed per M, then each type and M checked and timed, a row printed as each
// finishes.
class GemmBench {
 public:
  GemmBench(const GemmOptions& o, Device dev, Timer& timer, Stream stream, double copy_gbps, int type_width)
      : o_(o), dev_(dev), timer_(timer), stream_(stream), copy_gbps_(copy_gbps), type_width_(type_width) {}

#if defined(LOWBIT_WITH_CUBLAS)
  void set_cublas(Cublas* c) { cublas_ = c; }
#endif
  // oneDNN's dense matmul as the CPU peer (bf16 operands where bf16, else fp32).
  void set_cpu_peer(bool bf16) {
    cpu_peer_ = true;
    cpu_bf16_ = bf16;
  }

  void run_shape(const WeightShape& sh, const std::vector<int64_t>& ms, const std::vector<TypeSpec>& types,
                 uint64_t seed) {
    const int64_t maxM = *std::max_element(ms.begin(), ms.end());
    const Tensor A_host = random_f16({maxM, sh.K}, 1.0f, seed);
    const Tensor A = dev_.is_cpu() ? A_host : Tensor::copy_of(A_host, dev_, stream_);
    Tensor out = Tensor::empty({maxM, sh.N}, DType::f16, dev_);

    // The weights of every type, packed concurrently (transform_weight packs
    // on one host thread; this is most of the run's wall time), before any
    // timing so that no host work competes with the timed launches.
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::future<PreparedWeight>> pending;
    for (size_t ti = 0; ti < types.size(); ++ti) {
      pending.push_back(
          std::async(std::launch::async, [&, ti] { return prepare(types[ti], sh, ms, dev_, seed * 131 + 7 * ti); }));
    }
    std::vector<PreparedWeight> prepared;
    for (auto& f : pending) prepared.push_back(f.get());
    prep_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::map<int64_t, double> peer_us;
#if defined(LOWBIT_WITH_CUBLAS)
    if (cublas_ != nullptr) {
      const Tensor W16 = Tensor::copy_of(random_f16({sh.N, sh.K}, 0.05f, seed + 1), dev_, stream_);
      for (int64_t M : ms) {
        auto fn = [&] { cublas_->gemm(A.data(), W16.data(), out.data(), M, sh.N, sh.K); };
        peer_us[M] = 1e3 * timer_.time_ms(fn, reps(), warmup());
      }
    }
#endif
    if (dev_.is_cpu() && cpu_peer_) {
      const Tensor W16 = random_f16({sh.N, sh.K}, 0.05f, seed + 1);
      const auto* a16 = A_host.ptr<const uint16_t>();
      const auto* w16 = W16.ptr<const uint16_t>();
      std::vector<float> c(static_cast<size_t>(maxM * sh.N));
      if (cpu_bf16_) {
        std::vector<uint16_t> a(static_cast<size_t>(maxM * sh.K)), w(static_cast<size_t>(sh.N * sh.K));
        for (size_t i = 0; i < a.size(); ++i) a[i] = f32_to_bf16(f16_to_f32(a16[i]));
        for (size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(f16_to_f32(w16[i]));
        for (int64_t M : ms) {
          auto fn = [&] { onednn_bf16_matmul(M, sh.N, sh.K, a.data(), sh.K, w.data(), c.data(), sh.N); };
          peer_us[M] = 1e3 * timer_.time_ms(fn, reps(), warmup());
        }
      } else {
        std::vector<float> a(static_cast<size_t>(maxM * sh.K)), w(static_cast<size_t>(sh.N * sh.K));
        for (size_t i = 0; i < a.size(); ++i) a[i] = f16_to_f32(a16[i]);
        for (size_t i = 0; i < w.size(); ++i) w[i] = f16_to_f32(w16[i]);
        for (int64_t M : ms) {
          auto fn = [&] { onednn_f32_matmul(M, sh.N, sh.K, a.data(), sh.K, w.data(), c.data(), sh.N); };
          peer_us[M] = 1e3 * timer_.time_ms(fn, reps(), warmup());
        }
      }
    }

    for (size_t ti = 0; ti < types.size(); ++ti) {
      const TypeSpec& t = types[ti];
      PreparedWeight& p = prepared[ti];
      const std::optional<Matmul>& mm = p.mm;
      const PackedWeight& W = p.W;
      const Tensor &weight = p.weight, &scale = p.scale, &zeros = p.zeros;
      const std::string& setup_error = p.error;
      const ErrorCode setup_code = p.code;

      std::optional<Reference> ref;
      for (int64_t M : ms) {
        Row r;
        r.shape = sh.name();
        r.type = t.name;
        r.N = sh.N;
        r.K = sh.K;
        r.M = M;
        if (auto it = peer_us.find(M); it != peer_us.end()) r.peer_us = it->second;
        if (!setup_error.empty()) {
          finish(r, setup_code, setup_error);
          continue;
        }
        r.w_bytes = static_cast<double>(packed_bytes(W));
        r.floor_bytes = r.w_bytes + static_cast<double>(M * sh.K) * 2.0 + static_cast<double>(M * sh.N) * 2.0;
        r.floor_us = r.floor_bytes / (copy_gbps_ * 1e3);
        try {
          const TensorRef a = TensorRef::contiguous(A.data(), DType::f16, {M, sh.K}, dev_);
          const TensorRef o = TensorRef::contiguous(out.data(), DType::f16, {M, sh.N}, dev_);
          MatmulArgs args = mm->args(a, W.ref(), o);
          args.config = parse_kernel_config(o_.config);
          const size_t ws_bytes = workspace_size(args);
          if (ws_bytes > workspace_bytes_) {
            workspace_ = Tensor();
            workspace_ = Tensor::empty({static_cast<int64_t>(ws_bytes)}, DType::u8, dev_);
            workspace_bytes_ = ws_bytes;
          }
          void* ws = ws_bytes > 0 ? workspace_.data() : nullptr;
          auto fn = [&] { lowbit::run(args, ws, stream_); };
          if (!o_.no_check) {
            poison(o);
            fn();
            synchronize(stream_);
            if (!ref) {
              const auto c0 = std::chrono::steady_clock::now();
              ref = make_reference(mm->config(), A_host, weight, scale, zeros);
              prep_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
            }
            r.check_err = check_error(*ref, o, M, sh.N);
            const bool good = std::isfinite(r.check_err) && r.check_err <= kCheckTol;
            r.check = cat(good ? "ok " : "FAILED ", fmt("%.1e", r.check_err));
            if (!good) {
              r.message = cat("result differs from the CPU backend: relative L2 error ", fmt("%.3g", r.check_err),
                              " > ", kCheckTol);
              r.reason = "check";
            }
          }
          r.us = 1e3 * timer_.time_ms(fn, reps(), warmup());
          r.read_us = read_floor_us(r.floor_bytes);
          r.status = r.message.empty() ? "ok" : "failed";
          if (r.status == "failed") r.check = r.message;
          add(r);
        } catch (const Error& e) {
          finish(r, e.code(), e.what());
        } catch (const std::exception& e) {  // e.g. std::bad_alloc
          finish(r, ErrorCode::internal, e.what());
        }
      }
      p = PreparedWeight{};  // this type's host and device memory, before the next
    }
  }

  const std::vector<Row>& rows() const { return rows_; }
  double prep_seconds() const { return prep_s_; }

 private:
  int reps() const { return o_.reps; }
  int warmup() const { return o_.warmup; }

  // The time of a pure read of `bytes` on the GPU (read_floor.h, same flush
  // and timing as the matmul), cached per size; NaN on the CPU.
  double read_floor_us([[maybe_unused]] double bytes) {
#if defined(LOWBIT_WITH_CUDA)
    if (!dev_.is_cuda()) return NAN;
    const auto n = static_cast<int64_t>(bytes) / 16 * 16;
    if (auto it = read_us_.find(n); it != read_us_.end()) return it->second;
    if (n + 16 > read_bytes_) {
      read_buf_ = Tensor();
      read_buf_ = Tensor::empty({n + 16}, DType::u8, dev_);
      cuda_ok(
          cudaMemsetAsync(read_buf_.data(), 0, static_cast<size_t>(n + 16), static_cast<cudaStream_t>(stream_.handle)),
          "cudaMemsetAsync(read buffer)");
      read_bytes_ = n + 16;
    }
    if (sm_count_ == 0) {
      cuda_ok(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, dev_.index), "cudaDeviceGetAttribute");
    }
    auto* base = static_cast<uint8_t*>(read_buf_.data());
    auto fn = [&] {
      read_floor(base + 16, static_cast<size_t>(n), reinterpret_cast<unsigned*>(base), sm_count_,
                 static_cast<cudaStream_t>(stream_.handle));
    };
    return read_us_[n] = 1e3 * timer_.time_ms(fn, reps(), warmup());
#else
    return NAN;
#endif
  }

  // NaN bytes (0xffff in fp16) where the matmul writes, so a skipped element shows.
  void poison(const TensorRef& o) {
#if defined(LOWBIT_WITH_CUDA)
    if (o.device.is_cuda()) {
      cuda_ok(cudaMemsetAsync(o.data, 0xff, o.nbytes(), static_cast<cudaStream_t>(stream_.handle)),
              "cudaMemsetAsync(out)");
      return;
    }
#endif
    std::memset(o.data, 0xff, o.nbytes());
  }

  void finish(Row& r, ErrorCode code, const std::string& what) {
    const bool skip = is_skip(code);
    r.status = skip ? "skipped" : "failed";
    r.reason = error_code_name(code);
    if (code == ErrorCode::no_backend && dev_.is_cuda()) {
      r.reason = "no CUDA matmul backend";
      r.message = cat("skipped: no CUDA matmul backend registered (", what, ")");
    } else {
      r.message = cat(skip ? "skipped (" : "FAILED (", error_code_name(code), "): ", what);
    }
    add(r);
  }

  void add(const Row& r) {
    rows_.push_back(r);
    print_row(r, type_width_);
  }

  const GemmOptions& o_;
  Device dev_;
  Timer& timer_;
  Stream stream_;
  double copy_gbps_;
  int type_width_;
#if defined(LOWBIT_WITH_CUBLAS)
  Cublas* cublas_ = nullptr;
#endif
  bool cpu_peer_ = false, cpu_bf16_ = false;
  Tensor workspace_;
  size_t workspace_bytes_ = 0;
  Tensor read_buf_;  // read_floor_us: its first float takes the result
  int64_t read_bytes_ = 0;
  std::map<int64_t, double> read_us_;
  int sm_count_ = 0;  // read_floor's grid, asked once
  std::vector<Row> rows_;
  double prep_s_ = 0.0;
};

}  // namespace

void run_gemm(GemmOptions o) {
  const auto wall0 = std::chrono::steady_clock::now();
  const std::string dev = !o.device.empty() ? o.device : (cuda_device_count() > 0 ? "cuda" : "cpu");
  const bool gpu = dev == "cuda";
  fill_defaults(o, gpu);

  std::vector<WeightShape> shapes;
  for (const std::string& s : o.shapes) shapes.push_back(*parse_shape(s));  // validated by the option
  std::vector<TypeSpec> types;
  for (const std::string& s : o.types) types.push_back(parse_type_spec(s));
  const int type_width = type_column_width(types);
  std::vector<int64_t> ms = o.m;
  std::sort(ms.begin(), ms.end());
  ms.erase(std::unique(ms.begin(), ms.end()), ms.end());

  std::string what, flush_text = "";
  Stream stream{};
  std::unique_ptr<Timer> timer;
  Device device = Device::cpu();
  std::optional<Peer> peer;
#if defined(LOWBIT_WITH_CUDA)
  cudaStream_t cs = nullptr;
#endif
#if defined(LOWBIT_WITH_CUBLAS)
  std::unique_ptr<Cublas> cublas;
#endif
  if (gpu) {
#if defined(LOWBIT_WITH_CUDA)
    if (cuda_device_count() == 0)
      throw Error(ErrorCode::no_backend, "bench gemm: --device cuda, but no CUDA device is visible");
    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    cuda_ok(cudaStreamCreate(&cs), "cudaStreamCreate");
    stream.handle = cs;
    const size_t flush = std::max(CudaTimer::kDefaultFlushBytes, 2 * static_cast<size_t>(prop.l2CacheSize));
    auto cuda_timer = std::make_unique<CudaTimer>(cs, flush);
    flush_text = cat(", ", cuda_timer->flush_text(), " before each, CUDA events around the matmul");
    timer = std::move(cuda_timer);
    device = Device::cuda(0);
    what = cat("cuda:0 ", prop.name, ", ", prop.multiProcessorCount, " SMs, L2 ", prop.l2CacheSize >> 20, " MB");
#if defined(LOWBIT_WITH_CUBLAS)
    cublas = std::make_unique<Cublas>(cs);
    peer = Peer{"cuBLAS", "cublas", "cuBLAS fp16"};
#endif
#else
    throw Error(ErrorCode::no_backend, "bench gemm: --device cuda, but lowbit was built without CUDA");
#endif
  } else {
    timer = std::make_unique<CpuTimer>();
    what = cat("cpu, ", omp_get_max_threads(), " OpenMP threads");
  }

  std::printf(
      "lowbit bench gemm: %s; A f16 [M, K] x W [N, K]^T -> f16, f32 accumulation; median of %d reps (%d "
      "warm-up)%s\n",
      what.c_str(), o.reps, o.warmup, flush_text.c_str());
  const int64_t copy_bytes = gpu ? kGpuCopyBytes : kCpuCopyBytes;
  const double copy = timer->copy_gbps(copy_bytes, o.reps);
  std::printf("  copy (%s, read + write of %lld MB): %.1f GB/s; floor = (packed W + A + out bytes) / copy\n",
              gpu ? "device-to-device cudaMemcpy" : "memcpy", static_cast<long long>(copy_bytes >> 20), copy);
  if (!gpu && onednn_available()) {
    const bool bf16 = onednn_bf16_available();
    peer = Peer{"oneDNN", "onednn", bf16 ? "oneDNN bf16" : "oneDNN fp32"};
    std::printf("  peer: oneDNN's matmul, A and a random W [N, K] in %s, fp32 out (this CPU's oneDNN %s)\n",
                bf16 ? "bf16" : "fp32", bf16 ? "has bf16 kernels" : "has no bf16 kernels: fp32");
  }
  if (gpu && !peer) std::printf("  cuBLAS: not built in (CUDA::cublas not found at configure time)\n");
  if (!gpu && !peer) std::printf("  peer: none (this build has no oneDNN)\n");
  const Peer* peer_ptr = peer ? &*peer : nullptr;
  print_header(type_width, peer_ptr);

  GemmBench b(o, device, *timer, stream, copy, type_width);
  if (!gpu && peer) b.set_cpu_peer(onednn_bf16_available());
#if defined(LOWBIT_WITH_CUBLAS)
  b.set_cublas(cublas.get());
#endif
  uint64_t seed = 1;
  for (const WeightShape& sh : shapes) b.run_shape(sh, ms, types, seed++);

  if (!o.csv.empty()) {
    write_csv(o.csv, what, b.rows(), peer_ptr);
    std::printf("csv: %s\n", o.csv.c_str());
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  print_summary(b.rows(), types, ms, copy, peer_ptr, !o.no_check, wall, b.prep_seconds(), type_width);

#if defined(LOWBIT_WITH_CUDA)
  if (cs != nullptr) {
#if defined(LOWBIT_WITH_CUBLAS)
    cublas.reset();
#endif
    timer.reset();
    cudaStreamDestroy(cs);
  }
#endif
  for (const Row& r : b.rows()) {
    if (r.status == "failed")
      throw Error(ErrorCode::internal, "bench gemm: a case failed (a check against the CPU backend or a device error)");
  }
}

}  // namespace lowbit::bench
