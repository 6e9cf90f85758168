// LOWBIT_CPU_ISA caps the features lowbit's kernel dispatch sees; ctest runs
// the CPU suites again under "avx2" and "baseline" (tests/CMakeLists.txt),
// and this test checks each run gets the cap it asked for.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cpu/isa.h"

namespace lowbit::test {
namespace {

using core::cpu::Feature;
using core::cpu::isa_cap;
using core::cpu::supports;

TEST(CpuIsa, TheCapFollowsTheEnvironment) {
  const char* env = std::getenv("LOWBIT_CPU_ISA");
  const std::string want = env == nullptr || *env == '\0' || std::string(env) == "avx512" ? "native" : env;
  EXPECT_EQ(isa_cap(), want);
  if (want != "native") {
    for (Feature f : {Feature::avx512f, Feature::avx512bw, Feature::avx512dq, Feature::avx512vl, Feature::avx512bf16,
                      Feature::avx512vnni}) {
      EXPECT_FALSE(supports(f)) << static_cast<int>(f);
    }
  }
  if (want == "baseline") {
    for (Feature f : {Feature::avx, Feature::f16c, Feature::avx2, Feature::fma, Feature::bmi2}) {
      EXPECT_FALSE(supports(f));
    }
  }
  // A feature the cap allows is reported only where the CPU has it: AVX-512 implies AVX2 on every x86 CPU.
  if (supports(Feature::avx512f)) {
    EXPECT_TRUE(supports(Feature::avx2));
  }
}

}  // namespace
}  // namespace lowbit::test
