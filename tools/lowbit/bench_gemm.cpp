// `lowbit bench gemm`: the mixed-precision matmul (issue 6) over the Llama
// projection shapes, against cuBLAS fp16 measured in the same process and the
// memory floor measured in the same run (PERFORMANCE.md, "How to measure").
//
// For every shape N x K, weight type and batch M: random weights are packed by
// Matmul::transform_weight on the device; forward runs through the primitive
// (Matmul::args, a preallocated workspace, run on a stream). Each repetition is
// timed on its own (CUDA events around only the matmul, after an untimed L2
// flush reading a buffer of max(256 MB, 2 x L2) with cublasSasum, which
// leaves L2 clean; a memset, which leaves it dirty, when the build has no
// cuBLAS: bench_common.h); the median is reported.
// cuBLAS: cublasGemmEx, A f16 [M, K] times a random f16 W [N, K] transposed,
// f32 compute, f16 out, same M, N, K and flush. The floor is the bytes the
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
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "commands.h"
#include "core/check.h"
#include "core/float_convert.h"
#include "core/weight_format.h"
#include "lowbit/error.h"
#include "lowbit/ops/gemm.h"
#include "lowbit/tensor.h"

#if defined(LOWBIT_WITH_CUDA)
#include <cuda_runtime.h>

#include "cuda/common/read_floor.h"
#endif
#if defined(LOWBIT_WITH_CUBLAS)
#include <cublas_v2.h>
#endif

namespace lowbit::cli {
namespace {

// ------------------------------------------------------------------ options

struct GemmOptions {
  std::string device;               // empty: cuda when a GPU is visible, else cpu
  std::vector<std::string> shapes;  // "NxK"
  std::vector<int64_t> m;
  std::vector<std::string> types;  // specs, see parse_type_spec
  int reps = 0;                    // 0: 20 on cuda, 3 on cpu
  int warmup = -1;                 // -1: 3 on cuda, 1 on cpu
  int config = -1;                 // MatmulArgs::config (-1: the backend's heuristic)
  bool no_check = false;
  std::string csv;
};

const std::vector<std::string> kGpuShapes = {"4096x4096", "14336x4096", "4096x14336",
                                             "8192x8192", "28672x8192", "8192x28672"};
const std::vector<std::string> kCpuShapes = {"4096x4096"};
const std::vector<int64_t> kGpuM = {1, 16, 32, 64, 128, 256, 4096};
const std::vector<int64_t> kCpuM = {1, 16};
// int4 with groups of 128 as GPTQ stores it (uint4, quantized zeros) and as
// plain symmetric int4; NF4 (bitsandbytes codes, absmax per group); int2.
const std::vector<std::string> kDefaultTypes = {"uint4:g128:zeros", "int4:g128", "nf4:g128", "int2:g128"};

constexpr int64_t kCheckRows = 8;    // rows of A checked against the CPU backend
constexpr int64_t kCheckCols = 256;  // columns of each checked slice (first and last)
constexpr double kCheckTol = 1e-2;   // relative L2 error allowed (fp16 rounding is ~5e-4)
constexpr int64_t kGpuCopyBytes = int64_t{1} << 30;
constexpr int64_t kCpuCopyBytes = int64_t{256} << 20;

struct Shape2 {
  int64_t N = 0, K = 0;
  std::string name() const { return core::cat(N, "x", K); }
};

bool parse_int(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::optional<Shape2> parse_shape(std::string_view s) {
  const size_t x = s.find_first_of("xX");
  if (x == std::string_view::npos) return std::nullopt;
  Shape2 sh;
  if (!parse_int(s.substr(0, x), &sh.N) || !parse_int(s.substr(x + 1), &sh.K) || sh.N < 1 || sh.K < 1)
    return std::nullopt;
  return sh;
}

// A weight type and its scaling: "TYPE[:gN|:row|:noscale][:zeros[=MODE]]".
// TYPE is a MatmulConfig W_dtype name (int8, int4, int2, int1, uint8, uint4,
// uint2, uint1, nf4, fp4, fp4_e2m1, fp8_e4m3, float16/f16, bfloat16/bf16).
// Quantized types scale over groups of 128 unless told otherwise (gN: groups
// of N, row: one scale per row, noscale: none); zeros means quantized
// (GPTQ-style) zeros, zeros=original|rescale float zeros.
struct TypeSpec {
  std::string name;  // canonical spelling
  WeightType type = WeightType::int4;
  bool scaling = true;
  int64_t group = 128;
  bool zeros = false;
  ZerosMode zeros_mode = ZerosMode::quantized;
};

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t p = s.find(sep, start);
    parts.push_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return parts;
}

MatmulConfig config_for(const TypeSpec& t, int64_t N, int64_t K, const std::vector<int64_t>& m) {
  MatmulConfig c;
  c.M = m;
  c.N = N;
  c.K = K;
  c.A_dtype = DType::f16;
  c.out_dtype = DType::f16;
  c.accum_dtype = DType::f32;
  c.W_dtype = t.type;
  c.with_scaling = t.scaling;
  c.group_size = t.scaling ? t.group : -1;
  c.with_zeros = t.zeros;
  c.zeros_mode = t.zeros_mode;
  return c;
}

// Throws lowbit::Error(invalid_argument) with the reason.
TypeSpec parse_type_spec(std::string_view spec) {
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::invalid_argument, core::cat("bench gemm: --types '", spec, "': ", why));
  };
  const std::vector<std::string_view> parts = split(spec, ':');
  TypeSpec t;
  if (!parse_weight_type(parts[0], &t.type)) {
    throw bad(core::cat("unknown weight type '", parts[0],
                        "' (int8, int4, int2, int1, uint8, uint4, uint2, uint1, nf4, fp4, fp4_e2m1, fp8_e4m3, f16, "
                        "bf16)"));
  }
  const bool unquantized = t.type == WeightType::f16 || t.type == WeightType::bf16;
  t.scaling = !unquantized;
  t.group = unquantized ? -1 : 128;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string_view p = parts[i];
    int64_t g = 0;
    if (p.size() > 1 && p[0] == 'g' && parse_int(p.substr(1), &g)) {
      t.scaling = true;
      t.group = g;
    } else if (p == "row") {
      t.scaling = true;
      t.group = -1;
    } else if (p == "noscale") {
      t.scaling = false;
      t.group = -1;
    } else if (p == "zeros") {
      t.zeros = true;
      t.zeros_mode = ZerosMode::quantized;
    } else if (p.substr(0, 6) == "zeros=") {
      t.zeros = true;
      if (!parse_zeros_mode(p.substr(6), &t.zeros_mode))
        throw bad(core::cat("unknown zeros mode '", p.substr(6), "' (original, rescale, quantized)"));
    } else {
      throw bad(core::cat("unknown part '", p, "' (gN, row, noscale, zeros, zeros=MODE)"));
    }
  }
  // The config's own rules (group size a multiple of 32, zeros need an
  // integer type and scaling, ...), on a shape every valid group divides.
  const int64_t K = t.scaling && t.group > 0 ? t.group : 128;
  try {
    check(config_for(t, 128, K, {1}));
  } catch (const Error& e) {
    throw bad(e.what());
  }
  t.name = std::string(weight_type_name(t.type));
  if (t.scaling) {
    t.name += t.group > 0 ? core::cat(":g", t.group) : std::string(":row");
  } else if (!unquantized) {
    t.name += ":noscale";
  }
  if (t.zeros)
    t.name += t.zeros_mode == ZerosMode::quantized ? ":zeros" : core::cat(":zeros=", zeros_mode_name(t.zeros_mode));
  return t;
}

