// scatter_mm on the CPU (lowbit/ops/sparse.h). Every index is checked before
// any block is read or written; then each listed output block, in the order
// listed, takes its old value plus its products: the reference sums them in
// float64 and rounds once (to float32, then to the dtype); the fast path sums
// in fp32 (products in list order, K ascending in each) through
// bsr_fast.cpp's vectorized block_product and rounds once. Disjoint output
// blocks run in parallel; blocks that share elements (r_offsets may repeat
// or overlap) make the whole call run in order.
#include "cpu/sparse/scatter_mm.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/float_convert.h"
#include "core/registry.h"
#include "cpu/quant/elementwise.h"
#include "cpu/quant/parallel.h"
#include "cpu/quant/spans.h"
#include "cpu/sparse/bsr.h"
#include "lowbit/ops/sparse.h"

namespace lowbit::core::cpu {
namespace {

std::vector<int64_t> read_index(const TensorRef& t) {
  if (!t.present()) return {};
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::i32) {
    const int32_t* p = t.ptr<const int32_t>();
    std::copy(p, p + t.numel(), v.begin());
  } else {
    const int64_t* p = t.ptr<const int64_t>();
    std::copy(p, p + t.numel(), v.begin());
  }
  return v;
}

// One product to add: block p times the Ks x Ns panel of others at element offset q (row stride ld).
struct Term {
  int64_t p, q;
};
// One output block: its element offset in accumulators and its terms.
struct Target {
  int64_t at;
  std::vector<Term> terms;
};

// c[0] .. c[n] must be row pointers into [0, total]: non-decreasing, in range.
void check_pointers(const char* op, const std::vector<int64_t>& c, int64_t total) {
  for (size_t i = 0; i < c.size(); ++i) {
    LOWBIT_REQUIRE(c[i] >= 0 && c[i] <= total, ErrorCode::invalid_argument, op, ": c_indices[", i, "] must be in [0, ",
                   total, "] (got ", c[i], ")");
    LOWBIT_REQUIRE(i == 0 || c[i - 1] <= c[i], ErrorCode::invalid_argument, op, ": c_indices must not decrease (got ",
                   c[i - 1], " then ", c[i], " at ", i, ")");
  }
}

void check_range(const char* op, const char* name, int64_t i, int64_t v, int64_t lo, int64_t hi, const char* what) {
  LOWBIT_REQUIRE(v >= lo && v < hi, ErrorCode::invalid_argument, op, ": ", name, "[", i, "] = ", v, " must ", what,
                 " in [", lo, ", ", hi, ")");
}

// The checked targets of the call (element offsets in accumulators and others, batch 0).
std::vector<Target> targets_of(const ScatterMmArgs& a) {
  const char* op = ScatterMmArgs::kName;
  const int64_t P = a.blocks.size(0), Ms = a.blocks.size(1), Ks = a.blocks.size(2);
  const std::vector<int64_t> c = read_index(a.c_indices);
  std::vector<Target> out;
  if (a.format == ScatterMmFormat::scatter_mm) {
    const std::vector<int64_t> pq = read_index(a.pq);
    const int64_t G = a.pq.size(0), Q = a.others.size(0), Ns = a.others.size(2);
    check_pointers(op, c, G);
    for (int64_t r = 0; r + 1 < static_cast<int64_t>(c.size()); ++r) {
      Target t{r * Ms * Ns, {}};
      for (int64_t g = c[r]; g < c[r + 1]; ++g) {
        const int64_t p = pq[static_cast<size_t>(2 * g)], q = pq[static_cast<size_t>(2 * g + 1)];
        check_range(op, "pq[:, 0]", g, p, 0, P, "be a block of blocks");
        check_range(op, "pq[:, 1]", g, q, 0, Q, "be a block of others");
        t.terms.push_back({p, q * Ks * Ns});
      }
      out.push_back(std::move(t));
    }
    return out;
  }
  const std::vector<int64_t> r_off = read_index(a.r_offsets), p_off = read_index(a.p_offsets),
                             q_off = read_index(a.q_offsets);
  const int64_t K = a.others.size(1), N = a.others.size(2), M = a.accumulators.size(1), Ns = N / a.split_n;
  const int64_t G = static_cast<int64_t>(q_off.size());
  const bool compressed = a.format == ScatterMmFormat::bsr_strided_mm_compressed;
  // The bsr_strided_mm_compressed c_indices point into blocks (a BSR's crow_indices); the other into q_offsets.
  check_pointers(op, c, compressed ? P : G);
  for (int64_t i = 0; i < static_cast<int64_t>(r_off.size()); ++i) {
    const int64_t r = r_off[static_cast<size_t>(i)];
    check_range(op, "r_offsets", i, r, 0, M * N, "be an element of an accumulators slice");
    const int64_t r0 = r / N, r1 = r % N;
    LOWBIT_REQUIRE(r0 + Ms <= M && r1 + Ns <= N, ErrorCode::invalid_argument, op, ": r_offsets[", i, "] = ", r,
                   " starts an output block (row ", r0, ", column ", r1, ") that does not fit in ", M, " x ", N);
    Target t{r, {}};
    const auto add = [&](int64_t p, int64_t g) {
      const int64_t q = q_off[static_cast<size_t>(g)];
      check_range(op, "q_offsets", g, q, 0, K * N, "be an element of an others slice");
      const int64_t q0 = q / N, q1 = q % N;
      LOWBIT_REQUIRE(q0 + Ks <= K && q1 + Ns <= N, ErrorCode::invalid_argument, op, ": q_offsets[", g, "] = ", q,
                     " starts a panel (row ", q0, ", column ", q1, ") that does not fit in ", K, " x ", N);
      t.terms.push_back({p, q});
    };
    if (!compressed) {
      LOWBIT_REQUIRE(i + 1 < static_cast<int64_t>(c.size()), ErrorCode::invalid_argument, op,
                     ": c_indices is shorter than r_offsets");
      for (int64_t g = c[static_cast<size_t>(i)]; g < c[static_cast<size_t>(i + 1)]; ++g) {
        const int64_t p = p_off[static_cast<size_t>(g)];
        check_range(op, "p_offsets", g, p, 0, P, "be a block of blocks");
        add(p, g);
      }
    } else {
      const int64_t m = r0 / Ms, n = r1 / Ns;
      LOWBIT_REQUIRE(m + 1 < static_cast<int64_t>(c.size()), ErrorCode::invalid_argument, op, ": r_offsets[", i,
                     "] is in block row ", m, ", past c_indices' ", c.size() - 1, " rows");
      const int64_t c0 = c[static_cast<size_t>(m)], c1 = c[static_cast<size_t>(m + 1)];
      for (int64_t j = 0; j < c1 - c0; ++j) {
        const int64_t g = n * c1 + (a.split_n - n) * c0 + j;
        check_range(op, "q_offsets' index (n * c1 + (split_n - n) * c0 + i)", j, g, 0, G, "be an entry of q_offsets");
        add(c0 + j, g);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

// What every implementation needs of a call: its checked targets, the block
// sizes, the row strides (the strided formats' panels and output blocks sit
// in N-wide rows), the batches, and whether output blocks share elements
// (r_offsets may repeat or overlap: then the call runs in order).
struct Plan {
  std::vector<Target> targets;
  int64_t Ms = 0, Ks = 0, Ns = 0, ld_out = 0, ld_other = 0, batches = 1, out_batch = 0, other_batch = 0;
  bool repeats = false;

  int64_t tasks() const { return batches * static_cast<int64_t>(targets.size()); }
  // Runs one(batch, target) over every task: in parallel unless output blocks share elements.
  template <class Fn>
  void run(Fn&& one) const {
    const int64_t n = static_cast<int64_t>(targets.size());
    const auto task = [&](int64_t t) { one(t / n, targets[static_cast<size_t>(t % n)]); };
    if (repeats) {
      for (int64_t t = 0; t < tasks(); ++t) task(t);
    } else {
      parallel_for(tasks(), tasks() * Ms * Ns * Ks, task);
    }
  }
};

Plan plan_of(const ScatterMmArgs& a) {
  Plan s;
  s.targets = targets_of(a);
  const bool strided = a.format != ScatterMmFormat::scatter_mm;
  s.Ms = a.blocks.size(1);
  s.Ks = a.blocks.size(2);
  s.Ns = strided ? a.others.size(2) / a.split_n : a.others.size(2);
  s.ld_out = strided ? a.accumulators.size(2) : s.Ns;
  s.ld_other = strided ? a.others.size(2) : s.Ns;
  s.batches = strided ? a.others.size(0) : 1;
  s.out_batch = strided ? a.accumulators.size(1) * a.accumulators.size(2) : 0;
  s.other_batch = strided ? a.others.size(1) * a.others.size(2) : 0;
  if (strided) {
    std::vector<uint8_t> covered(static_cast<size_t>(s.out_batch), 0);
    for (const Target& t : s.targets) {
      for (int64_t i = 0; i < s.Ms && !s.repeats; ++i) {
        for (int64_t j = 0; j < s.Ns; ++j) {
          uint8_t& c = covered[static_cast<size_t>(t.at + i * s.ld_out + j)];
          s.repeats = s.repeats || c != 0;
          c = 1;
        }
      }
    }
  }
  return s;
}

// Runs one(b, target, blocks, others, accumulators) over the plan's tasks, with a's arrays typed.
template <class Fn>
void run_typed(const ScatterMmArgs& a, const Plan& s, Fn&& one) {
  with_float_type(a.blocks.dtype, ScatterMmArgs::kName, [&](auto type) {
    using T = decltype(type);
    const T* blocks = a.blocks.ptr<const T>();
    const T* others = a.others.ptr<const T>();
    T* acc = a.accumulators.ptr<T>();
    s.run([&](int64_t b, const Target& t) { one(b, t, blocks, others, acc); });
  });
}

}  // namespace

void scatter_mm_reference(const ScatterMmArgs& a, void*, Stream) {
  const Plan s = plan_of(a);
  const int64_t Ms = s.Ms, Ks = s.Ks, Ns = s.Ns;
  run_typed(a, s, [&](int64_t b, const Target& t, const auto* blocks, const auto* others, auto* acc) {
    using T = std::remove_pointer_t<decltype(acc)>;
    T* o = acc + b * s.out_batch + t.at;
    std::vector<double> sum(static_cast<size_t>(Ms * Ns));
    for (int64_t i = 0; i < Ms; ++i) {
      for (int64_t j = 0; j < Ns; ++j) sum[static_cast<size_t>(i * Ns + j)] = to_f32(o[i * s.ld_out + j]);
    }
    for (const Term& term : t.terms) {
      const T* x = blocks + term.p * Ms * Ks;
      const T* y = others + b * s.other_batch + term.q;
      for (int64_t i = 0; i < Ms; ++i) {
        for (int64_t k = 0; k < Ks; ++k) {
          const double xv = to_f32(x[i * Ks + k]);
          for (int64_t j = 0; j < Ns; ++j) {
            sum[static_cast<size_t>(i * Ns + j)] += xv * static_cast<double>(to_f32(y[k * s.ld_other + j]));
          }
        }
      }
    }
    for (int64_t i = 0; i < Ms; ++i) {
      for (int64_t j = 0; j < Ns; ++j) {
        o[i * s.ld_out + j] = from_f32<T>(static_cast<float>(sum[static_cast<size_t>(i * Ns + j)]));
      }
    }
  });
}

void scatter_mm_fast(const ScatterMmArgs& a, void*, Stream) {
  const Plan s = plan_of(a);
  const int64_t Ms = s.Ms, Ks = s.Ks, Ns = s.Ns;
  run_typed(a, s, [&](int64_t b, const Target& t, const auto* blocks, const auto* others, auto* acc) {
    using T = std::remove_pointer_t<decltype(acc)>;
    // The thread's buffers, grown once: the block's sums, a block and a panel of others in fp32.
    thread_local std::vector<float> sum, blk, pan;
    sum.resize(static_cast<size_t>(Ms * Ns));
    blk.resize(static_cast<size_t>(Ms * Ks));
    pan.resize(static_cast<size_t>(Ks * Ns));
    T* o = acc + b * s.out_batch + t.at;
    for (int64_t i = 0; i < Ms; ++i) to_f32_span(o + i * s.ld_out, Ns, sum.data() + i * Ns);
    for (const Term& term : t.terms) {
      to_f32_span(blocks + term.p * Ms * Ks, Ms * Ks, blk.data());
      const T* y = others + b * s.other_batch + term.q;
      const float* d = nullptr;
      int64_t ds = Ns;
      if constexpr (std::is_same_v<T, float>) {
        d = y;  // read in place
        ds = s.ld_other;
      } else {
        for (int64_t k = 0; k < Ks; ++k) to_f32_span(y + k * s.ld_other, Ns, pan.data() + k * Ns);
        d = pan.data();
      }
      block_product(sum.data(), Ns, blk.data(), Ms, Ks, d, ds, Ns);
    }
    for (int64_t i = 0; i < Ms; ++i) from_f32_span(sum.data() + i * Ns, Ns, o + i * s.ld_out);
  });
}

}  // namespace lowbit::core::cpu
