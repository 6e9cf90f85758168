// LOWBIT_CPU_ISA and the CPU's features (isa.h).
#include "cpu/isa.h"

#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "core/check.h"
#include "cpu/hwy_targets.h"

namespace lowbit::core::cpu {
namespace {

const char* env_value() {
  const char* v = std::getenv("LOWBIT_CPU_ISA");
  return v != nullptr ? v : "";
}

// 2: every feature, 1: up to AVX2, 0: none of those isa.h names, -1: an unknown value.
int parsed_level() {
  static const int level = [] {
    const std::string s = env_value();
    if (s.empty() || s == "native" || s == "avx512") return 2;
    if (s == "avx2") return 1;
    if (s == "baseline") return 0;
    return -1;
  }();
  return level;
}

// Kernels never throw here (they may run inside OpenMP regions): an unknown
// value is refused by isa_cap(), which the CPU backend calls before it registers.
int cap_level() { return parsed_level() < 0 ? 2 : parsed_level(); }

#if defined(__x86_64__) || defined(__i386__)
// CPUID bit `bit` of register `reg` (0 eax .. 3 edx) of leaf / subleaf, for the
// features some compilers' __builtin_cpu_supports does not name (clang 14: f16c,
// avx512bf16); the OS's support of their registers comes from avx / avx512f.
bool cpuid_bit(unsigned leaf, unsigned subleaf, int reg, int bit) {
  unsigned r[4] = {0, 0, 0, 0};
  if (__get_cpuid_count(leaf, subleaf, &r[0], &r[1], &r[2], &r[3]) == 0) return false;
  return ((r[reg] >> bit) & 1u) != 0;
}
#endif

bool has(Feature f) {
#if defined(__x86_64__) || defined(__i386__)
  switch (f) {  // __builtin_cpu_supports takes literals only
    case Feature::avx: return __builtin_cpu_supports("avx");
    case Feature::f16c: return __builtin_cpu_supports("avx") && cpuid_bit(1, 0, 2, 29);
    case Feature::avx2: return __builtin_cpu_supports("avx2");
    case Feature::fma: return __builtin_cpu_supports("fma");
    case Feature::bmi2: return __builtin_cpu_supports("bmi2");
    case Feature::avx512f: return __builtin_cpu_supports("avx512f");
    case Feature::avx512bw: return __builtin_cpu_supports("avx512bw");
    case Feature::avx512dq: return __builtin_cpu_supports("avx512dq");
    case Feature::avx512vl: return __builtin_cpu_supports("avx512vl");
    case Feature::avx512bf16: return __builtin_cpu_supports("avx512f") && cpuid_bit(7, 1, 0, 5);
    case Feature::avx512vnni: return __builtin_cpu_supports("avx512vnni");
  }
#endif
  (void)f;
  return false;
}

int level_of(Feature f) {
  switch (f) {
    case Feature::avx:
    case Feature::f16c:
    case Feature::avx2:
    case Feature::fma:
    case Feature::bmi2: return 1;
    default: return 2;
  }
}

}  // namespace

bool supports(Feature f) { return level_of(f) <= cap_level() && has(f); }

std::string_view isa_cap() {
  LOWBIT_REQUIRE(parsed_level() >= 0, ErrorCode::invalid_argument,
                 "LOWBIT_CPU_ISA must be native, avx512, avx2 or baseline (got '", env_value(), "')");
  switch (cap_level()) {
    case 0: return "baseline";
    case 1: return "avx2";
    default: return "native";
  }
}

HwyTarget hwy_target() {
#if defined(__x86_64__) || defined(__i386__)
  const bool avx2 =
      supports(Feature::avx2) && supports(Feature::fma) && supports(Feature::f16c) && supports(Feature::bmi2);
  if (avx2 && supports(Feature::avx512f) && supports(Feature::avx512bw) && supports(Feature::avx512dq) &&
      supports(Feature::avx512vl)) {
    return HwyTarget::avx3;
  }
  return avx2 ? HwyTarget::avx2 : HwyTarget::sse4;
#else
  return HwyTarget::other;
#endif
}

}  // namespace lowbit::core::cpu
