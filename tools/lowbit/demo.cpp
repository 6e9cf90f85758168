// `lowbit demo`: quantizes a synthetic Llama-3-8B-like decoder layer into
// every format lowbit implements and prints, per format, what it costs to
// store, how far the round trip lands from the original weights, and how fast
// both directions run. Then the checkpoint path (demo_checkpoint.cpp): the
// same layer written as a safetensors folder in a temporary folder, run
// through `lowbit quantize` into every checkpoint format, reported from the
// files written.
//
// The weights are generated here (deterministic from --seed, independent of
// the thread count); every number in the table comes from the library's
// public ops. Errors are measured on the host in double, so a GPU run and a
// CPU run of the same seed print the same error columns.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "commands.h"
#include "core/check.h"
#include "core/float_convert.h"
#include "demo_checkpoint.h"
#include "io/error_stats.h"
#include "lowbit/code_maps.h"
#include "lowbit/error.h"
#include "lowbit/ops/quant.h"
#include "lowbit/tensor.h"

#if defined(LOWBIT_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace lowbit::cli {
namespace {

// ------------------------------------------------------------- the weights

// One decoder layer of Llama-3-8B, [out_features, in_features] as stored.
struct WeightShape {
  const char* name;
  int64_t rows;
  int64_t cols;
};
constexpr WeightShape kLlama3Layer[] = {{"q_proj", 4096, 4096},     {"k_proj", 1024, 4096},
                                        {"v_proj", 1024, 4096},     {"o_proj", 4096, 4096},
                                        {"gate_proj", 14336, 4096}, {"up_proj", 14336, 4096},
                                        {"down_proj", 4096, 14336}};

// The CPU's default scale. The full layer (218M parameters) through all
// seven formats takes about 20 s on a 2-core machine (25 s while other
// builds shared it): within the minute the demo may take. Lower this if the
// CPU kernels or the machines get slower; the header then says so.
constexpr double kCpuDefaultScale = 1.0;

// Shape of the synthetic values: trained projections have a typical std of
// about 0.02, rows whose scales spread over a factor of a few (log-normal),
// and rare large entries that stretch a block's absmax.
constexpr double kBaseStd = 0.02;
constexpr double kRowLogStd = 0.35;
constexpr double kOutliersPerElement = 1e-4;
constexpr double kOutlierMinSigmas = 10.0;
constexpr double kOutlierMaxSigmas = 25.0;

// splitmix64 (Steele, Lea & Flood 2014): each row draws from its own stream,
// seeded from (seed, tensor, row), so the values do not depend on threads.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) { next(); }
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53; }  // (0, 1]
  double normal() {  // Marsaglia's polar method, both outputs used
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u, v, s;
    do {
      u = 2.0 * uniform() - 1.0;
      v = 2.0 * uniform() - 1.0;
      s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    const double f = std::sqrt(-2.0 * std::log(s) / s);
    spare_ = v * f;
    has_spare_ = true;
    return u * f;
  }

 private:
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// body(i) for i in [0, count), striped over the hardware threads. Bodies
// write disjoint outputs, so results never depend on the thread count.
template <class Body>
void parallel_for(int64_t count, const Body& body) {
  const int64_t threads = std::min<int64_t>(count, std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&body, t, threads, count] {
      for (int64_t i = t; i < count; i += threads) body(i);
    });
  }
  for (std::thread& th : pool) th.join();
}

struct Weight {
  std::string name;
  Tensor host;    // bf16 [rows, cols]
  Tensor device;  // the same on the demo's device (== host on the CPU)
};

Tensor synthetic_weight(int64_t rows, int64_t cols, uint64_t seed, uint64_t tensor_id) {
  Tensor w = Tensor::empty({rows, cols}, DType::bf16);
  uint16_t* bits = w.ptr<uint16_t>();
  parallel_for(rows, [&](int64_t r) {
    Rng rng(seed * 0x100000001b3ull ^ (tensor_id << 40) ^ static_cast<uint64_t>(r));
    const double row_std = kBaseStd * std::exp(kRowLogStd * rng.normal());
    uint16_t* row = bits + r * cols;
    for (int64_t c = 0; c < cols; ++c) row[c] = core::f32_to_bf16(static_cast<float>(row_std * rng.normal()));
    // floor(expected + u) outliers: the right count on average.
    const auto count = static_cast<int64_t>(static_cast<double>(cols) * kOutliersPerElement + rng.uniform());
    for (int64_t k = 0; k < count; ++k) {
      const auto c = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(cols));
      const double sigmas = kOutlierMinSigmas + (kOutlierMaxSigmas - kOutlierMinSigmas) * rng.uniform();
      const double sign = (rng.next() & 1u) ? -1.0 : 1.0;
      row[c] = core::f32_to_bf16(static_cast<float>(sign * sigmas * row_std));
    }
  });
  return w;
}

