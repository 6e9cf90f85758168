// Enumerate → filter → rank (select.h).
#include <cstdint>
#include <limits>
#include <string>

#include "core/check.h"
#include "cuda/gemm/select.h"

namespace lowbit::cuda::gemm {
namespace {

const char* const op = MatmulArgs::kName;

struct Candidate {
  const Family* family;
  int shape;
};

// Every shape this build compiles for a layout, in the families' order.
std::vector<Candidate> candidates(WeightLayout layout) {
  std::vector<Candidate> out;
  for (const Family* f : {&kRowsFamily, &kMmaFamily, &kWgmmaFamily, &kStreamFamily}) {
    if (f->layout != layout) continue;
    for (int s = 0; s < f->shapes; ++s) {
      if (f->built(s)) out.push_back({f, s});
    }
  }
  return out;
}

// The heuristic's order of preference at a prepared M; the first that passes
// the filters runs. `one_wave`: taken only where its plan's blocks fit in one
// wave. Each choice the fastest of the candidates measured over int4 and nf4
// g128 at 4096² .. 28672x8192 (bench/notes/matmul-wgmma-epilogue.md,
// bench/notes/matmul-streaming-small-m.md, bench/notes/matmul-rows-kernel.md).
struct Preference {
  KernelConfig config;
  bool one_wave = false;
};

KernelConfig named(const char* name) { return parse_kernel_config(name); }

// One rung: the order of preference up to a prepared M.
struct Rung {
  int64_t max_m;
  std::vector<Preference> order;
};
constexpr int64_t kAnyM = std::numeric_limits<int64_t>::max();

// Made once (parsing names on every call would cost).
const std::vector<Rung>& ladder(WeightLayout layout) {
  // rows: M <= 8: one n8 tile and 8 warps (more loads in flight than 4);
  // M <= 16: two n8 tiles (no wasted columns at 16); larger: four n8 tiles and
  // 8 warps, the most weight reuse a block.
  static const std::vector<Rung> rows = {
      {8, {{named("rows_m8_n128")}}}, {16, {{named("rows_m16_n64")}}}, {kAnyM, {{named("rows_m32_n128")}}}};
  // tiles: small M streams the weight once with A in shared memory (at M <= 16
  // the 16-warp shape where the activations' shared memory, not the GPU's
  // fill, sets the K splits past one wave); from 64 rows wgmma where it runs;
  // the mma.sync tiles where neither does.
  static const std::vector<Rung> tiles = [] {
    const Preference mma_small{named("mma_m8_n256_s3")}, mma_large{named("mma_m64_n128_s4")};
    return std::vector<Rung>{{8, {{named("stream_m8_n256")}, mma_small}},
                             {16, {{named("stream_m16_n256"), true}, {named("stream_m16_n512")}, mma_small}},
                             {32, {{named("stream_m32_n256")}, mma_small}},
                             {64, {{named("wgmma_m64_n256_k64")}, {named("stream_m64_n192")}, mma_small}},
                             {128, {{named("wgmma_m128_n128_k128")}, mma_large}},
                             {kAnyM, {{named("wgmma_m256_n128_k128")}, mma_large}}};
  }();
  return layout == WeightLayout::rows ? rows : tiles;
}

const std::vector<Preference>& preferences_at(WeightLayout layout, int64_t m) {
  const std::vector<Rung>& rungs = ladder(layout);
  for (const Rung& r : rungs) {
    if (m <= r.max_m) return r.order;
  }
  return rungs.back().order;
}

const Candidate* find(const std::vector<Candidate>& all, const KernelConfig& c) {
  for (const Candidate& x : all) {
    if (x.family->config(x.shape) == c) return &x;
  }
  return nullptr;
}

// The heuristic's pick and its plan.
std::pair<const Candidate*, Plan> pick(const Problem& pr, const std::vector<Candidate>& all) {
  for (const Preference& want : preferences_at(pr.args->weight.format.layout, pr.m)) {
    const Candidate* c = find(all, want.config);
    if (c == nullptr || c->family->cannot_implement(pr, c->shape) != nullptr) continue;
    Plan plan = c->family->make_plan(pr, c->shape);
    if (want.one_wave && !plan.one_wave) continue;
    return {c, plan};
  }
  core::fail(ErrorCode::internal, core::cat(op, ": no kernel config can run ",
                                            weight_type_name(pr.args->weight.format.type), " at M = ", pr.m, " here"));
}

}  // namespace

std::vector<KernelConfig> ranked_configs(const Problem& pr) {
  const std::vector<Candidate> all = candidates(pr.args->weight.format.layout);
  const Candidate* first = pick(pr, all).first;
  std::vector<KernelConfig> out{first->family->config(first->shape)};
  for (const Candidate& c : all) {
    if (&c != first && c.family->cannot_implement(pr, c.shape) == nullptr) out.push_back(c.family->config(c.shape));
  }
  return out;
}

Plan select_plan(const Problem& pr) {
  const std::vector<Candidate> all = candidates(pr.args->weight.format.layout);
  const KernelConfig& forced = pr.args->config;
  if (forced.empty()) return pick(pr, all).second;
  const Candidate* c = find(all, forced);
  if (c == nullptr) {
    std::string known;
    for (const Candidate& x : all) known += (known.empty() ? "" : ", ") + x.family->config(x.shape).name();
    core::fail(ErrorCode::invalid_argument,
               core::cat(op, ": config '", forced.name(), "' is not a cuda kernel config of the ",
                         weight_layout_name(pr.args->weight.format.layout), " layout in this build (it has ", known,
                         "; shapes the heuristic never picks need LOWBIT_ALL_CONFIGS)"));
  }
  const char* why = c->family->cannot_implement(pr, c->shape);
  LOWBIT_REQUIRE(why == nullptr, ErrorCode::invalid_argument, op, ": config '", forced.name(), "' cannot run ",
                 weight_type_name(pr.args->weight.format.type), " here: ", why);
  return c->family->make_plan(pr, c->shape);
}

}  // namespace lowbit::cuda::gemm
