// oneDNN's matmul for the CPU matmuls' large-M path (onednn.h).
#include "cpu/gemm/onednn.h"

#include <map>
#include <mutex>
#include <string_view>
#include <tuple>

#include "core/check.h"
#include "cpu/isa.h"

#if defined(LOWBIT_WITH_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace lowbit::core::cpu::gemm {

#if defined(LOWBIT_WITH_ONEDNN)

bool onednn_available() { return true; }

namespace {

struct Cached {
  dnnl::matmul prim;
  dnnl::memory::desc a, w, c;
};

// oneDNN's own dispatch capped as LOWBIT_CPU_ISA caps lowbit's (cpu/isa.h), so a capped run tests the paths
// such a CPU takes; it holds only before oneDNN's first primitive, and is left as it is where it no longer can.
void cap_onednn_isa() {
  const std::string_view cap = isa_cap();
  if (cap != "avx2" && cap != "baseline") return;
  try {
    dnnl::set_max_cpu_isa(cap == "avx2" ? dnnl::cpu_isa::avx2 : dnnl::cpu_isa::sse41);
  } catch (const dnnl::error&) {
  }
}

dnnl::engine& engine() {
  static dnnl::engine e = [] {
    cap_onednn_isa();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

// The matmul primitive of a · w into c, in either oneDNN API; throws dnnl::error where the CPU has no kernel.
dnnl::matmul::primitive_desc matmul_pd(const dnnl::memory::desc& a, const dnnl::memory::desc& w,
                                       const dnnl::memory::desc& c) {
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::matmul::primitive_desc(engine(), a, w, c);
#else
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, w, c), engine());
#endif
}

// c = a · wᵀ with a and w of type `t` (onednn.h).
void onednn_matmul(dnnl::memory::data_type t, int64_t M, int64_t n, int64_t K, const void* a, int64_t lda,
                   const void* w, float* c, int64_t ldc) {
  static std::mutex mu;
  static std::map<std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t>, Cached> cache;
  Cached k;
  {
    const std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_tuple(static_cast<int>(t), M, n, K, lda, ldc);
    auto it = cache.find(key);
    if (it == cache.end()) {
      if (cache.size() >= 64) cache.clear();  // a bound for callers whose M keeps changing (primitives are rebuilt)
      Cached fresh;
      fresh.a = dnnl::memory::desc({M, K}, t, dnnl::memory::dims{lda, 1});
      fresh.w = dnnl::memory::desc({K, n}, t, dnnl::memory::dims{1, K});  // w's rows as columns
      fresh.c = dnnl::memory::desc({M, n}, dnnl::memory::data_type::f32, dnnl::memory::dims{ldc, 1});
      fresh.prim = dnnl::matmul(matmul_pd(fresh.a, fresh.w, fresh.c));
      it = cache.emplace(key, fresh).first;
    }
    k = it->second;
  }
  // One call at a time: the primitives share oneDNN's library-held scratchpad (each call is itself parallel).
  static std::mutex exec_mu;
  const std::lock_guard<std::mutex> lock(exec_mu);
  dnnl::stream s(engine());
  dnnl::memory am(k.a, engine(), const_cast<void*>(a)), wm(k.w, engine(), const_cast<void*>(w)), cm(k.c, engine(), c);
  k.prim.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, cm}});
  s.wait();
}

}  // namespace

bool onednn_bf16_available() {
  static const bool yes = [] {
    try {  // oneDNN refuses the primitive where the CPU has no bf16 kernel
      const auto bf16 = dnnl::memory::data_type::bf16;
      const dnnl::memory::desc a({2, 32}, bf16, dnnl::memory::dims{32, 1}), w({32, 2}, bf16, dnnl::memory::dims{1, 32}),
          c({2, 2}, dnnl::memory::data_type::f32, dnnl::memory::dims{2, 1});
      matmul_pd(a, w, c);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return yes;
}

void onednn_bf16_matmul(int64_t M, int64_t n, int64_t K, const uint16_t* a, int64_t lda, const uint16_t* w, float* c,
                        int64_t ldc) {
  onednn_matmul(dnnl::memory::data_type::bf16, M, n, K, a, lda, w, c, ldc);
}

void onednn_f32_matmul(int64_t M, int64_t n, int64_t K, const float* a, int64_t lda, const float* w, float* c,
                       int64_t ldc) {
  onednn_matmul(dnnl::memory::data_type::f32, M, n, K, a, lda, w, c, ldc);
}

#else

bool onednn_available() { return false; }
bool onednn_bf16_available() { return false; }

void onednn_bf16_matmul(int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*, float*, int64_t) {
  core::fail(ErrorCode::internal, "onednn_bf16_matmul: this build has no oneDNN");
}

void onednn_f32_matmul(int64_t, int64_t, int64_t, const float*, int64_t, const float*, float*, int64_t) {
  core::fail(ErrorCode::internal, "onednn_f32_matmul: this build has no oneDNN");
}

#endif

}  // namespace lowbit::core::cpu::gemm