// ------------------------------------------------------------- error sums

// The checkpoint path's statistics (src/io/error_stats.h): one definition.
using ErrorSums = io::detail::ErrorStats;

ErrorSums compare(const Tensor& original_bf16, const Tensor& restored_f32) {
  return io::detail::compare(original_bf16, restored_f32);
}

// ------------------------------------------------------------- the formats
//
// Each format runs through the ops' explicit form (Args, workspace_size,
// run): outputs and scratch are allocated before the clock starts, so the
// times are the kernels' and not the allocator's (on a GPU a cudaMalloc and
// a synchronizing cudaFree per call would otherwise dominate).

struct RoundTrip {
  Tensor restored;          // f32, the weight's shape, on the weight's device
  size_t stored_bytes = 0;  // everything a checkpoint holds for this weight
  double quantize_s = 0.0;
  double dequantize_s = 0.0;
};

// A buffer on `device`; host pages are touched now so that first-touch page
// faults stay out of the timed region.
Tensor buffer(Shape shape, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  if (device.is_cpu()) std::memset(t.data(), 0, t.nbytes());
  return t;
}
Tensor buffer(std::initializer_list<int64_t> shape, DType dtype, Device device) {
  return buffer(Shape(shape.begin(), shape.size()), dtype, device);
}

// One op call with its scratch, ready to run.
template <class Args>
class Op {
 public:
  Op(const Args& args, Device device) : args_(args) {
    const size_t bytes = workspace_size(args_);
    if (bytes > 0) workspace_ = buffer({static_cast<int64_t>(bytes)}, DType::u8, device);
  }
  void operator()() const { run(args_, workspace_.data()); }

 private:
  Args args_;
  Tensor workspace_;
};

// Wall time of the ops in sequence, up to a device synchronize, added to `seconds`.
template <class... Ops>
void timed(double& seconds, const Ops&... ops) {
  const auto t0 = std::chrono::steady_clock::now();
  (ops(), ...);
  synchronize(Stream{});
  seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}


constexpr int64_t kBlock4bit = 64;
constexpr int64_t kNestedBlock4bit = 256;  // bitsandbytes' compress_statistics blocksize
constexpr size_t kTable4bitBytes = 16 * sizeof(float);
constexpr size_t kCodeMapBytes = 256 * sizeof(float);

// The signed dynamic map (the default code of 8-bit blockwise and of nested
// absmax) as an f32 [256] tensor on `device`.
Tensor dynamic_map_on(Device device) {
  std::vector<float> map = create_dynamic_map();
  const Tensor host = Tensor::copy_of(
      TensorRef::contiguous(map.data(), DType::f32, {static_cast<int64_t>(map.size())}), Device::cpu());
  return device.is_cpu() ? host : host.to(device);
}

