// `lowbit tune`: the tuned-parameter database (lowbit/tune.h, docs/tune.md).
//   lowbit tune --list [--db FILE] [--op OP]   the entries in use, or one file's
//   lowbit tune OP --shapes MxNxK,... [...]     (fp8_gemm, matmul_4bit, matmul) measures every kernel config the
//       backend lists for each shape that gives the bits of the backend's own
//       choice ("default"), and that choice, on random operands, and writes
//       the fastest into the user's database
//       (or --db), replacing only that op's entry of the same device, version
//       and key; a shape it has seen is re-measured, so its entry is kept or
//       improved by the measurement.
#include "lowbit/tune.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "core/check.h"
#include "core/float_convert.h"
#include "core/registry.h"
#include "gemm/args.h"
#include "gemm/weights.h"
#include "lowbit/ops/fp8_gemm.h"
#include "lowbit/ops/gemm.h"
#include "lowbit/stream.h"
#include "lowbit/tensor.h"
#include "ops/tune_keys.h"

namespace lowbit::cli {
namespace {

constexpr const char* kOps[] = {"fp8_gemm", "matmul_4bit", "matmul"};

struct TuneArgs {
  bool list = false;
  std::string db, op, device, dtype, type = "int4:g128";
  std::vector<std::string> shapes;
  int reps = 0, blocksize = 64;
};

void list(const TuneArgs& a) {
  const TuneDb db = a.db.empty() ? tune_db() : TuneDb::load(a.db);
  std::printf("# %s\n",
              a.db.empty() ? ("shipped entries, then " + user_tune_db_path().string()).c_str() : a.db.c_str());
  TuneDb shown;
  for (const TuneEntry& e : db.entries()) {
    if (a.op.empty() || e.op == a.op) shown.set(e);
  }
  std::fputs(shown.dump().c_str(), stdout);
  std::printf("# %zu entr%s\n", shown.entries().size(), shown.entries().size() == 1 ? "y" : "ies");
}

struct Mnk {
  int64_t M, N, K;
};

Mnk parse_shape(const std::string& s) {
  Mnk v{};
  char x1 = 0, x2 = 0;
  char tail = 0;
  const int got = std::sscanf(s.c_str(), "%ld%c%ld%c%ld%c", &v.M, &x1, &v.N, &x2, &v.K, &tail);
  LOWBIT_REQUIRE(got == 5 && x1 == 'x' && x2 == 'x' && v.M > 0 && v.N > 0 && v.K > 0, ErrorCode::invalid_argument,
                 "lowbit tune: --shapes takes MxNxK with positive sizes (got '", s, "')");
  return v;
}

// Deterministic bytes for the operands (their values change the time, not the choice).
uint32_t next(uint64_t& s) {
  s = s * 6364136223846793005ULL + 1442695040888963407ULL;
  return static_cast<uint32_t>(s >> 33);
}

Tensor host_bytes(const std::vector<int64_t>& shape, DType dtype, uint64_t& seed, uint8_t mask) {
  Tensor t = Tensor::empty(Shape(shape), dtype);
  auto* p = static_cast<uint8_t*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(next(seed)) & mask;
  return t;
}

Tensor host_floats(const std::vector<int64_t>& shape, DType dtype, uint64_t& seed, float lo, float hi) {
  LOWBIT_REQUIRE(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16, ErrorCode::unsupported_dtype,
                 "lowbit tune: --dtype must be float32, float16 or bfloat16 (got ", dtype_name(dtype), ")");
  Tensor t = Tensor::empty(Shape(shape), dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = lo + (hi - lo) * static_cast<float>(next(seed) >> 8) / 16777216.0f;
    if (dtype == DType::f32) {
      t.ptr<float>()[i] = v;
    } else if (dtype == DType::f16) {
      t.ptr<core::Half>()[i] = core::from_f32<core::Half>(v);
    } else {
      t.ptr<core::BFloat16>()[i] = core::from_f32<core::BFloat16>(v);
    }
  }
  return t;
}

// One shape's call on `copies` sets of operands (a set is picked per call in
// turn, so that together they overflow the caches as a model's layers do):
// its args with `config`, run on `stream`.
struct Call {
  std::string op;
  std::vector<Tensor> keep;  // the operands
  std::function<std::vector<KernelConfig>()> configs;
  std::function<void(const KernelConfig&, int copy, Stream)> run;
  std::function<Tensor()> result;  // the first copy's output, on the host
  ops::TuneKey key;
  int copies = 1;
};

// Copies of operands of `bytes` that overflow `cache` bytes of caches twice, 1 to 64.
int copies_for(double bytes, double cache) {
  return static_cast<int>(std::clamp(2.0 * cache / bytes + 1.0, 1.0, 64.0));
}

template <class Args>
void run_one(Args x, const KernelConfig& config, Device device, Stream stream) {
  x.config = config;
  const Tensor ws = Tensor::empty({static_cast<int64_t>(workspace_size(x))}, DType::u8, device, stream);
  run(x, ws.data(), stream);
}

Call fp8_call(const Mnk& s, Device device, DType out_dtype, double cache, uint64_t& seed) {
  const int64_t kb = (s.K + 127) / 128, nb = (s.N + 127) / 128;
  Call c{"fp8_gemm", {}, {}, {}, {}, {}, copies_for(static_cast<double>(s.M + s.N) * s.K, cache)};
  auto sets = std::make_shared<std::vector<Fp8GemmArgs>>();
  for (int i = 0; i < c.copies; ++i) {
    // e4m3 codes without NaN (0x7f / 0xff) or the largest magnitudes.
    Tensor a = host_bytes({s.M, s.K}, DType::f8_e4m3, seed, 0xef).to(device);
    Tensor b = host_bytes({s.N, s.K}, DType::f8_e4m3, seed, 0xef).to(device);
    Tensor as = host_floats({s.M, kb}, DType::f32, seed, 0.01f, 0.02f).to(device);
    Tensor bs = host_floats({nb, kb}, DType::f32, seed, 0.01f, 0.02f).to(device);
    Tensor out = Tensor::empty({s.M, s.N}, out_dtype, device);
    sets->push_back(Fp8GemmArgs{a.ref(), as.ref(), b.ref(), bs.ref(), {}, out.ref(), {}});
    c.keep.insert(c.keep.end(), {a, b, as, bs, out});
  }
  c.key = ops::tune_key(sets->front());
  c.configs = [sets] { return kernel_configs(sets->front()); };
  c.run = [sets, device](const KernelConfig& config, int copy, Stream stream) {
    run_one((*sets)[static_cast<size_t>(copy)], config, device, stream);
  };
  c.result = [sets] { return Tensor::copy_of(sets->front().out, Device::cpu()); };
  return c;
}

Call matmul_4bit_call(const Mnk& s, Device device, DType dtype, int64_t blocksize, double cache, uint64_t& seed) {
  const int64_t nblocks = (s.N * s.K + blocksize - 1) / blocksize;
  Call c{"matmul_4bit", {}, {}, {}, {}, {}, copies_for(static_cast<double>(s.N) * s.K / 2, cache)};
  auto sets = std::make_shared<std::vector<Matmul4bitArgs>>();
  Tensor A = host_floats({s.M, s.K}, dtype, seed, -1.0f, 1.0f).to(device);
  Tensor out = Tensor::empty({s.M, s.N}, dtype, device);
  c.keep.insert(c.keep.end(), {A, out});
  for (int i = 0; i < c.copies; ++i) {
    Tensor packed = host_bytes({(s.N * s.K + 1) / 2}, DType::u8, seed, 0xff).to(device);
    Tensor absmax = host_floats({nblocks}, DType::f32, seed, 0.5f, 1.0f).to(device);
    Matmul4bitArgs x;
    x.A = A.ref();
    x.packed = packed.ref();
    x.absmax = absmax.ref();
    x.out = out.ref();
    x.N = s.N;
    x.blocksize = blocksize;
    sets->push_back(x);
    c.keep.insert(c.keep.end(), {packed, absmax});
  }
  c.key = ops::tune_key(sets->front());
  c.configs = [sets] { return kernel_configs(sets->front()); };
  c.run = [sets, device](const KernelConfig& config, int copy, Stream stream) {
    run_one((*sets)[static_cast<size_t>(copy)], config, device, stream);
  };
  c.result = [out] { return out.to(Device::cpu()); };
  return c;
}

// Matmul of a random weight of `type` ("TYPE[:gN|:row|:noscale][:zeros[=MODE]]", as `lowbit bench gemm`
// takes it), A and out f16, prepared for M.
Call matmul_call(const Mnk& s, Device device, const std::string& type, double cache, uint64_t& seed) {
  const bench::TypeSpec t = bench::parse_type_spec(type);
  Call c{"matmul", {}, {}, {}, {}, {}, copies_for(static_cast<double>(s.N) * s.K / 2, cache)};
  struct Set {
    bench::PreparedWeight w;
    MatmulArgs args;
  };
  auto sets = std::make_shared<std::vector<Set>>();
  Tensor A = bench::random_f16({s.M, s.K}, 1.0f, next(seed)).to(device);
  Tensor out = Tensor::empty({s.M, s.N}, DType::f16, device);
  c.keep.insert(c.keep.end(), {A, out});
  for (int i = 0; i < c.copies; ++i) {
    bench::PreparedWeight w = bench::prepare(t, bench::WeightShape{s.N, s.K}, {s.M}, device, next(seed));
    LOWBIT_REQUIRE(w.error.empty(), w.code, "lowbit tune matmul: ", w.error);
    const MatmulArgs args = w.mm->args(A.ref(), w.W.ref(), out.ref());
    sets->push_back(Set{std::move(w), args});
  }
  c.key = ops::tune_key(sets->front().args);
  c.configs = [sets] { return kernel_configs(sets->front().args); };
  c.run = [sets, device](const KernelConfig& config, int copy, Stream stream) {
    run_one((*sets)[static_cast<size_t>(copy)].args, config, device, stream);
  };
  c.result = [out] { return out.to(Device::cpu()); };
  return c;
}

// Whether `config` gives the bits of the backend's own choice (`want`) on the first copy.
bool same_result(const Call& c, const KernelConfig& config, const Tensor& want) {
  c.run(config, 0, Stream{});
  const Tensor got = c.result();
  return got.nbytes() == want.nbytes() && std::memcmp(got.data(), want.data(), want.nbytes()) == 0;
}

// Seconds a call of `config` takes: the least of 3 rounds' means over `reps` calls.
double seconds(const Call& c, const KernelConfig& config, int reps) {
  const Stream stream{};
  for (int i = 0; i < c.copies; ++i) c.run(config, i, stream);  // warm: first-use setup
  synchronize(stream);
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) c.run(config, i % c.copies, stream);
    synchronize(stream);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    best = std::min(best, t);
  }
  return best;
}