// ------------------------------------------------------------------ data

// f16 values: unit-variance normal times `scale`, element i of stream `seed`.
Tensor random_f16(std::initializer_list<int64_t> shape, float scale, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f16);
  auto* p = t.ptr<uint16_t>();
  const int64_t n = t.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    p[i] = core::f32_to_f16(scale * bench::normal_from_bits(bench::random_bits(seed, static_cast<uint64_t>(i))));
  return t;
}

// An unpacked weight [N, K] for transform_weight: integer values of the type
// (int8/uint8), codes (nf4/fp4), E4M3 bits without NaN, or f16/bf16 values.
Tensor random_weight(WeightType type, int64_t N, int64_t K, uint64_t seed) {
  const core::WeightTypeInfo info = core::weight_type_info(type);
  if (info.kind == core::WeightKind::f16 || info.kind == core::WeightKind::bf16) {
    Tensor t = Tensor::empty({N, K}, info.kind == core::WeightKind::f16 ? DType::f16 : DType::bf16);
    auto* p = t.ptr<uint16_t>();
    const bool half = info.kind == core::WeightKind::f16;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N * K; ++i) {
      const float x = 0.05f * bench::normal_from_bits(bench::random_bits(seed, static_cast<uint64_t>(i)));
      p[i] = half ? core::f32_to_f16(x) : core::f32_to_bf16(x);
    }
    return t;
  }
  const bool is_signed = info.kind == core::WeightKind::sint || info.kind == core::WeightKind::pm1;
  Tensor t = Tensor::empty({N, K}, is_signed ? DType::i8 : DType::u8);
  auto* p = static_cast<uint8_t*>(t.data());
  const uint64_t span = static_cast<uint64_t>(info.max - info.min + 1);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * K; ++i) {
    const uint64_t r = bench::random_bits(seed, static_cast<uint64_t>(i));
    // Uniform in [0, span): the high half of a 32 x 32-bit product (no division).
    int32_t v = static_cast<int32_t>(((r & 0xffffffffu) * span) >> 32);
    if (info.kind == core::WeightKind::pm1) {
      v = (r & 1) ? 1 : -1;
    } else if (info.kind == core::WeightKind::fp8) {
      if ((v & 0x7f) == 0x7f) v = 0x7e;  // codes 0..255 without the NaNs 0x7f and 0xff
    } else {
      v += info.min;
    }
    p[i] = static_cast<uint8_t>(static_cast<int8_t>(v));
  }
  return t;
}