RoundTrip four_bit(const Tensor& w, Quant4Type type, bool double_quant) {
  const Device dev = w.device();
  const int64_t n = w.numel(), nblocks = core::ceil_div(n, kBlock4bit);
  RoundTrip r;
  Tensor packed = buffer({(n + 1) / 2, 1}, DType::u8, dev);
  Tensor absmax = buffer({nblocks}, DType::f32, dev);
  r.restored = buffer(w.sizes(), DType::f32, dev);
  const Op quantize(Quantize4bitArgs{w, packed, absmax, kBlock4bit, type}, dev);
  if (!double_quant) {
    const Op dequantize(Dequantize4bitArgs{packed, absmax, {}, r.restored, kBlock4bit, type}, dev);
    timed(r.quantize_s, quantize);
    timed(r.dequantize_s, dequantize);
    r.stored_bytes = packed.nbytes() + absmax.nbytes() + kTable4bitBytes;
    return r;
  }
  // Double quant as quantize_4bit(compress_statistics = true) chains it:
  // absmax -= mean(absmax), then 8-bit blockwise with the dynamic map.
  const Tensor code = dynamic_map_on(dev);
  Tensor offset = buffer({1}, DType::f32, dev);
  Tensor qabsmax = buffer({nblocks}, DType::u8, dev);
  Tensor absmax2 = buffer({core::ceil_div(nblocks, kNestedBlock4bit)}, DType::f32, dev);
  const Op center(AbsmaxCenterArgs{absmax, offset}, dev);
  const Op compress(QuantizeBlockwiseArgs{absmax, code, qabsmax, absmax2, kNestedBlock4bit}, dev);
  const NestedAbsmax nested{code, absmax2, offset, kNestedBlock4bit};
  const Op dequantize(Dequantize4bitArgs{packed, qabsmax, nested, r.restored, kBlock4bit, type}, dev);
  timed(r.quantize_s, quantize, center, compress);
  timed(r.dequantize_s, dequantize);
  r.stored_bytes = packed.nbytes() + qabsmax.nbytes() + absmax2.nbytes() + offset.nbytes() + kCodeMapBytes +
                   kTable4bitBytes;
  return r;
}

RoundTrip blockwise_8bit(const Tensor& w, int64_t blocksize) {
  const Device dev = w.device();
  RoundTrip r;
  const Tensor code = dynamic_map_on(dev);
  Tensor q = buffer(w.sizes(), DType::u8, dev);
  Tensor absmax = buffer({core::ceil_div(w.numel(), blocksize)}, DType::f32, dev);
  r.restored = buffer(w.sizes(), DType::f32, dev);
  const Op quantize(QuantizeBlockwiseArgs{w, code, q, absmax, blocksize}, dev);
  const Op dequantize(DequantizeBlockwiseArgs{q, code, absmax, {}, r.restored, blocksize}, dev);
  timed(r.quantize_s, quantize);
  timed(r.dequantize_s, dequantize);
  r.stored_bytes = q.nbytes() + absmax.nbytes() + kCodeMapBytes;
  return r;
}

RoundTrip fp8_blocks(const Tensor& w) {
  constexpr int64_t kTile = 128;
  const Device dev = w.device();
  RoundTrip r;
  Tensor q = buffer(w.sizes(), DType::f8_e4m3, dev);
  Tensor scale = buffer({core::ceil_div(w.size(0), kTile), core::ceil_div(w.size(1), kTile)}, DType::f32, dev);
  r.restored = buffer(w.sizes(), DType::f32, dev);
  const Op quantize(WeightQuantArgs{w, q, scale, kTile}, dev);
  const Op dequantize(WeightDequantArgs{q, scale, r.restored, kTile}, dev);
  timed(r.quantize_s, quantize);
  timed(r.dequantize_s, dequantize);
  r.stored_bytes = q.nbytes() + scale.nbytes();
  return r;
}

RoundTrip int8_rows(const Tensor& w) {
  const Device dev = w.device();
  RoundTrip r;
  Tensor q = buffer(w.sizes(), DType::i8, dev);
  Tensor row_stats = buffer({w.size(0)}, DType::f32, dev);
  r.restored = buffer(w.sizes(), DType::f32, dev);
  const Op quantize(Int8VectorwiseQuantArgs{w, q, row_stats, {}, 0.0f}, dev);
  const Op dequantize(Int8VectorwiseDequantArgs{q, row_stats, r.restored}, dev);
  timed(r.quantize_s, quantize);
  timed(r.dequantize_s, dequantize);
  r.stored_bytes = q.nbytes() + row_stats.nbytes();
  return r;
}

struct Format {
  const char* name;
  RoundTrip (*run)(const Tensor& w);
};
const Format kFormats[] = {
    {"nf4, block 64", [](const Tensor& w) { return four_bit(w, Quant4Type::nf4, false); }},
    {"nf4, block 64 + double quant", [](const Tensor& w) { return four_bit(w, Quant4Type::nf4, true); }},
    {"fp4 (bnb), block 64", [](const Tensor& w) { return four_bit(w, Quant4Type::fp4, false); }},
    {"8-bit dynamic, block 256", [](const Tensor& w) { return blockwise_8bit(w, 256); }},
    {"8-bit dynamic, block 4096", [](const Tensor& w) { return blockwise_8bit(w, 4096); }},
    {"fp8 e4m3, 128x128 scales", fp8_blocks},
    {"int8 row-wise (threshold 0)", int8_rows},
};

