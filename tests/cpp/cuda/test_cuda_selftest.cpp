// The CUDA fast paths are the core definitions: every hardware conversion,
// the CodeSearch encoder and the optimizer states' encoder (on sorted maps,
// the op's contract), checked on the GPU over all inputs (2^32 for fp32).
#include <vector>

#include "cuda_test_util.h"
#include "lowbit/code_maps.h"

#if defined(LOWBIT_WITH_CUDA)
#include "cuda/quant/selftest.h"
#endif

namespace {

#if defined(LOWBIT_WITH_CUDA)
using lowbit::cuda::selftest::Conversion;
using lowbit::cuda::selftest::Result;

void expect_clean(const Result& r, const char* what) {
  EXPECT_GT(r.checked, 0u) << what;
  EXPECT_EQ(r.mismatches, 0u) << what << ": " << r.mismatches << " of " << r.checked
                              << " inputs differ from src/core; first: 0x" << std::hex << r.first_bad_input;
}
#endif

TEST(CudaSelftest, HardwareConversionsEqualCore) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  expect_clean(check_conversion(Conversion::f16_to_f32), "f16 -> f32");
  expect_clean(check_conversion(Conversion::e4m3_to_f32), "e4m3 -> f32");
  expect_clean(check_conversion(Conversion::f32_to_f16), "f32 -> f16");
  expect_clean(check_conversion(Conversion::f32_to_bf16), "f32 -> bf16");
  expect_clean(check_conversion(Conversion::f32_to_e4m3_sat), "f32 -> e4m3 (saturating)");
#endif
}

#if defined(LOWBIT_WITH_CUDA)
struct Map {
  const char* name;
  std::vector<float> code;
};

// Sorted maps: bitsandbytes' and odd ones (crowded buckets, equal runs, ±0).
std::vector<Map> sorted_maps() {
  std::vector<Map> maps = {
      {"dynamic signed", lowbit::create_dynamic_map(true)},
      {"dynamic unsigned", lowbit::create_dynamic_map(false)},
      {"linear (zero run)", lowbit::create_linear_map(true, 8, true)},
      {"normal", lowbit::create_normal_map()},
      {"fp8 e4m3", lowbit::create_fp8_map(true, 4, 3, 8)},
  };
  // A sorted map with a run of equal values and ±0 at the center.
  std::vector<float> runs(256);
  for (int i = 0; i < 256; ++i)
    runs[i] = i < 100 ? -1.0f + 0.01f * i : (i < 156 ? (i < 128 ? -0.0f : 0.0f) : 0.5f + 0.003f * (i - 156));
  maps.push_back({"runs and signed zeros", runs});
  return maps;
}
#endif

TEST(CudaSelftest, CodeSearchEqualsBinarySearchOnEveryFloat) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  for (const Map& m : sorted_maps()) {
    ASSERT_EQ(m.code.size(), 256u) << m.name;
    expect_clean(lowbit::cuda::selftest::check_code_search(m.code.data()), m.name);
  }
#endif
}

TEST(CudaSelftest, OptimizerStateCodesEqualCoreOnEveryFloat) {
  LOWBIT_REQUIRE_CUDA_DEVICE();
#if defined(LOWBIT_WITH_CUDA)
  for (const Map& m : sorted_maps()) {
    ASSERT_EQ(m.code.size(), 256u) << m.name;
    expect_clean(lowbit::cuda::selftest::check_state_codes(m.code.data()), m.name);
  }
#endif
}

}  // namespace