// Scales f16 [N, groups], near 0.01 (so sums over K stay well inside fp16).
Tensor random_scale(int64_t N, int64_t G, uint64_t seed) {
  Tensor t = Tensor::empty({N, G}, DType::f16);
  auto* p = t.ptr<uint16_t>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * G; ++i) {
    const uint64_t r = bench::random_bits(seed, static_cast<uint64_t>(i));
    p[i] = core::f32_to_f16(0.005f + 0.01f * static_cast<float>(r & 0xffff) / 65535.0f);
  }
  return t;
}

// Zeros [N, groups]: integers of W's type (quantized) or small f16 floats.
Tensor random_zeros(const TypeSpec& t, int64_t N, int64_t G, uint64_t seed) {
  if (t.zeros_mode == ZerosMode::quantized) return random_weight(t.type, N, G, seed);
  Tensor z = Tensor::empty({N, G}, DType::f16);
  auto* p = z.ptr<uint16_t>();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * G; ++i)
    p[i] = core::f32_to_f16(0.01f * bench::normal_from_bits(bench::random_bits(seed, static_cast<uint64_t>(i))));
  return z;
}

// Rows [r0, r0 + rows) of a contiguous 2-D host tensor.
TensorRef row_slice(const Tensor& t, int64_t r0, int64_t rows) {
  if (!t.defined()) return {};
  const int64_t cols = t.size(1);
  auto* base = static_cast<uint8_t*>(t.data()) + dtype_storage_bytes(t.dtype(), r0 * cols);
  return TensorRef::contiguous(base, t.dtype(), {rows, cols}, t.device());
}

size_t packed_bytes(const PackedWeight& w) {
  size_t b = 0;
  for (const Tensor* t : {&w.qweight, &w.scale, &w.zeros, &w.bias, &w.perm}) {
    if (t->defined()) b += t->nbytes();
  }
  return b;
}

// ------------------------------------------------------------------ check

// The CPU backend's result (f32) for the first kCheckRows rows of A on a few
// column slices of W: the device result must match it there.
struct Reference {
  struct Slice {
    int64_t n0, n;
    Tensor out;  // f32 [rows, n]
  };
  int64_t rows = 0;
  std::vector<Slice> slices;
};

Reference make_reference(const MatmulConfig& config, const Tensor& A_host, const Tensor& weight, const Tensor& scale,
                         const Tensor& zeros) {
  Reference ref;
  ref.rows = std::min<int64_t>(kCheckRows, A_host.size(0));
  const int64_t N = config.N, n = std::min<int64_t>(N, kCheckCols);
  std::vector<int64_t> starts = {0};
  if (N > n) starts.push_back(N - n);
  const TensorRef a = row_slice(A_host, 0, ref.rows);
  for (int64_t n0 : starts) {
    MatmulConfig c = config;
    c.N = n;
    c.M = {ref.rows};
    c.out_dtype = DType::f32;
    const Matmul cpu(c, Device::cpu());
    const PackedWeight w =
        cpu.transform_weight(row_slice(weight, n0, n), row_slice(scale, n0, n), row_slice(zeros, n0, n));
    ref.slices.push_back({n0, n, cpu.forward(a, w)});
  }
  return ref;
}