struct FormatResult {
  Device device;
  ErrorSums error;
  size_t stored_bytes = 0;
  double quantize_s = 0.0;
  double dequantize_s = 0.0;
};

FormatResult run_on(const Format& f, const std::vector<Weight>& weights, Device device) {
  // A GPU's first call loads kernels and grows the allocator: once, untimed,
  // on the smallest weight.
  if (device.is_cuda()) {
    const auto smallest = std::min_element(weights.begin(), weights.end(), [](const Weight& a, const Weight& b) {
      return a.host.numel() < b.host.numel();
    });
    f.run(smallest->device);
  }
  FormatResult res{device, {}, 0, 0.0, 0.0};
  for (const Weight& w : weights) {
    const RoundTrip r = f.run(device.is_cpu() ? w.host : w.device);
    res.stored_bytes += r.stored_bytes;
    res.quantize_s += r.quantize_s;
    res.dequantize_s += r.dequantize_s;
    const Tensor restored = r.restored.device().is_cpu() ? r.restored : r.restored.to(Device::cpu());
    res.error.merge(compare(w.host, restored));
  }
  return res;
}

// A format whose GPU kernels are not built yet runs on the CPU instead (and
// says so); every other error propagates.
FormatResult run_format(const Format& f, const std::vector<Weight>& weights, Device device) {
  if (device.is_cpu()) return run_on(f, weights, device);
  try {
    return run_on(f, weights, device);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::no_backend) throw;
  }
  return run_on(f, weights, Device::cpu());
}

// ------------------------------------------------------------- the command

struct DemoOptions {
  std::string device = "auto";
  double scale = 0.0;  // 0: the device's default
  uint64_t seed = 0;
  bool no_checkpoint = false;  // skip the checkpoint path (demo_checkpoint.cpp)
};

bool cuda_available() {
  try {
    return cuda_device_count() > 0;
  } catch (const Error&) {
    return false;  // a CUDA build on a machine without a usable driver
  }
}

Device pick_device(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") {
    LOWBIT_REQUIRE(cuda_device_count() > 0, ErrorCode::no_backend,
                   "demo: --device cuda needs a CUDA device (got none: ",
#if defined(LOWBIT_WITH_CUDA)
                   "no GPU visible to this process)"
#else
                   "this lowbit was built without CUDA)"
#endif
    );
    return Device::cuda(0);
  }
  return cuda_available() ? Device::cuda(0) : Device::cpu();
}

std::string device_description(Device d) {
  if (d.is_cpu()) return core::cat("cpu (", std::max(1u, std::thread::hardware_concurrency()), " threads)");
#if defined(LOWBIT_WITH_CUDA)
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, d.index) == cudaSuccess) return core::cat(d.str(), " (", prop.name, ")");
#endif
  return d.str();
}

int64_t scaled(int64_t extent, double scale) {
  return std::max<int64_t>(1, std::llround(static_cast<double>(extent) * scale));
}