void measure(const TuneArgs& a) {
  LOWBIT_REQUIRE(std::find(std::begin(kOps), std::end(kOps), a.op) != std::end(kOps), ErrorCode::invalid_argument,
                 "lowbit tune: no measured op '", a.op, "' (fp8_gemm, matmul_4bit, matmul)");
  LOWBIT_REQUIRE(!a.shapes.empty(), ErrorCode::invalid_argument, "lowbit tune ", a.op,
                 ": give --shapes MxNxK[,MxNxK...]");
  const bool gpu = a.device.empty() ? core::has_device_backend(DeviceType::cuda) &&
                                          core::device_backend(DeviceType::cuda).device_count() > 0
                                    : a.device == "cuda";
  const Device device = gpu ? Device::cuda(0) : Device::cpu();
  DType dtype = DType::bf16;
  if (!a.dtype.empty()) {
    LOWBIT_REQUIRE(parse_dtype(a.dtype, &dtype), ErrorCode::invalid_argument, "lowbit tune: unknown --dtype '", a.dtype,
                   "'");
  }
  const int reps = a.reps > 0 ? a.reps : (gpu ? 20 : 3);
  const std::string path = a.db.empty() ? user_tune_db_path().string() : a.db;
  const std::string name = core::device_name(device);
  TuneDb db = TuneDb::load(path);
  std::printf(
      "lowbit tune %s on %s (%s), %d calls a round, operands in turn from copies that overflow the caches; "
      "writing %s\n",
      a.op.c_str(), device.str().c_str(), name.c_str(), reps, path.c_str());
  uint64_t seed = 0x5eed;
  for (const std::string& text : a.shapes) {
    const Mnk s = parse_shape(text);
    // Caches the operands must overflow: the GPU's L2 (60 MB on an H200), a CPU's last level.
    const double cache = gpu ? 64e6 : 32e6;
    const Call c = a.op == "fp8_gemm"      ? fp8_call(s, device, dtype, cache, seed)
                   : a.op == "matmul_4bit" ? matmul_4bit_call(s, device, dtype, a.blocksize, cache, seed)
                                           : matmul_call(s, device, a.type, cache, seed);
    const std::optional<std::string> before = db.get_config(c.op, name, c.key.version, c.key.key, /*exact=*/true);
    // The backend's own choice first, then each listed config that gives its bits (a parameter may change
    // the speed, never the result; kernels of another summation order are left out).
    std::vector<KernelConfig> candidates{KernelConfig{}};
    c.run(KernelConfig{}, 0, Stream{});
    const Tensor want = c.result();
    for (const KernelConfig& k : c.configs()) {
      if (same_result(c, k, want)) {
        candidates.push_back(k);
      } else {
        std::printf("  %s [%s] %-40s   other bits than the default: not a candidate\n", text.c_str(),
                    c.key.version.c_str(), k.name().c_str());
      }
    }
    double best_t = 0.0;
    size_t best = 0;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const double t = seconds(c, candidates[i], reps);
      const std::string label = candidates[i].empty() ? "default" : candidates[i].name();
      std::printf("  %s [%s] %-40s %10.1f us\n", text.c_str(), c.key.version.c_str(), label.c_str(), t * 1e6);
      std::fflush(stdout);
      // A config must beat the backend's choice by 2% to be forced (timing noise otherwise flips entries).
      if (i == 0 || t < best_t * (best == 0 ? 0.98 : 1.0)) best_t = t, best = i;
    }
    const std::string chosen = candidates[best].empty() ? "default" : candidates[best].name();
    db.set(TuneEntry{c.op, name, c.key.version, c.key.key, {}, chosen});
    std::printf("  %s -> %s (%.1f us)%s\n", text.c_str(), chosen.c_str(), best_t * 1e6,
                !before             ? " new entry"
                : *before == chosen ? " entry kept"
                                    : (" replaces " + *before).c_str());
  }
  save_tune_db(db, path);
}