// Relative L2 error of the device's first rows against the reference; NaN
// when a compared value is not finite.
double check_error(const Reference& ref, const TensorRef& out, int64_t M, int64_t N) {
  const int64_t rows = std::min(M, ref.rows);
  const Tensor host = Tensor::copy_of(TensorRef::contiguous(out.data, out.dtype, {rows, N}, out.device), Device::cpu());
  const auto* got = host.ptr<const uint16_t>();
  double err = 0.0, norm = 0.0;
  for (const Reference::Slice& s : ref.slices) {
    const float* want = s.out.ptr<const float>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < s.n; ++j) {
        const double g = core::f16_to_f32(got[r * N + s.n0 + j]);
        const double w = want[r * s.n + j];
        if (!std::isfinite(g)) return std::nan("");
        err += (g - w) * (g - w);
        norm += w * w;
      }
    }
  }
  return std::sqrt(err / std::max(norm, 1e-300));
}

// ------------------------------------------------------------------ cuBLAS

#if defined(LOWBIT_WITH_CUBLAS)
void cublas_ok(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw Error(ErrorCode::device_error, core::cat("bench gemm: ", what, " failed: ", cublasGetStatusString(s)));
  }
}

class Cublas {
 public:
  explicit Cublas(cudaStream_t stream) {
    cublas_ok(cublasCreate(&handle_), "cublasCreate");
    cublas_ok(cublasSetStream(handle_, stream), "cublasSetStream");
  }
  ~Cublas() { cublasDestroy(handle_); }
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;

  // out[M, N] = A[M, K] · W[N, K]ᵀ, all row-major f16, f32 compute (torch's
  // `A @ W.T`): in cuBLAS' column-major terms outᵀ = op_T(W) · Aᵀ.
  void gemm(const void* A, const void* W, void* out, int64_t M, int64_t N, int64_t K) {
    const float alpha = 1.0f, beta = 0.0f;
    const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
    cublas_ok(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, W, CUDA_R_16F, k, A, CUDA_R_16F, k,
                           &beta, out, CUDA_R_16F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
  }

 private:
  cublasHandle_t handle_ = nullptr;
};
#endif

// ------------------------------------------------------------------ the run

struct Row {
  std::string shape, type;
  int64_t N = 0, K = 0, M = 0;
  std::string status;  // ok, skipped, failed
  std::string reason;  // skipped / failed: why, in a word or two
  std::string message;
  double us = NAN, cublas_us = NAN;
  double w_bytes = NAN, floor_bytes = NAN, floor_us = NAN;
  double read_us = NAN;  // a pure read of floor_bytes (cuBLAS)
  double check_err = NAN;
  std::string check = "-";

  double flops() const { return 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K); }
  double tflops() const { return flops() / (us * 1e6); }
  double cublas_tflops() const { return flops() / (cublas_us * 1e6); }
  double speedup() const { return cublas_us / us; }
  double of_floor() const { return floor_us / us; }
  double of_read() const { return read_us / us; }
};

std::string fmt(const char* f, double v) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// Width of the type column: the longest spec's name.
int g_type_width = 17;

void print_header() {
  std::printf("  %-11s %-*s %5s %6s %9s %8s %9s %8s %8s %8s %8s %7s  %s\n", "N x K", g_type_width, "type", "M", "W_MB",
              "us", "TFLOP/s", "cuBLAS_us", "speedup", "floor_us", "of_floor", "read_us", "of_read", "check");
}

void print_row(const Row& r) {
  std::string tail = r.status == "ok" ? r.check : r.message;
  std::printf("  %-11s %-*s %5lld %6s %9s %8s %9s %8s %8s %8s %8s %7s  %s\n", r.shape.c_str(), g_type_width,
              r.type.c_str(), static_cast<long long>(r.M), fmt("%.2f", r.w_bytes / 1e6).c_str(),
              fmt("%.2f", r.us).c_str(), fmt("%.2f", r.tflops()).c_str(), fmt("%.2f", r.cublas_us).c_str(),
              fmt("%.2fx", r.speedup()).c_str(), fmt("%.2f", r.floor_us).c_str(), fmt("%.3f", r.of_floor()).c_str(),
              fmt("%.2f", r.read_us).c_str(), fmt("%.3f", r.of_read()).c_str(), tail.c_str());
  std::fflush(stdout);
}

std::string csv_num(double v) { return std::isfinite(v) ? fmt("%.6g", v) : std::string(); }