std::string with_commas(int64_t v) {
  const std::string digits = std::to_string(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void print_header(const DemoOptions& o, Device device, double scale, bool default_scale,
                  const std::vector<Weight>& weights) {
  int64_t params = 0;
  std::string shapes;
  for (const Weight& w : weights) {
    params += w.host.numel();
    shapes += core::cat(shapes.empty() ? "" : ", ", w.name, " ", w.host.size(0), "x", w.host.size(1));
  }
  std::printf("lowbit demo: one Llama-3-8B-like decoder layer, synthetic bf16 weights (seed %llu)\n",
              static_cast<unsigned long long>(o.seed));
  std::printf("device:     %s\n", device_description(device).c_str());
  if (default_scale && device.is_cpu() && scale < 1.0) {
    std::printf("scale:      %g (the CPU default, to finish in about a minute; --scale 1 for the full layer)\n", scale);
  } else {
    std::printf("scale:      %g%s\n", scale, scale == 1.0 ? " (the full layer)" : "");
  }
  std::printf("weights:    %s\n", shapes.c_str());
  std::printf("parameters: %s (%.1f MB in bf16)\n\n", with_commas(params).c_str(),
              static_cast<double>(params) * 2.0 / 1e6);
}

void print_row(const Format& f, const FormatResult& r, int64_t params, Device device) {
  const double input_gb = static_cast<double>(params) * 2.0 / 1e9;  // bf16 input bytes
  const double bits = static_cast<double>(r.stored_bytes) * 8.0 / static_cast<double>(params);
  const std::string where = r.device == device ? r.device.str() : r.device.str() + "*";
  std::printf("%-30s %-7s %8.3f %11.3e %11.3e %10.6f %9.2f %9.2f\n", f.name, where.c_str(), bits, r.error.rmse(),
              r.error.max_err(), r.error.cosine(), input_gb / r.quantize_s, input_gb / r.dequantize_s);
  std::fflush(stdout);
}

void run_demo(const DemoOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const Device device = pick_device(o.device);
  const bool default_scale = o.scale == 0.0;
  const double scale = default_scale ? (device.is_cpu() ? kCpuDefaultScale : 1.0) : o.scale;

  std::vector<Weight> weights;
  int64_t params = 0;
  uint64_t id = 0;
  for (const WeightShape& s : kLlama3Layer) {
    Tensor host = synthetic_weight(scaled(s.rows, scale), scaled(s.cols, scale), o.seed, id++);
    Tensor on_device = device.is_cpu() ? host : host.to(device);
    params += host.numel();
    weights.push_back({s.name, std::move(host), std::move(on_device)});
  }
  print_header(o, device, scale, default_scale, weights);

  std::printf("%-30s %-7s %8s %11s %11s %10s %9s %9s\n", "format", "device", "bits/w", "RMSE", "max |err|", "cosine",
              "quant", "dequant");
  std::printf("%-30s %-7s %8s %11s %11s %10s %9s %9s\n", "", "", "", "", "", "", "GB/s", "GB/s");
  bool fell_back = false;
  double weight_rms = 0.0;
  for (const Format& f : kFormats) {
    const FormatResult r = run_format(f, weights, device);
    fell_back = fell_back || r.device != device;
    weight_rms = std::sqrt(r.error.x_sq / static_cast<double>(r.error.n));
    print_row(f, r, params, device);
  }

  std::printf(
      "\nbits/w: every stored byte (codes, absmax or scales, nested state, code maps) per weight.\n"
      "Errors: the float32 round trip against the bf16 originals, over all %s weights, in double\n"
      "        (the weights' RMS is %.3e).\n"
      "GB/s: bf16 input bytes over the wall time of the op calls up to a device synchronize\n"
      "      (outputs and scratch allocated beforehand; quant includes the nested step).\n",
      with_commas(params).c_str(), weight_rms);
  if (fell_back) std::printf("*: no %s kernel for this format yet; ran on the CPU.\n", device.str().c_str());
  if (!o.no_checkpoint) {
    std::vector<DemoWeight> layer;
    for (const Weight& w : weights) layer.push_back({w.name, &w.host});
    run_checkpoint_demo(layer, device);
  }
  std::printf("total time: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto opts = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "Quantize a synthetic Llama-3-8B-like layer into every format; print size, error and speed");
  cmd->add_option("--device", opts->device, "Where to run: auto (a GPU when present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--scale", opts->scale,
                  kCpuDefaultScale < 1.0
                      ? core::cat("Shrink every dimension by this factor, in (0, 1] (default: 1 on a GPU, ",
                                  kCpuDefaultScale, " on the CPU)")
                      : std::string("Shrink every dimension by this factor, in (0, 1] (default 1: the full layer)"))
      ->check(CLI::Range(1e-4, 1.0));
  cmd->add_option("--seed", opts->seed, "Seed of the synthetic weights")->capture_default_str();
  cmd->add_flag("--no-checkpoint", opts->no_checkpoint,
                "Skip the checkpoint path (the layer written as safetensors and quantized by `lowbit quantize`)");
  cmd->callback([opts] { run_demo(*opts); });
}

}  // namespace lowbit::cli