void run_tune(const TuneArgs& a) {
  if (a.list) {
    list(a);
    return;
  }
  LOWBIT_REQUIRE(!a.op.empty(), ErrorCode::invalid_argument,
                 "lowbit tune: give an op to measure (fp8_gemm, matmul_4bit, matmul) or --list");
  measure(a);
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  CLI::App* cmd = app.add_subcommand("tune", "The tuned kernel parameters: measure an op's configs, list entries");
  cmd->footer(
      "The database in use: lowbit's shipped entries, then LOWBIT_TUNE_DB (or ~/.cache/lowbit/tune.txt) "
      "over them. See docs/tune.md.");
  cmd->add_option("OP", a->op, "The op to measure: fp8_gemm, matmul_4bit or matmul (with --list: only its entries)");
  cmd->add_flag("--list", a->list, "Print the entries, one a line: op | device | version | key | parameters");
  cmd->add_option("--db", a->db, "A database file instead of the one in use (--list) or the user's (measuring)");
  cmd->add_option("--op", a->op, "Only this op's entries (--list)");
  cmd->add_option("--shapes", a->shapes, "Shapes to measure, MxNxK, comma-separated")->delimiter(',');
  cmd->add_option("--device", a->device, "cpu or cuda (default: cuda when a GPU is visible)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--dtype", a->dtype, "out's dtype (fp8_gemm) or A's (matmul_4bit); default bfloat16");
  cmd->add_option("--blocksize", a->blocksize, "matmul_4bit's blocksize (default 64)")->check(CLI::Range(16, 4096));
  cmd->add_option("--type", a->type,
                  "matmul's weight: TYPE[:gN|:row|:noscale][:zeros[=MODE]] as lowbit bench gemm takes it "
                  "(default int4:g128); A and out float16");
  cmd->add_option("--reps", a->reps, "calls a round, 3 rounds (default 20 on cuda, 3 on cpu)")
      ->check(CLI::Range(1, 100000));
  cmd->callback([a] { run_tune(*a); });
}

}  // namespace lowbit::cli