std::string csv_text(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

void write_csv(const std::string& path, const std::string& device, const std::vector<Row>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw Error(ErrorCode::io_error, core::cat("bench gemm: cannot write --csv ", path));
  std::fprintf(f,
               "device,N,K,M,type,status,lowbit_us,lowbit_tflops,cublas_us,cublas_tflops,speedup_vs_cublas,"
               "packed_w_bytes,floor_bytes,floor_us,of_floor,read_us,of_read,check_rel_err,message\n");
  for (const Row& r : rows) {
    std::fprintf(f, "%s,%lld,%lld,%lld,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", csv_text(device).c_str(),
                 static_cast<long long>(r.N), static_cast<long long>(r.K), static_cast<long long>(r.M), r.type.c_str(),
                 r.status.c_str(), csv_num(r.us).c_str(), csv_num(r.tflops()).c_str(), csv_num(r.cublas_us).c_str(),
                 csv_num(r.cublas_tflops()).c_str(), csv_num(r.speedup()).c_str(), csv_num(r.w_bytes).c_str(),
                 csv_num(r.floor_bytes).c_str(), csv_num(r.floor_us).c_str(), csv_num(r.of_floor()).c_str(),
                 csv_num(r.read_us).c_str(), csv_num(r.of_read()).c_str(), csv_num(r.check_err).c_str(),
                 csv_text(r.message).c_str());
  }
  if (std::fclose(f) != 0) throw Error(ErrorCode::io_error, core::cat("bench gemm: cannot write --csv ", path));
}

// Errors that mean "this case cannot run here" rather than "it ran wrong".
bool is_skip(ErrorCode c) {
  return c == ErrorCode::no_backend || c == ErrorCode::unsupported_dtype || c == ErrorCode::invalid_argument;
}

// One type's weight for one shape: the unpacked inputs (kept for the check)
// and the packed weight on the device, or why it could not be made.
struct Prepared {
  std::optional<Matmul> mm;
  PackedWeight W;
  Tensor weight, scale, zeros;
  std::string error;
  ErrorCode code = ErrorCode::ok;
};

Prepared prepare(const TypeSpec& t, const Shape2& sh, const std::vector<int64_t>& ms, Device dev, uint64_t seed) {
  Prepared p;
  try {
    const MatmulConfig cfg = config_for(t, sh.N, sh.K, ms);
    p.mm.emplace(cfg, dev);
    p.weight = random_weight(t.type, sh.N, sh.K, seed);
    if (t.scaling) p.scale = random_scale(sh.N, cfg.groups(), seed + 1);
    if (t.zeros) p.zeros = random_zeros(t, sh.N, cfg.groups(), seed + 2);
    p.W = p.mm->transform_weight(p.weight, p.scale, p.zeros);
  } catch (const Error& e) {
    p.error = e.what();
    p.code = e.code();
  } catch (const std::exception& e) {  // e.g. std::bad_alloc
    p.error = e.what();
    p.code = ErrorCode::internal;
  }
  return p;
}

class GemmBench {
 public:
  GemmBench(const GemmOptions& o, Device dev, bench::Timer& timer, Stream stream, double copy_gbps)
      : o_(o), dev_(dev), timer_(timer), stream_(stream), copy_gbps_(copy_gbps) {}

#if defined(LOWBIT_WITH_CUBLAS)
  void set_cublas(Cublas* c) { cublas_ = c; }
#endif

  void run_shape(const Shape2& sh, const std::vector<int64_t>& ms, const std::vector<TypeSpec>& types, uint64_t seed) {
    const int64_t maxM = *std::max_element(ms.begin(), ms.end());
    const Tensor A_host = random_f16({maxM, sh.K}, 1.0f, seed);
    const Tensor A = dev_.is_cpu() ? A_host : Tensor::copy_of(A_host, dev_, stream_);
    Tensor out = Tensor::empty({maxM, sh.N}, DType::f16, dev_);

    // The weights of every type, packed concurrently (transform_weight packs
    // on one host thread; this is most of the run's wall time), before any
    // timing so that no host work competes with the timed launches.
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::future<Prepared>> pending;
    for (size_t ti = 0; ti < types.size(); ++ti) {
      pending.push_back(
          std::async(std::launch::async, [&, ti] { return prepare(types[ti], sh, ms, dev_, seed * 131 + 7 * ti); }));
    }
    std::vector<Prepared> prepared;
    for (auto& f : pending) prepared.push_back(f.get());
    prep_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::map<int64_t, double> cublas_us;
#if defined(LOWBIT_WITH_CUBLAS)
    if (cublas_ != nullptr) {
      const Tensor W16 = Tensor::copy_of(random_f16({sh.N, sh.K}, 0.05f, seed + 1), dev_, stream_);
      for (int64_t M : ms) {
        auto fn = [&] { cublas_->gemm(A.data(), W16.data(), out.data(), M, sh.N, sh.K); };
        cublas_us[M] = 1e3 * timer_.time_ms(fn, reps(), warmup());
      }
    }
#endif

    for (size_t ti = 0; ti < types.size(); ++ti) {
      const TypeSpec& t = types[ti];
      Prepared& p = prepared[ti];
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
        if (auto it = cublas_us.find(M); it != cublas_us.end()) r.cublas_us = it->second;
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
          args.config = o_.config;
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
            r.check = core::cat(good ? "ok " : "FAILED ", fmt("%.1e", r.check_err));
            if (!good) {
              r.message = core::cat("result differs from the CPU backend: relative L2 error ", fmt("%.3g", r.check_err),
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
      p = Prepared{};  // this type's host and device memory, before the next
    }
  }

  const std::vector<Row>& rows() const { return rows_; }
  double prep_seconds() const { return prep_s_; }

 private:
  int reps() const { return o_.reps; }
  int warmup() const { return o_.warmup; }

  // The time of a pure read of `bytes` on the GPU (cuda::read_floor, same
  // flush and timing as the matmul), cached per size; NaN on the CPU.
  double read_floor_us([[maybe_unused]] double bytes) {
#if defined(LOWBIT_WITH_CUDA)
    if (!dev_.is_cuda()) return NAN;
    const auto n = static_cast<int64_t>(bytes) / 16 * 16;
    if (auto it = read_us_.find(n); it != read_us_.end()) return it->second;
    if (n + 16 > read_bytes_) {
      read_buf_ = Tensor();
      read_buf_ = Tensor::empty({n + 16}, DType::u8, dev_);
      bench::cuda_ok(
          cudaMemsetAsync(read_buf_.data(), 0, static_cast<size_t>(n + 16), static_cast<cudaStream_t>(stream_.handle)),
          "cudaMemsetAsync(read buffer)");
      read_bytes_ = n + 16;
    }
    auto* base = static_cast<uint8_t*>(read_buf_.data());
    auto fn = [&] {
      cuda::read_floor(base + 16, static_cast<size_t>(n), reinterpret_cast<unsigned*>(base),
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
      bench::cuda_ok(cudaMemsetAsync(o.data, 0xff, o.nbytes(), static_cast<cudaStream_t>(stream_.handle)),
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
      r.message = core::cat("skipped: no CUDA matmul backend registered (", what, ")");
    } else {
      r.message = core::cat(skip ? "skipped (" : "FAILED (", error_code_name(code), "): ", what);
    }
    add(r);
  }

  void add(const Row& r) {
    rows_.push_back(r);
    print_row(r);
  }

  const GemmOptions& o_;
  Device dev_;
  bench::Timer& timer_;
  Stream stream_;
  double copy_gbps_;
#if defined(LOWBIT_WITH_CUBLAS)
  Cublas* cublas_ = nullptr;
#endif
  Tensor workspace_;
  size_t workspace_bytes_ = 0;
  Tensor read_buf_;  // read_floor_us: its first float takes the result
  int64_t read_bytes_ = 0;
  std::map<int64_t, double> read_us_;
  std::vector<Row> rows_;
  double prep_s_ = 0.0;
};

double geomean(const std::vector<double>& v) {
  if (v.empty()) return NAN;
  double s = 0.0;
  for (double x : v) s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

void print_summary(const std::vector<Row>& rows, const std::vector<TypeSpec>& types, const std::vector<int64_t>& ms,
                   double copy, bool have_cublas, bool checked, double wall_s, double prep_s) {
  int timed = 0, failed = 0;
  std::map<std::string, int> skipped, failures;  // reason -> count
  bool no_backend = false;
  for (const Row& r : rows) {
    if (r.status == "ok") ++timed;
    if (r.status == "failed") ++failures[r.reason];
    if (r.status == "skipped") ++skipped[r.reason];
    no_backend = no_backend || r.reason == "no CUDA matmul backend";
  }
  for (const auto& [why, n] : failures) failed += n;
  if (have_cublas) {
    std::string line;
    for (int64_t M : ms) {
      std::vector<double> tf;
      std::map<std::string, bool> seen;
      for (const Row& r : rows) {
        if (r.M == M && std::isfinite(r.cublas_us) && !seen[r.shape]) {
          seen[r.shape] = true;
          tf.push_back(r.cublas_tflops());
        }
      }
      if (!tf.empty()) line += core::cat(" M=", M, " ", fmt("%.1f", geomean(tf)));
    }
    std::printf("summary: cuBLAS fp16 TFLOP/s (geomean over shapes):%s\n", line.c_str());
  }
  for (const TypeSpec& t : types) {
    std::string sp, fl, rd, ceil;
    auto range = [](const std::vector<double>& v) {
      return core::cat(fmt("%.2f", *std::min_element(v.begin(), v.end())), "-",
                       fmt("%.2f", *std::max_element(v.begin(), v.end())));
    };
    for (int64_t M : ms) {
      std::vector<double> s, f, rf, c;
      for (const Row& r : rows) {
        if (r.type != t.name || r.M != M || r.status != "ok") continue;
        if (std::isfinite(r.speedup())) s.push_back(r.speedup());
        f.push_back(r.of_floor());
        if (std::isfinite(r.of_read())) rf.push_back(r.of_read());
        if (std::isfinite(r.read_us) && std::isfinite(r.cublas_us)) c.push_back(r.cublas_us / r.read_us);
      }
      if (!s.empty()) sp += core::cat(" M=", M, " ", fmt("%.2fx", geomean(s)));
      if (!f.empty()) fl += core::cat(" M=", M, " ", range(f));
      if (!rf.empty()) rd += core::cat(" M=", M, " ", range(rf));
      if (!c.empty()) ceil += core::cat(" M=", M, " ", fmt("%.2fx", geomean(c)));
    }
    if (!sp.empty()) {
      std::printf("summary: %-*s speedup over cuBLAS (geomean over shapes):%s\n", g_type_width, t.name.c_str(),
                  sp.c_str());
    }
    if (!fl.empty())
      std::printf("summary: %-*s of_floor (min-max over shapes):%s\n", g_type_width, t.name.c_str(), fl.c_str());
    if (!rd.empty())
      std::printf("summary: %-*s of_read (min-max over shapes):%s\n", g_type_width, t.name.c_str(), rd.c_str());
    if (!ceil.empty()) {
      std::printf("summary: %-*s speedup of a pure read of the same bytes over cuBLAS (geomean):%s\n", g_type_width,
                  t.name.c_str(), ceil.c_str());
    }
  }
  if (no_backend) {
    std::printf("summary: no CUDA matmul backend is registered in this build: lowbit cases skipped%s\n",
                have_cublas ? " (cuBLAS timed alone)" : "");
  }
  auto counts = [](const std::map<std::string, int>& m) {
    std::string t;
    for (const auto& [why, n] : m) t += core::cat(t.empty() ? " (" : ", ", why, ": ", n);
    return t.empty() ? t : t + ")";
  };
  const bool check_failed = failures.count("check") > 0;
  std::printf(
      "summary: copy %.1f GB/s; %zu cases: %d timed, %d skipped%s, %d failed%s; checks %s; %.1f s (%.1f s "
      "preparing weights and references)\n",
      copy, rows.size(), timed, static_cast<int>(rows.size()) - timed - failed, counts(skipped).c_str(), failed,
      counts(failures).c_str(),
      !checked       ? "off (--no-check)"
      : check_failed ? "FAILED"
                     : "ok",
      wall_s, prep_s);
}

void run_gemm_bench(GemmOptions o) {
  const auto wall0 = std::chrono::steady_clock::now();
  const std::string dev = !o.device.empty() ? o.device : (cuda_device_count() > 0 ? "cuda" : "cpu");
  const bool gpu = dev == "cuda";
  if (o.shapes.empty()) o.shapes = gpu ? kGpuShapes : kCpuShapes;
  if (o.m.empty()) o.m = gpu ? kGpuM : kCpuM;
  if (o.types.empty()) o.types = kDefaultTypes;
  if (o.reps <= 0) o.reps = gpu ? 20 : 3;
  if (o.warmup < 0) o.warmup = gpu ? 3 : 1;

  std::vector<Shape2> shapes;
  for (const std::string& s : o.shapes) shapes.push_back(*parse_shape(s));  // validated by the option
  std::vector<TypeSpec> types;
  for (const std::string& s : o.types) types.push_back(parse_type_spec(s));
  for (const TypeSpec& t : types) g_type_width = std::max(g_type_width, static_cast<int>(t.name.size()));
  std::vector<int64_t> ms = o.m;
  std::sort(ms.begin(), ms.end());
  ms.erase(std::unique(ms.begin(), ms.end()), ms.end());

  std::string what, flush_text = "";
  Stream stream{};
  std::unique_ptr<bench::Timer> timer;
  Device device = Device::cpu();
  bool have_cublas = false;
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
    bench::cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    bench::cuda_ok(cudaStreamCreate(&cs), "cudaStreamCreate");
    stream.handle = cs;
    const size_t flush = std::max(bench::CudaTimer::kDefaultFlushBytes, 2 * static_cast<size_t>(prop.l2CacheSize));
    auto cuda_timer = std::make_unique<bench::CudaTimer>(cs, flush);
    flush_text = core::cat(", ", cuda_timer->flush_text(), " before each, CUDA events around the matmul");
    timer = std::move(cuda_timer);
    device = Device::cuda(0);
    what = core::cat("cuda:0 ", prop.name, ", ", prop.multiProcessorCount, " SMs, L2 ", prop.l2CacheSize >> 20, " MB");
#if defined(LOWBIT_WITH_CUBLAS)
    cublas = std::make_unique<Cublas>(cs);
    have_cublas = true;
#endif
#else
    throw Error(ErrorCode::no_backend, "bench gemm: --device cuda, but lowbit was built without CUDA");
#endif
  } else {
    timer = std::make_unique<bench::CpuTimer>();
    what = core::cat("cpu, ", omp_get_max_threads(), " OpenMP threads");
  }

  std::printf(
      "lowbit bench gemm: %s; A f16 [M, K] x W [N, K]^T -> f16, f32 accumulation; median of %d reps (%d "
      "warm-up)%s\n",
      what.c_str(), o.reps, o.warmup, flush_text.c_str());
  const int64_t copy_bytes = gpu ? kGpuCopyBytes : kCpuCopyBytes;
  const double copy = timer->copy_gbps(copy_bytes, o.reps);
  std::printf("  copy (%s, read + write of %lld MB): %.1f GB/s; floor = (packed W + A + out bytes) / copy\n",
              gpu ? "device-to-device cudaMemcpy" : "memcpy", static_cast<long long>(copy_bytes >> 20), copy);
  if (gpu && !have_cublas) std::printf("  cuBLAS: not built in (CUDA::cublas not found at configure time)\n");
  if (!gpu) std::printf("  cuBLAS: GPU only\n");
  print_header();

  GemmBench b(o, device, *timer, stream, copy);
#if defined(LOWBIT_WITH_CUBLAS)
  b.set_cublas(cublas.get());
#endif
  uint64_t seed = 1;
  for (const Shape2& sh : shapes) b.run_shape(sh, ms, types, seed++);

  if (!o.csv.empty()) {
    write_csv(o.csv, what, b.rows());
    std::printf("csv: %s\n", o.csv.c_str());
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  print_summary(b.rows(), types, ms, copy, have_cublas, !o.no_check, wall, b.prep_seconds());

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

}  // namespace

void add_bench_gemm_command(CLI::App& bench) {
  auto opts = std::make_shared<GemmOptions>();
  CLI::App* gemm = bench.add_subcommand(
      "gemm", "Mixed-precision matmul (Matmul) vs cuBLAS fp16 and the memory floor, over Llama shapes");
  gemm->add_option("--device", opts->device, "cpu or cuda (default: cuda when a GPU is visible)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  gemm->add_option("--shapes", opts->shapes,
                   "weight shapes NxK, comma-separated (default: the Llama list 4096x4096,14336x4096,4096x14336,"
                   "8192x8192,28672x8192,8192x28672 on cuda; 4096x4096 on cpu)")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string& s) {
            return parse_shape(s) ? std::string() : "expected NxK with N, K >= 1, got '" + s + "'";
          },
          "NxK"));
  gemm->add_option("--m", opts->m,
                   "batch sizes M, comma-separated (default 1,16,32,64,128,256,4096 on cuda; 1,16 on cpu)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  gemm->add_option("--types", opts->types,
                   "weight types TYPE[:gN|:row|:noscale][:zeros[=MODE]], comma-separated (default "
                   "uint4:g128:zeros,int4:g128,nf4:g128,int2:g128)")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string& s) {
            try {
              parse_type_spec(s);
              return std::string();
            } catch (const Error& e) {
              return std::string(e.what());
            }
          },
          "TYPE[:gN][:zeros]"));
  gemm->add_option("--reps", opts->reps, "timed repetitions per case, median reported (default 20 on cuda, 3 on cpu)")
      ->check(CLI::Range(1, 1000000));
  gemm->add_option("--warmup", opts->warmup, "untimed runs before timing (default 3 on cuda, 1 on cpu)")
      ->check(CLI::Range(0, 1000000));
  gemm->add_option("--config", opts->config, "force the backend's k-th kernel config (default -1: its heuristic)")
      ->check(CLI::Range(-1, 1 << 20));
  gemm->add_flag("--no-check", opts->no_check, "skip the check of each result against the CPU backend");
  gemm->add_option("--csv", opts->csv, "also write every case to this CSV file");
  gemm->callback([opts] { run_gemm_bench(*opts); });
}

}  // namespace lowbit::cli
